#!/usr/bin/env bash
# run_suite.sh: the cpu and multiproc labels of the torch2 build (pip's LibTorch 2.x with CUDA, on CPU
# tensors: no GPU is needed to load it), as one test of the default build's ctest; when that build
# is sanitized (GTRAIN_SANITIZE in its cache), under ASan/UBSan, any report failing its test.
#   tests/torch2/run_suite.sh TORCH2_BUILD_DIR
# The whole log is TORCH2_BUILD_DIR/ctest-torch2.log; this prints its summary and the failed tests.
set -euo pipefail
build=$1
py=$("$(dirname "$0")/../../scripts/venv.sh" python) || { echo "$py"; exit 77; }
[[ -f $build/CTestTestfile.cmake ]] || { echo "FAIL: $build has no tests (did Torch2.build run?)"; exit 1; }
labels=cpu
if grep -q "GTRAIN_HAVE_MPI:INTERNAL=ON" "$build/CMakeCache.txt" && command -v mpirun >/dev/null; then labels="cpu|multiproc"; fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
sanitize=$(sed -n 's/^GTRAIN_SANITIZE:STRING=//p' "$build/CMakeCache.txt")
log=$build/ctest-torch2.log
: >"$log"
rc=0
# run LABELS LEAKS: one ctest pass over LABELS; under the sanitizers any report fails the test that
# printed it (exit 1, or 66 for a leak), in every gtrain process it starts, through mpirun too.
# protect_shadow_gap=0: the CUDA libraries LibTorch loads map memory where ASan puts its guard.
# Leaks are checked in the cpu label, with tests/torch2/lsan.supp naming the uninstrumented
# libraries; not in multiproc ranks: Open MPI keeps per-process state it never frees, and ASan's
# fast unwinder cannot walk Open MPI's frames, so no suppression can name them.
run() {
  local labels=$1 leaks=$2 jobs=$3
  if [[ -n $sanitize ]]; then
    export ASAN_OPTIONS="halt_on_error=1:abort_on_error=0:detect_leaks=$leaks:exitcode=1:protect_shadow_gap=0:detect_odr_violation=0"
    export LSAN_OPTIONS="suppressions=$(cd "$(dirname "$0")" && pwd)/lsan.supp:print_suppressions=0:exitcode=66"
    export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
  fi
  echo "run_suite: ctest -L '^($labels)\$' in $build${sanitize:+ under -fsanitize=$sanitize, detect_leaks=$leaks} (log: $log)"
  (cd "$build" && ctest -L "^($labels)\$" --output-on-failure --timeout 900 -j "$jobs") >>"$log" 2>&1 || rc=$?
}
if [[ -n $sanitize ]]; then
  # The cpu label two at a time (its tests run one thread each); multiproc's ranks fill both cores.
  run cpu 1 "${CTEST_JOBS:-2}"
  [[ $labels == *multiproc* ]] && run multiproc 0 "${CTEST_JOBS:-1}"
else
  run "$labels" 0 "${CTEST_JOBS:-1}"
fi
grep -E "tests passed|tests failed|Total Test time" "$log" || true
if ((rc)); then
  sed -n '/The following tests FAILED/,$p' "$log"
  grep -B2 -A40 -E "^\[  FAILED  \]|\*\*\*Failed|\*\*\*Timeout|\*\*\*Exception" "$log" | head -200
fi
exit $rc
