#!/usr/bin/env bash
# Uneven data parallel (issue 25): step time of global batch 32 on 3 ranks (replica shares 11, 11,
# 10) against the even 2-rank layout (16, 16), same GPT, side by side in one run, with the planner's
# estimate of the same ratio. Ideal compute ratio 11/16 = 0.69x; the slowest replica sets the step.
# On a machine with fewer free cores than ranks the 3 ranks share cores and the ratio says so.
# Usage: bench/bench_uneven.sh [build-dir]   (STEPS, default 30; ROUNDS, default 2)
set -euo pipefail
BUILD=${1:-build}
STEPS=${STEPS:-30}
ROUNDS=${ROUNDS:-2}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/gpt.toml" <<TOML
[model]
name = "gpt"
n_layer = 4
n_head = 4
n_embd = 128
seq_len = 64
vocab = 256
[data]
kind = "synthetic"
[optimizer]
learning_rate = 1e-3
[train]
global_batch = 32
steps = $STEPS
threads = 1
[parallel]
mode = "explicit"
[checkpoint]
at_end = false
[log]
progress = "none"
TOML

# Median step time (s) after the first fifth of the steps, and the planner's estimate, of one run.
measure() {
  local ranks=$1 dir=$2
  "$BUILD/gtrain" run "$work/gpt.toml" --force --ranks "$ranks" --run-dir "$dir" --quiet
  /usr/bin/python3 "$(dirname "$0")/run_stats.py" "$dir"
}

for round in $(seq 1 "$ROUNDS"); do
  read -r t2 e2 < <(measure 2 "$work/r2_$round")
  read -r t3 e3 < <(measure 3 "$work/r3_$round")
  /usr/bin/python3 - "$round" "$t2" "$e2" "$t3" "$e3" "$(nproc)" <<'PY'
import sys
rnd, t2, e2, t3, e3, cores = sys.argv[1], *map(float, sys.argv[2:6]), int(sys.argv[6])
print(f"round {rnd}: step time 3 ranks (11/11/10) {t3 * 1e3:.1f} ms  2 ranks (16/16) {t2 * 1e3:.1f} ms  "
      f"ratio 3/2 {t3 / t2:.2f}x (planner {e3 / e2:.2f}x, ideal 11/16 = {11 / 16:.2f}x; {cores} cores"
      f"{', ranks share cores' if cores < 3 else ''})")
PY
done
