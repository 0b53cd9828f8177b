#!/usr/bin/env bash
# links_cuda.sh: the torch2 build's binaries link the pip wheel's CUDA LibTorch and NCCL, and start.
#   tests/torch2/links_cuda.sh TORCH2_BUILD_DIR
# Checks, for gtrain-worker and gtrain_gpu_tests: readelf lists libtorch_cuda.so and libtorch.so as
# NEEDED; ldd resolves them (and libc10_cuda.so, libc10.so) inside the venv's torch/lib, not to a
# system LibTorch; gtrain-worker's libnccl and libcudart are the wheel's. Then gtrain (through
# gtrain-worker) loads them and answers.
set -euo pipefail
build=$1
py=$("$(dirname "$0")/../../scripts/venv.sh" python) || { echo "$py"; exit 77; }
torch_lib=$("$py" -c 'import importlib.util, os; print(os.path.join(os.path.dirname(importlib.util.find_spec("torch").origin), "lib"))')
torch_lib=$(realpath "$torch_lib")
fail=0
for bin in gtrain-worker gtrain_gpu_tests; do
  f=$(find "$build" -maxdepth 3 -type f -name "$bin" -perm -u+x | head -1)
  [[ -n $f ]] || { echo "FAIL: $bin not found under $build"; fail=1; continue; }
  needed=$(readelf -d "$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  resolved=$(ldd "$f")
  # libstdc++ before libtorch: the wheel exports its own copy of std::filesystem (CMakeLists.txt).
  first=$(grep -m1 -nx 'libstdc++.so.6' <<<"$needed" | cut -d: -f1)
  torch_at=$(grep -m1 -nx 'libtorch.so' <<<"$needed" | cut -d: -f1)
  if [[ -z $first || -z $torch_at || $first -gt $torch_at ]]; then
    echo "FAIL: $bin: libstdc++.so.6 is not NEEDED before libtorch.so"; fail=1
  else echo "ok: $bin: libstdc++.so.6 is NEEDED before libtorch.so"
  fi
  for lib in libtorch_cuda.so libc10_cuda.so libtorch.so libc10.so; do
    # The executables link these two themselves; the c10 ones come with them.
    if [[ $lib == libtorch*.so ]] && ! grep -qx "$lib" <<<"$needed"; then
      echo "FAIL: $bin: readelf -d lists no NEEDED $lib"; fail=1; continue
    fi
    path=$(awk -v l="$lib" '$1 == l {print $3}' <<<"$resolved")
    if [[ -z $path || $path == not ]]; then echo "FAIL: $bin: ldd cannot resolve $lib"; fail=1; continue; fi
    path=$(realpath "$path")
    if [[ $path != "$torch_lib"/* ]]; then echo "FAIL: $bin: $lib resolves to $path, not into $torch_lib"; fail=1; continue; fi
    echo "ok: $bin: $lib -> $path"
  done
done
worker=$build/gtrain-worker
nccl=$(ldd "$worker" | awk '$1 ~ /^libnccl\.so/ {print $3}')
if [[ -z $nccl ]]; then echo "FAIL: gtrain-worker does not link libnccl"; fail=1
elif [[ $(realpath "$nccl") != */site-packages/nvidia/nccl/lib/* ]]; then echo "FAIL: gtrain-worker's libnccl is $nccl, not the wheel's"; fail=1
else echo "ok: gtrain-worker: libnccl -> $(realpath "$nccl")"
fi
# One CUDA runtime in the process, the wheel's (the one torch's libraries were built with).
cudart=$(ldd "$worker" | awk '$1 ~ /^libcudart\.so/ {print $3}')
if [[ -z $cudart ]]; then echo "FAIL: gtrain-worker loads no libcudart"; fail=1
elif [[ $(realpath "$cudart") != */site-packages/nvidia/* ]]; then echo "FAIL: gtrain-worker's libcudart is $cudart, not the wheel's"; fail=1
else echo "ok: gtrain-worker: libcudart -> $(realpath "$cudart")"
fi
# It starts with those libraries loaded (no GPU is needed for that) and lists its models.
if out=$("$build/gtrain" models 2>&1) && grep -qx gpt <<<"$out"; then echo "ok: $build/gtrain models lists gpt"
else echo "FAIL: $build/gtrain models: $out"; fail=1
fi
exit $fail
