#!/usr/bin/env bash
# run_suite.sh: the cpu and multiproc labels of the torch2 build (pip's LibTorch 2.x with CUDA, on CPU
# tensors: no GPU is needed to load it), as one test of the default build's ctest.
#   tests/torch2/run_suite.sh TORCH2_BUILD_DIR
# The whole log is TORCH2_BUILD_DIR/ctest-torch2.log; this prints its summary and the failed tests.
set -euo pipefail
build=$1
py=$("$(dirname "$0")/../../scripts/venv.sh" python) || { echo "$py"; exit 77; }
[[ -f $build/CTestTestfile.cmake ]] || { echo "FAIL: $build has no tests (did Torch2.build run?)"; exit 1; }
labels=cpu
if grep -q "GTRAIN_HAVE_MPI:INTERNAL=ON" "$build/CMakeCache.txt" && command -v mpirun >/dev/null; then labels="cpu|multiproc"; fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
log=$build/ctest-torch2.log
echo "run_suite: ctest -L '^($labels)\$' in $build (log: $log)"
rc=0
(cd "$build" && ctest -L "^($labels)\$" --output-on-failure --timeout 900 -j "${CTEST_JOBS:-1}") >"$log" 2>&1 || rc=$?
grep -E "tests passed|tests failed|Total Test time" "$log" || true
if ((rc)); then
  sed -n '/The following tests FAILED/,$p' "$log"
  grep -B2 -A40 -E "^\[  FAILED  \]|\*\*\*Failed|\*\*\*Timeout|\*\*\*Exception" "$log" | head -200
fi
exit $rc
