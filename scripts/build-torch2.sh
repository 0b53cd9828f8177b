#!/usr/bin/env bash
# build-torch2.sh: configures and builds gtrain against a pip-installed LibTorch 2.x with CUDA.
#
# This is how a user on a cluster builds gtrain against the torch they `pip install`ed, and how CI
# (label torch2) and bench/gpu_gpt2.sh build: LibTorch from torch.utils.cmake_prefix_path, the CUDA
# toolkit (CUDA_HOME, else /usr/local/cuda, else the nvcc on PATH), and the NCCL that the torch wheel
# ships (nvidia/nccl in site-packages), so torch and gtrain's communicator load one NCCL. CUDA and
# NCCL are required (ON): a CPU-only torch is refused at configure time with one line.
#
#   scripts/build-torch2.sh [--configure-only] [BUILD_DIR] [-- CMAKE_ARGS...]   (default: build-torch2)
#
# Environment: PYTHON, a python whose torch to use (default: the project venv's, scripts/venv.sh;
# when that is missing the script says why and exits 77, ctest's "skipped"); EXTRA_PREFIX, more
# CMAKE_PREFIX_PATH entries (';'-separated); BUILD_TYPE (default RelWithDebInfo); JOBS (default nproc).
# A configured BUILD_DIR is reconfigured only when its LibTorch or CMAKE_ARGS differ; the build is
# incremental (the sanitized tree of the torch2 label passes -DGTRAIN_SANITIZE=... here).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
configure_only=0
[[ ${1:-} == --configure-only ]] && { configure_only=1; shift; }
build=build-torch2
if [[ $# -gt 0 && $1 != -- ]]; then build=$1; shift; fi
[[ ${1:-} == -- ]] && shift
[[ $build == /* ]] || build=$root/$build

if [[ -z ${PYTHON:-} ]]; then
  PYTHON=$("$root/scripts/venv.sh" python) || { echo "$PYTHON"; exit 77; }
fi
facts=$("$PYTHON" - <<'PY'
import os, torch
nccl = ""
try:
    import nvidia.nccl as n
    d = list(n.__path__)[0]
    if os.path.isfile(os.path.join(d, "include", "nccl.h")):
        nccl = d
except ImportError:
    pass
# The CUDA runtime the wheel loads (nvidia/cu13/lib for CUDA 13 wheels, nvidia/cuda_runtime/lib for 12).
import glob
site = os.path.dirname(os.path.dirname(torch.__file__))
cudart = sorted(glob.glob(os.path.join(site, "nvidia", "*", "lib", "libcudart.so.[0-9]*")))
print(torch.utils.cmake_prefix_path, torch.__version__, torch.version.cuda or "none",
      int(torch._C._GLIBCXX_USE_CXX11_ABI), nccl or "-", cudart[0] if cudart else "-")
PY
) || { echo "build-torch2: $PYTHON cannot import torch (set PYTHON to a python with torch)" >&2; exit 2; }
read -r torch_cmake torch_version torch_cuda cxx11_abi nccl_dir cudart <<<"$facts"
# The torch folder itself (not torch.utils.cmake_prefix_path, its share/cmake) goes first on the
# prefix path: LibTorch's CMake files look its libraries up by name, and CMake searches the prefix
# path's lib/ before the system's, where a Debian libtorch-dev would otherwise be found instead.
torch_prefix=$(dirname "$(dirname "$torch_cmake")")
[[ $torch_cuda != none ]] || { echo "build-torch2: $PYTHON has torch $torch_version without CUDA; install the CUDA wheel (pip install torch)" >&2; exit 2; }
[[ $cxx11_abi == 1 ]] || { echo "build-torch2: torch $torch_version was built with the pre-C++11 string ABI, which Debian's GoogleTest, toml++ and MPI cannot link with; use torch 2.7 or later (pip's default wheels since then use the C++11 ABI)" >&2; exit 2; }

if [[ -z ${CUDA_HOME:-} ]]; then
  if [[ -x /usr/local/cuda/bin/nvcc ]]; then CUDA_HOME=/usr/local/cuda
  elif command -v nvcc >/dev/null; then CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc)")")")
  else echo "build-torch2: no CUDA toolkit found (set CUDA_HOME; LibTorch's CMake files need nvcc and the CUDA headers)" >&2; exit 2
  fi
fi
export CUDA_HOME
toolkit=$("$CUDA_HOME/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')
if [[ ${toolkit%%.*} != "${torch_cuda%%.*}" ]]; then
  echo "build-torch2: warning: CUDA toolkit $toolkit at $CUDA_HOME, torch built with CUDA $torch_cuda: the major versions differ, so libcudart may not match at run time" >&2
fi

args=(-DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" -DGTRAIN_WITH_CUDA=ON -DGTRAIN_WITH_NCCL=ON
      -DCMAKE_PREFIX_PATH="$torch_prefix${EXTRA_PREFIX:+;$EXTRA_PREFIX}"
      -DCUDAToolkit_ROOT="$CUDA_HOME" -DCMAKE_CUDA_COMPILER="$CUDA_HOME/bin/nvcc")
if [[ $nccl_dir != - ]]; then
  args+=(-DNCCL_INCLUDE_DIR="$nccl_dir/include" -DNCCL_LIBRARY="$nccl_dir/lib/libnccl.so.2")
fi
# Link the wheel's libcudart, not the toolkit's: one process loads one libcudart.so.N (by soname),
# and torch's libraries were built and tested with the wheel's.
if [[ $cudart != - ]]; then
  args+=(-DCUDA_cudart_LIBRARY="$cudart" -DCUDART_LIBRARY="$cudart")
fi
gen="Unix Makefiles"; command -v ninja >/dev/null && gen=Ninja
stamp="torch $torch_version cuda $torch_cuda at $torch_prefix; toolkit $toolkit; nccl ${nccl_dir/#-/system}; cudart ${cudart/#-/toolkit}"
echo "build-torch2: $stamp${*:+; cmake $*}"
stamp="$stamp; cmake $*"
if [[ ! -f $build/CMakeCache.txt || "$(cat "$build/.torch2-stamp" 2>/dev/null)" != "$stamp" ]]; then
  mkdir -p "$build" && rm -f "$build/CMakeCache.txt"
  cmake -S "$root" -B "$build" -G "$gen" "${args[@]}" "$@" >"$build/torch2-configure.log" 2>&1 ||
    { tail -25 "$build/torch2-configure.log"; echo "build-torch2: cmake configure failed (log: $build/torch2-configure.log)" >&2; exit 1; }
  grep "gtrain:" "$build/torch2-configure.log" || true
  echo "$stamp" >"$build/.torch2-stamp"
fi
((configure_only)) && exit 0
cmake --build "$build" -j "${JOBS:-$(nproc)}"
