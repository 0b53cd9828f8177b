#!/usr/bin/env bash
# compile-check-torch2.sh: compiles every LibTorch translation unit against LibTorch 2.x headers.
#
# Debian 12 ships LibTorch 1.13 (CPU), so the code behind `#if TORCH_VERSION ≥ 2.x` in
# runtime/common/torch_compat.h (fused AdamW, the 2.4 autocast API, SDPA) and the CUDA-only code
# never compile in the ordinary build. This script fetches a Debian LibTorch 2.x development package
# (headers only are used, nothing is installed) and re-runs each compile command of an existing
# build tree with -fsyntax-only, GTRAIN_WITH_CUDA=1 and those headers first on the include path,
# in the C++ standard the headers demand (C++20 from LibTorch 2.14). It needs a configured build
# (compile_commands.json) and the CUDA headers at /usr/local/cuda (or CUDA_HOME).
#
#   scripts/compile-check-torch2.sh [BUILD_DIR] [PACKAGE]     (defaults: build, trixie)
#
# PACKAGE: trixie  Debian 13's libtorch-cuda-dev 2.6.0 (LibTorch built with CUDA);
#          sid     Debian unstable's libtorch-dev 2.14.1 (a CPU build that still ships the c10/cuda
#                  and ATen/cuda headers; the one generated CUDA header it lacks is written here).
#                  The version is pinned so that the check does not move under a commit; when sid
#                  has moved on, the check is skipped and says to update the pin below.
# Exit: 0 all compile, 1 some do not, 2 usage, 77 the headers could not be fetched (skipped).
# Environment: GTRAIN_DEBIAN_MIRROR (default http://deb.debian.org/debian); GTRAIN_TORCH2_ROOT, a
# folder holding an unpacked LibTorch 2.x (usr/include/...) to use instead of the download; JOBS,
# parallel compiles (default: nproc).
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
build=$(cd "$build" && pwd)
cuda_home=${CUDA_HOME:-/usr/local/cuda}
jobs=${JOBS:-$(nproc)}
package=${2:-trixie}
case $package in
  trixie) suite=trixie; deb=libtorch-cuda-dev ;;
  sid) suite=sid; deb=libtorch-dev=2.14.1+dfsg-1 ;;
  *) echo "compile-check-torch2: PACKAGE must be trixie or sid, got '$package'" >&2; exit 2 ;;
esac

[[ -f $build/compile_commands.json ]] || { echo "compile-check-torch2: $build/compile_commands.json not found; configure a build first (make build)" >&2; exit 2; }
[[ -f $cuda_home/include/cuda_runtime_api.h ]] || { echo "compile-check-torch2: CUDA headers not found at $cuda_home/include (set CUDA_HOME)" >&2; exit 2; }

root=${GTRAIN_TORCH2_ROOT:-$build/torch2-headers-$package}
if [[ ! -f $root/usr/include/torch/csrc/api/include/torch/version.h ]]; then
  work=$build/torch2-download-$package
  rm -rf "$work" && mkdir -p "$work/lists/partial" "$work/archives/partial"
  echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] ${GTRAIN_DEBIAN_MIRROR:-http://deb.debian.org/debian} $suite main contrib" > "$work/sources.list"
  apt_opts=(-o Dir::Etc::sourcelist="$work/sources.list" -o Dir::Etc::sourceparts=- -o Dir::State::Lists="$work/lists"
            -o Dir::Cache::Archives="$work/archives" -o APT::Sandbox::User=root
            -o Acquire::Check-Valid-Until=false)  # a mirror snapshot's sid Release may be past its date
  echo "compile-check-torch2: fetching $deb from Debian $suite (headers only)"
  # Exit 77 (ctest: skipped, and said so) when Debian's archive cannot be reached, or no longer has
  # the pinned version: no verdict then.
  fetched=0 listed=0
  for try in 1 2 3; do
    if apt-get "${apt_opts[@]}" -qq update; then
      listed=1
      if (cd "$work" && apt-get "${apt_opts[@]}" -qq download "$deb"); then fetched=1 && break; fi
    fi
    sleep $((try * 5))
  done
  if ((!fetched)); then
    if ((listed)); then
      echo "compile-check-torch2: SKIPPED: Debian $suite no longer has $deb; update the pin in $0" >&2
    else
      echo "compile-check-torch2: SKIPPED: could not reach Debian's archive for $deb ($suite)" >&2
    fi
    exit 77
  fi
  rm -rf "$root" && mkdir -p "$root"
  dpkg -x "$work"/*.deb "$root"
  rm -rf "$work"
fi
inc=$root/usr/include
# A CPU-built LibTorch ships c10/cuda's headers without the one CMake generates for a CUDA build.
macros=$inc/c10/cuda/impl/cuda_cmake_macros.h
if [[ -f $inc/c10/cuda/CUDAMacros.h && ! -f $macros ]]; then
  printf '#pragma once\n// Written by compile-check-torch2.sh: a CUDA build of LibTorch generates this.\n#define C10_CUDA_BUILD_SHARED_LIBS\n' > "$macros"
fi
# The version numbers: torch/version.h (2.6), torch/headeronly/version.h (2.14).
version_h=()
for f in torch/csrc/api/include/torch/version.h torch/headeronly/version.h; do
  [[ -f $inc/$f ]] && version_h+=("$inc/$f")
done
version=$(for part in MAJOR MINOR PATCH; do
  sed -n "s/^#define TORCH_VERSION_$part \([0-9]*\)/\1/p" "${version_h[@]}" | head -1; done | paste -sd. -)
echo "compile-check-torch2: LibTorch $version headers in $inc, CUDA headers in $cuda_home/include, $jobs jobs"

# One command per source file; the CUDA compile-check target's flavour wins where a file has both.
out=$build/torch2-check-$package
rm -rf "$out"
mkdir -p "$out"
# LibTorch 2.14 and later refuse anything older than C++20 (as gtrain's CMakeLists does, follow them).
std=
grep -q "C++20 or later" "$inc/ATen/ATen.h" && std=-std=c++20
python3 - "$build/compile_commands.json" "$inc" "$cuda_home/include" "$out" "$std" <<'EOF'
import json, shlex, sys, os
db, inc, cuda_inc, out, std = sys.argv[1:6]
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
        if std and a.startswith("-std="):
            new.append(std)
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
