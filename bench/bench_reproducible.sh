#!/usr/bin/env bash
# Bitwise mode's cost (issue 33): step time with train.reproducible = "bitwise" against "off" for
# the same layout (same micro-batch of 4, the chunk), side by side in one run, for 1 rank, 2 ranks
# ZeRO-0 and 2 ranks ZeRO-2, with the planner's estimate of the same ratio. Bitwise mode keeps each
# chunk's gradients apart (a fresh buffer, an all-to-all and a tree addition per chunk instead of
# one accumulation and one allreduce), computes an exact norm and steps with a plain loop.
# Usage: bench/bench_reproducible.sh [build-dir]   (STEPS, default 30; ROUNDS, default 2; SIZE=tiny)
set -euo pipefail
BUILD=${1:-build}
STEPS=${STEPS:-30}
ROUNDS=${ROUNDS:-2}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
embd=128 seq=64
if [[ ${SIZE:-} == tiny ]]; then embd=32 seq=16; fi
cat > "$work/gpt.toml" <<TOML
[model]
name = "gpt"
n_layer = 4
n_head = 4
n_embd = $embd
seq_len = $seq
vocab = 256
[data]
kind = "synthetic"
[optimizer]
learning_rate = 1e-3
[train]
global_batch = 32
steps = $STEPS
threads = 1
reproducible_chunk = 4
[parallel]
mode = "explicit"
micro_batch = 4
[checkpoint]
at_end = false
[log]
progress = "none"
TOML

# Median step time (s) after the first fifth of the steps, and the planner's estimate, of one run.
measure() {
  local ranks=$1 zero=$2 mode=$3 dir=$4
  "$BUILD/gtrain" run "$work/gpt.toml" --force --ranks "$ranks" --run-dir "$dir" --quiet \
    --set parallel.zero="$zero" --set train.reproducible="$mode"
  /usr/bin/python3 "$(dirname "$0")/run_stats.py" "$dir"
}

for round in $(seq 1 "$ROUNDS"); do
  for layout in "1 0" "2 0" "2 2"; do
    read -r ranks zero <<<"$layout"
    read -r t_off e_off < <(measure "$ranks" "$zero" off "$work/off_${round}_$ranks$zero")
    read -r t_bit e_bit < <(measure "$ranks" "$zero" bitwise "$work/bit_${round}_$ranks$zero")
    /usr/bin/python3 - "$round" "$ranks" "$zero" "$t_off" "$e_off" "$t_bit" "$e_bit" <<'PY'
import sys
rnd, ranks, zero = sys.argv[1:4]
t_off, e_off, t_bit, e_bit = map(float, sys.argv[4:8])
print(f"round {rnd}: dp={ranks} zero={zero}: step time off {t_off * 1e3:.1f} ms  bitwise {t_bit * 1e3:.1f} ms  "
      f"ratio bitwise/off {t_bit / t_off:.2f}x (planner {e_bit / e_off:.2f}x)")
PY
  done
done
