#!/usr/bin/env bash
# Packs a CUDA build made on this machine (gtrain, gtrain-worker, the gpu test suite and the shared
# libraries they need that neither torch's wheel nor a base system provides) into bench/.gpubuild
# (git-ignored), so a lent GPU machine spends its minutes measuring rather than compiling: carry
# that folder along and run `BUILD=bench/.gpubuild bench/gpu_gpt2.sh --no-build`. The GPU machine's
# python must hold the torch this build was made against (same version and CUDA), which the packed
# BUILD_INFO records and gpu_gpt2.sh checks. A build with MPI also gets this machine's Open MPI
# (bench/gpu_pack_mpi.sh: that machine has none), so bench/gpu_layouts.sh can start several ranks.
#
# Usage: bench/gpu_pack_build.sh [BUILD_DIR]   (default build-cuda, made by
#   BUILD_TYPE=Release scripts/build-torch2.sh --configure-only build-cuda
#   then cmake --build build-cuda --target gtrain gtrain-worker gtrain_gpu_tests)
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
BUILD=${1:-build-cuda}
[[ $BUILD == /* ]] || BUILD=$ROOT/$BUILD
DEST=$HERE/.gpubuild
for f in gtrain gtrain-worker tests/gtrain_gpu_tests; do
  [[ -x $BUILD/$f ]] || { echo "gpu_pack_build.sh: $BUILD/$f is missing (build the targets gtrain gtrain-worker gtrain_gpu_tests)" >&2; exit 2; }
done
grep -q '^GTRAIN_HAVE_CUDA:INTERNAL=ON' "$BUILD/CMakeCache.txt" ||
  { echo "gpu_pack_build.sh: $BUILD is not a CUDA build (scripts/build-torch2.sh makes one)" >&2; exit 2; }
rm -rf "$DEST"
mkdir -p "$DEST/lib" "$DEST/tests"
cp "$BUILD/gtrain" "$BUILD/gtrain-worker" "$DEST/"
cp "$BUILD/tests/gtrain_gpu_tests" "$DEST/tests/"
# The libraries to carry: the project's own (they live in the build folder) and any other that is
# not torch's, CUDA's or the C/C++ runtime's (Debian's toml++ is a shared library).
base='^(libc|libm|libdl|librt|libpthread|libutil|libstdc\+\+|libgcc_s|libz|ld-linux-x86-64|linux-vdso)\.so'
for bin in "$DEST/gtrain" "$DEST/gtrain-worker" "$DEST/tests/gtrain_gpu_tests"; do
  ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | while read -r name path; do
    [[ $name =~ $base ]] && continue
    [[ $path == */site-packages/* ]] && continue  # torch, NCCL and the CUDA runtime: the wheel's
    [[ -f $DEST/lib/$name ]] || cp -L "$path" "$DEST/lib/$name"
  done
done
if grep -q '^GTRAIN_HAVE_MPI:INTERNAL=ON' "$BUILD/CMakeCache.txt"; then
  "$HERE/gpu_pack_mpi.sh" "$DEST"
fi
strip --strip-unneeded "$DEST/gtrain" "$DEST/gtrain-worker" "$DEST/tests/gtrain_gpu_tests" "$DEST"/lib/*.so*
torch=$(sed -n 's/^torch \([^ ]*\) cuda \([^ ]*\) .*/\1/p' "$BUILD/.torch2-stamp" 2>/dev/null | head -1)
{
  echo "commit: $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet HEAD -- . ':!bench' 2>/dev/null || echo +dirty)"
  echo "built: $(date -u '+%Y-%m-%d %H:%M UTC') on $(hostname), $(c++ --version | head -1)"
  echo "torch: ${torch:-unknown}"
  echo "type: $(sed -n 's/^CMAKE_BUILD_TYPE:STRING=//p' "$BUILD/CMakeCache.txt")"
  echo "libs: $(cd "$DEST/lib" && ls | tr '\n' ' ')"
  [[ -d $DEST/mpi ]] && echo "mpi: Open MPI $(ompi_info --version 2>/dev/null | sed -n 's/^Open MPI v//p' | head -1) (source mpi/env.sh)"
} >"$DEST/BUILD_INFO"
cat "$DEST/BUILD_INFO"
du -sh "$DEST"
