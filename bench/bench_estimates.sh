#!/usr/bin/env bash
# bench_estimates.sh: the planner's step-time estimate against the measured median step, after
# `gtrain plan --calibrate`, for CPU layouts of two gpt sizes on 1 and 2 ranks (dp, tp, pp, zero3,
# threads), side by side in one run (issue 27: target within 10% for at least 6 layouts).
# Usage: bench/bench_estimates.sh [build-dir]   (STEPS, default 14; SIZE=tiny for the CI smoke run)
set -euo pipefail
BUILD=${1:-build}
GTRAIN=$(realpath "$BUILD/gtrain")
STEPS=${STEPS:-14}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
# The calibration goes to this run's own profile directory, so the user's saved one is untouched.
export GTRAIN_PROFILE_DIR="$WORK/profile"
if [[ ${SIZE:-} == tiny ]]; then
  SMALL="4 32 16 64 8" LARGE="4 64 32 64 8"
else
  SMALL="4 128 64 256 16" LARGE="6 256 128 512 16"
fi
job() {  # file L C T V B
  cat > "$1" <<TOML
[model]
name = "gpt"
n_layer = $2
n_head = 4
n_embd = $3
seq_len = $4
vocab = $5
[data]
kind = "synthetic"
[train]
global_batch = $6
steps = $STEPS
threads = 1
[parallel]
mode = "explicit"
[checkpoint]
at_end = false
[log]
progress = "none"
TOML
}
job "$WORK/small.toml" $SMALL
job "$WORK/large.toml" $LARGE

"$GTRAIN" plan --calibrate | sed -n '1,4p'

run() {  # name model ranks sets...
  local name=$1 model=$2 ranks=$3; shift 3
  local args=()
  for s in "$@"; do args+=(--set "$s"); done
  "$GTRAIN" run "$WORK/$model.toml" --force --run-dir "$WORK/$name" --ranks "$ranks" --quiet "${args[@]}" >/dev/null
  /usr/bin/python3 - "$WORK/$name" <<'PY'
import json, statistics, sys
d = sys.argv[1]
train = [json.loads(l) for l in open(d + "/metrics.jsonl")]
train = [r for r in train if r.get("kind") == "train"]
t = statistics.median(r["step_time_s"] for r in train[2:])  # past the warm-up steps
print(f"{t:.6f} {json.load(open(d + '/plan.json'))['est_step_seconds']:.6f}")
PY
}

read -r L C T V B <<< "$SMALL"; echo "small gpt: $L blocks, width $C, seq $T, vocab $V, batch $B"
read -r L C T V B <<< "$LARGE"; echo "large gpt: $L blocks, width $C, seq $T, vocab $V, batch $B"
printf "%-26s %10s %10s %10s\n" layout measured_s est_s est/meas
results=()
for spec in "small 1 rank 1 thread:small:1" \
            "small 1 rank 2 threads:small:1:train.threads=2" \
            "small dp2:small:2" \
            "large 1 rank 1 thread:large:1" \
            "large 1 rank 2 threads:large:1:train.threads=2" \
            "large dp2:large:2" \
            "large dp2 zero3:large:2:parallel.zero=3" \
            "large tp2:large:2:parallel.tp=2" \
            "large pp2 m4:large:2:parallel.pp=2 parallel.pp_microbatches=4"; do
  IFS=: read -r name model ranks sets <<< "$spec"
  # shellcheck disable=SC2086
  read -r t e < <(run "r$((${#results[@]} + 1))" "$model" "$ranks" $sets)
  results+=("$t $e")
  /usr/bin/python3 -c "import sys; t, e = float(sys.argv[2]), float(sys.argv[3]); print(f'{sys.argv[1]:<26} {t:10.4f} {e:10.4f} {e / t:10.2f}')" "$name" "$t" "$e"
done
printf '%s\n' "${results[@]}" | /usr/bin/python3 -c "
import sys
r = [tuple(map(float, l.split())) for l in sys.stdin if l.strip()]
ok = sum(abs(e / t - 1) <= 0.10 for t, e in r)
worst = max(abs(e / t - 1) for t, e in r)
print(f'within 10%: {ok} of {len(r)} layouts (target >= 6); worst {100 * worst:.0f}%')
"
