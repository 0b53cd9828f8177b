#!/usr/bin/env bash
# compile-check-torch2.sh: compiles every LibTorch translation unit against LibTorch 2.x CUDA headers.
#
# Debian 12 ships LibTorch 1.13 (CPU), so the code behind `#if TORCH_VERSION ≥ 2.x` in
# runtime/common/torch_compat.h (fused AdamW, the 2.4 autocast API, SDPA) and the CUDA-only code
# never compile in the ordinary build. This script fetches Debian trixie's libtorch-cuda-dev
# (LibTorch 2.6 built with CUDA; headers only are used, nothing is installed) and re-runs each
# compile command of an existing build tree with -fsyntax-only, GTRAIN_WITH_CUDA=1 and those headers
# first on the include path. It needs a configured build (compile_commands.json) and the CUDA
# headers at /usr/local/cuda (or CUDA_HOME).
#
#   scripts/compile-check-torch2.sh [BUILD_DIR]     (default: build)
#
# Exit: 0 all compile, 1 some do not, 2 usage, 77 the headers could not be fetched (skipped).
# Environment: GTRAIN_DEBIAN_MIRROR (default http://deb.debian.org/debian); GTRAIN_TORCH2_ROOT, a folder holding an unpacked LibTorch 2.x (usr/include/...) to use
# instead of the download; JOBS, parallel compiles (default: nproc).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
build=$(cd "$build" && pwd)
cuda_home=${CUDA_HOME:-/usr/local/cuda}
jobs=${JOBS:-$(nproc)}

[[ -f $build/compile_commands.json ]] || { echo "compile-check-torch2: $build/compile_commands.json not found; configure a build first (make build)" >&2; exit 2; }
[[ -f $cuda_home/include/cuda_runtime_api.h ]] || { echo "compile-check-torch2: CUDA headers not found at $cuda_home/include (set CUDA_HOME)" >&2; exit 2; }

root=${GTRAIN_TORCH2_ROOT:-$build/torch2-headers}
if [[ ! -f $root/usr/include/torch/csrc/api/include/torch/version.h ]]; then
  work=$build/torch2-download
  rm -rf "$work" && mkdir -p "$work/lists/partial" "$work/archives/partial"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] ${GTRAIN_DEBIAN_MIRROR:-http://deb.debian.org/debian} trixie main contrib" > "$work/sources.list"
  apt_opts=(-o Dir::Etc::sourcelist="$work/sources.list" -o Dir::Etc::sourceparts=- -o Dir::State::Lists="$work/lists"
            -o Dir::Cache::Archives="$work/archives" -o APT::Sandbox::User=root)
  echo "compile-check-torch2: fetching libtorch-cuda-dev from Debian trixie (headers only)"
  # Exit 77 (ctest: skipped, and said so) when Debian's archive cannot be reached: no verdict then.
  fetched=0
  for try in 1 2 3; do
    if apt-get "${apt_opts[@]}" -qq update && (cd "$work" && apt-get "${apt_opts[@]}" -qq download libtorch-cuda-dev); then
      fetched=1 && break
    fi
    sleep $((try * 5))
  done
  ((fetched)) || { echo "compile-check-torch2: SKIPPED: could not fetch libtorch-cuda-dev from Debian trixie" >&2; exit 77; }
  rm -rf "$root" && mkdir -p "$root"
  dpkg -x "$work"/libtorch-cuda-dev_*.deb "$root"
  rm -rf "$work"
fi
inc=$root/usr/include
version=$(for part in MAJOR MINOR PATCH; do sed -n "s/^#define TORCH_VERSION_$part \([0-9]*\)/\1/p" \
  "$inc/torch/csrc/api/include/torch/version.h"; done | paste -sd. -)
echo "compile-check-torch2: LibTorch $version headers in $inc, CUDA headers in $cuda_home/include, $jobs jobs"

# One command per source file; the CUDA compile-check target's flavour wins where a file has both.
out=$build/torch2-check
mkdir -p "$out"
python3 - "$build/compile_commands.json" "$inc" "$cuda_home/include" "$out" <<'EOF'
import json, shlex, sys, os
db, inc, cuda_inc, out = sys.argv[1:5]
by_file = {}
for e in json.load(open(db)):
    args = shlex.split(e["command"])
    if not any("torch/csrc/api/include" in a for a in args):
        continue  # torch-free translation unit
    prefer = "gtrain_cuda_compile_check" in e["command"]
    if e["file"] in by_file and not prefer:
        continue
    new = []
    skip = False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a in ("-include", "-o"):
            skip = True  # the precompiled header (1.13 flavour) and the object file
            continue
        if a in ("-c", "-Winvalid-pch", "-g1") or "cuda-compile-check-shim" in a:
            continue
        if a == "/usr/include/torch/csrc/api/include":
            new += [f"{inc}/torch/csrc/api/include", "-isystem", inc]
            continue
        new.append(a)
    for d in ("-DGTRAIN_WITH_CUDA=1", f"-I{cuda_inc}"):
        if d not in new:
            new.insert(1, d)
    new.append("-fsyntax-only")
    by_file[e["file"]] = (e["directory"], new)
for n, (f, (d, cmd)) in enumerate(sorted(by_file.items())):
    with open(os.path.join(out, f"{n:03d}.sh"), "w") as fh:
        fh.write(f"cd {shlex.quote(d)} && {shlex.join(cmd)}\n")
EOF

count=$(ls "$out"/*.sh | wc -l)
failed=0
ls "$out"/*.sh | xargs -P "$jobs" -I{} bash -c 'if ! bash "$1" > "${1%.sh}.log" 2>&1; then echo "FAILED: $(grep -o "[^ ]*\.cpp -fsyntax-only$" "$1" | cut -d" " -f1)"; fi' _ {} | tee "$out/failed.txt"
failed=$(wc -l < "$out/failed.txt")
for log in "$out"/*.log; do [[ -s $log ]] && { echo "== ${log}"; grep -E "error|warning" "$log" | head -20; }; done || true
echo "compile-check-torch2: $((count - failed)) of $count translation units compile against LibTorch $version with CUDA; $failed failed"
[[ $failed -eq 0 ]]
