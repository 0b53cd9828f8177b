#!/usr/bin/env bash
# make_run_targets.sh: what `make run` builds (its build-run target: gtrain and gtrain-worker) compiles
# no test file, no benchmark and not the CUDA compile check: a newcomer does not wait for the suite.
#   tests/build/make_run_targets.sh BUILD_DIR
# Reads the commands ninja would run for those targets from scratch (ninja -t commands); skipped
# (77) for a tree another generator wrote.
set -euo pipefail
build=$1
[[ -f $build/build.ninja ]] || { echo "SKIPPED: $build is not a Ninja tree"; exit 77; }
grep -q '^build-run:' "$(dirname "$0")/../../Makefile" || { echo "FAIL: the Makefile has no build-run target"; exit 1; }
targets=$(sed -n '/^build-run:/,/^$/s/.*--target //p' "$(dirname "$0")/../../Makefile")
[[ -n $targets ]] || { echo "FAIL: the Makefile's build-run target names no --target"; exit 1; }
cmds=$(ninja -C "$build" -t commands $targets)
compiles=$(grep -c -- ' -c ' <<<"$cmds" || true)
bad=$(grep -- ' -c ' <<<"$cmds" | grep -oE '[^ ]*(tests|bench)/[^ ]*\.(cpp|cu)|cuda_compile_check[^ ]*' | sort -u || true)
echo "make run: $compiles compile commands for: $targets"
if [[ -n $bad ]]; then
  echo "FAIL: make run would compile:"; echo "$bad"; exit 1
fi
[[ $compiles -gt 0 ]] || { echo "FAIL: no compile command found for $targets (ninja -t commands said nothing)"; exit 1; }
echo "OK: no test, benchmark or CUDA compile-check file among them"
