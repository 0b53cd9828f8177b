#!/usr/bin/env bash
# Runs ctest with every label this machine can run: cpu always; multiproc when the build has MPI
# and mpirun exists; slurm when Slurm's daemons are installed; gpu when a GPU is visible; python, hf,
# bench and torch2 always (their tests that need the project venv say SKIPPED and why without it;
# torch2 builds and tests gtrain against the venv's LibTorch 2.x with CUDA, under ASan and UBSan, in
# BUILD-torch2-sanitize); docs (README's and docs/'s runnable blocks) with mpirun; browser always (headless chromium, which make test installs). Not compat (every LibTorch source compiled against Debian sid's 2.14
# headers with C++20, 9 minutes on 2 cores): the torch2 label builds and tests against 2.x for
# real, and make test must stay within CI's time; run it with LABELS=compat scripts/run-tests.sh
# build when touching torch_compat.h. Not corpus either (the tokenizer against Hugging Face on the
# whole corpus, an hour and more: LABELS=corpus scripts/run-tests.sh build; CI runs a sample of it).
# Environment: LABELS, a '|'-separated label list to run instead; CTEST_JOBS (default 2: tests that
# start ranks or compile hold both slots, tests/CMakeLists.txt);
# GTRAIN_TEST_START, the Unix time make test started (the table then shows the whole).
set -euo pipefail
BUILD=${1:-build}
labels="cpu"
if grep -q "GTRAIN_HAVE_MPI:INTERNAL=ON" "$BUILD/CMakeCache.txt" 2>/dev/null && command -v mpirun >/dev/null; then
  labels="$labels|multiproc"
fi
if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null; then
  labels="$labels|slurm"
fi
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  labels="$labels|gpu"
fi
labels="$labels|python|hf|bench|torch2|sanitize|browser"
command -v mpirun >/dev/null && labels="$labels|docs"
labels=${LABELS:-$labels}
echo "run-tests: labels $labels"
here=$(cd "$(dirname "$0")" && pwd)
cd "$BUILD"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Where the time went, after the run: seconds per label and the 10 slowest tests (and the whole of
# make test when the Makefile passes its start, GTRAIN_TEST_START); then ctest's own closing lines
# again, so they stay the last ones.
log=$(mktemp /tmp/gtrain-ctest-XXXXXX.log)
set +e
ctest -L "^($labels)\$" --output-on-failure --timeout 900 -j "${CTEST_JOBS:-2}" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
total=""
[[ -n ${GTRAIN_TEST_START:-} ]] && total=$(( $(date +%s) - GTRAIN_TEST_START ))
/usr/bin/python3 "$here/test-times.py" . "$log" $total || true
echo
grep -E '^[0-9]+% tests passed, [0-9]+ tests? failed out of [0-9]+' "$log" | tail -1 || true
grep -E '^Total Test time' "$log" | tail -1 || true
rm -f "$log"
exit "$rc"
