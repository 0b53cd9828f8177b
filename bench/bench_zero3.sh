#!/usr/bin/env bash
# ZeRO-3 against ZeRO-2 (issue 27): step time of the same gpt on 2 CPU ranks, parameters sharded and
# gathered block by block against parameters replicated, side by side in one run, with the
# planner's estimate of the same ratio and what each holds of parameters (metrics.jsonl param_mb).
# Target: ZeRO-3 / ZeRO-2 <= 1.15x.
# Usage: bench/bench_zero3.sh [build-dir]   (STEPS, default 20; ROUNDS, default 2; SIZE=tiny for
# the CI smoke run)
set -euo pipefail
BUILD=${1:-build}
STEPS=${STEPS:-20}
ROUNDS=${ROUNDS:-2}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [[ ${SIZE:-} == tiny ]]; then L=2 C=32 T=16 V=64 B=8; else L=6 C=256 T=128 V=512 B=16; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/gpt.toml" <<TOML
[model]
name = "gpt"
n_layer = $L
n_head = 4
n_embd = $C
seq_len = $T
vocab = $V
[data]
kind = "synthetic"
[optimizer]
learning_rate = 1e-3
[train]
global_batch = $B
steps = $STEPS
threads = 1
[parallel]
mode = "explicit"
[checkpoint]
at_end = false
[log]
progress = "none"
TOML

# Median step time (s) after the first fifth of the steps, the planner's estimate, and param_mb.
measure() {
  local zero=$1 dir=$2
  "$BUILD/gtrain" run "$work/gpt.toml" --force --ranks 2 --run-dir "$dir" --quiet --set parallel.zero="$zero"
  /usr/bin/python3 "$(dirname "$0")/run_stats.py" "$dir" --param-mb
}

echo "gpt: $L blocks, width $C, seq $T, vocab $V, batch $B, 2 ranks x 1 thread, fp32"
for round in $(seq 1 "$ROUNDS"); do
  read -r t2 e2 p2 < <(measure 2 "$work/z2_$round")
  read -r t3 e3 p3 < <(measure 3 "$work/z3_$round")
  /usr/bin/python3 - "$round" "$t2" "$e2" "$p2" "$t3" "$e3" "$p3" <<'PY'
import sys
rnd = sys.argv[1]
t2, e2, p2, t3, e3, p3 = map(float, sys.argv[2:8])
print(f"round {rnd}: step time zero3 {t3 * 1e3:.1f} ms  zero2 {t2 * 1e3:.1f} ms  ratio zero3/zero2 {t3 / t2:.2f}x "
      f"(target <= 1.15x; planner {e3 / e2:.2f}x)  parameters held {p3:.2f} MiB against {p2:.2f} MiB")
PY
done
