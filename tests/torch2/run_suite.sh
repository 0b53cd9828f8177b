#!/usr/bin/env bash
# run_suite.sh: the cpu and multiproc labels of the torch2 build (pip's LibTorch 2.x with CUDA, on CPU
# tensors: no GPU is needed to load it), as one test of the default build's ctest; when that build
# is sanitized (GTRAIN_SANITIZE in its cache), under ASan/UBSan, any report failing its test: the cpu
# label less a few checks of the source tree, and from multiproc one test per multi-rank code path
# (both named below).
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
  local select=("${@:4}")  # -E REGEX (leave out) or -R REGEX (only these), or nothing
  if [[ -n $sanitize ]]; then
    export ASAN_OPTIONS="halt_on_error=1:abort_on_error=0:detect_leaks=$leaks:exitcode=1:protect_shadow_gap=0:detect_odr_violation=0"
    export LSAN_OPTIONS="suppressions=$(cd "$(dirname "$0")" && pwd)/lsan.supp:print_suppressions=0:exitcode=66"
    export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
  fi
  echo "run_suite: ctest -L '^($labels)\$' ${select[*]} in $build${sanitize:+ under -fsanitize=$sanitize, detect_leaks=$leaks} (log: $log)"
  (cd "$build" && ctest -L "^($labels)\$" "${select[@]}" --output-on-failure --timeout 900 -j "$jobs") >>"$log" 2>&1 || rc=$?
}
# What the sanitized tree leaves to the plain one, to keep make test within CI's time
# (docs/contributing.md). From the cpu label, what adds no gtrain code path the sanitizers would not
# see in another cpu test:
# - Style, Docs, Build, Venv: Python and shell checks of the source tree; Plugin: compiles the example
#   outside the tree (the plugin loader runs under the sanitizers in Models.*);
# - PlannerInvariants, PlanCli: the planner's arithmetic over many models, counts and world sizes, and
#   gtrain plan's printing; the planner's every branch runs sanitized in the other planner suites;
# - TorchFreeCli: which of gtrain and gtrain-worker loads LibTorch for each command (a question of
#   linking, not of memory); Runs, Named/CliTable: the launcher's whole flows (plan, run, verify,
#   resume, status, export; gtrain runs), whose ranks' code the Cli, CkptCli and Stages tests run
#   sanitized. (Measured 2026-12-06, sanitized: these took 230 of the label's 1400 test-seconds.)
cpu_skip='^(Style|Docs|Build|Venv|Plugin|PlannerInvariants|PlanCli|TorchFreeCli|Runs)\.|^Named/CliTable\.'
# From multiproc (15 minutes plain, three times that sanitized): one test per code path that only
# several ranks take: MPI collectives; data parallel with ZeRO 1-3, with offload, on uneven shares;
# tensor x data and tensor x pipeline parallel with recompute; ZeRO-3 with tensor parallel; a
# pipeline with the fused loss; a checkpoint resumed on fewer ranks; asynchronous saves; a killed
# rank restarted; a hung rank caught; a stop signal through the launcher to every rank.
multiproc_pick='^(MpiComm\.collectives_[23]_ranks|MultiRank\.ZeroStagesMatchPlainDataParallel|Zero3\.OffloadWithEveryZeroStage|UnevenMlp\.ZeroStagesOnThreeRanks|ModelParallel\.(DataTimesTensorParallelWithZero1|TensorTimesPipelineParallelWithRecompute|PipelineParallel2WithFusedLoss)|Zero3\.WithTensorParallelAndRecompute|Stages\.(ResumeOnFewerRanksKeepsTheTrajectory|StopSignalToTheLauncherStopsEveryRankWithExit3)|CheapSaves\.AsyncIntervalSavesHoldExactlyTheStateOfTheirStep|Restart\.KilledRankRestartsAndTheLossesAreBitwiseTheUninterruptedRuns|MultiRankFailure\.HungRankIsCaughtByCollectiveTimeout)$'
# Two at a time: the cpu label's tests run one thread each; a multiproc test holds both slots
# (PROCESSORS 2, tests/CMakeLists.txt).
if [[ -n $sanitize ]]; then
  run cpu 1 "${CTEST_JOBS:-2}" -E "$cpu_skip"
  [[ $labels == *multiproc* ]] && run multiproc 0 "${CTEST_JOBS:-2}" -R "$multiproc_pick"
else
  run "$labels" 0 "${CTEST_JOBS:-2}"
fi
grep -E "tests passed|tests failed|Total Test time" "$log" || true
if ((rc)); then
  sed -n '/The following tests FAILED/,$p' "$log"
  grep -B2 -A40 -E "^\[  FAILED  \]|\*\*\*Failed|\*\*\*Timeout|\*\*\*Exception" "$log" | head -200
fi
exit $rc
