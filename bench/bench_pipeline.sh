#!/usr/bin/env bash
# bench_pipeline.sh: measured pipeline bubble against (pp-1)/(m+pp-1), and tp/pp step time against
# the planner's estimate, for a small gpt on this CPU. Usage: bench/bench_pipeline.sh [build dir]
# (STEPS, default 12; SIZE=tiny: a 4-block width-32 gpt, the CI smoke run's every layout in a third
# of the time)
#
# Bubble: with a single-rank step time T1 for the same global batch, an ideal pp-stage pipeline
# takes T1/pp; the measured bubble is 1 - (T1/pp) / T_pp (includes send/recv and stage imbalance).
set -euo pipefail
BUILD=${1:-build}
GTRAIN=$(realpath "$BUILD/gtrain")
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
if [[ ${SIZE:-} == tiny ]]; then L=4 C=32 T=16 V=64; else L=8 C=128 T=64 V=256; fi
cat > "$WORK/job.toml" <<TOML
[model]
name = "gpt"
n_layer = $L
n_head = 4
n_embd = $C
seq_len = $T
vocab = $V
[data]
kind = "synthetic"
[train]
global_batch = 32
steps = ${STEPS:-12}
threads = 1
[log]
progress = "none"
TOML
run() {  # name ranks sets...
  local name=$1 ranks=$2; shift 2
  local args=()
  for s in "$@"; do args+=(--set "$s"); done
  "$GTRAIN" run "$WORK/job.toml" --force --run-dir "$WORK/$name" --ranks "$ranks" --set parallel.mode=explicit "${args[@]}" >/dev/null
  python3 - "$WORK/$name" <<'PY'
import json, sys, statistics
d = sys.argv[1]
steps = [json.loads(l) for l in open(d + "/metrics.jsonl") if '"train"' in l]
t = statistics.median(s["step_time_s"] for s in steps[2:])  # skip warm-up steps
est = json.load(open(d + "/plan.json"))["est_step_seconds"]
print(f"{t:.6f} {est:.6f}")
PY
}
read T1 E1 < <(run single 1)
printf "%-22s %10s %10s %8s %10s %10s %8s\n" layout step_s est_s ratio bubble predicted ratio
printf "%-22s %10.4f %10.4f %8.2f\n" "dp=1 (reference)" "$T1" "$E1" "$(python3 -c "print($T1/$E1)")"
for spec in "pp=2 m=2:2:parallel.pp=2 parallel.pp_microbatches=2" \
            "pp=2 m=8:2:parallel.pp=2 parallel.pp_microbatches=8" \
            "pp=4 m=4:4:parallel.pp=4 parallel.pp_microbatches=4" \
            "pp=4 m=8:4:parallel.pp=4 parallel.pp_microbatches=8" \
            "pp=2 m=8 gpipe:2:parallel.pp=2 parallel.pp_microbatches=8 parallel.pp_schedule=gpipe" \
            "tp=2:2:parallel.tp=2" \
            "tp=2 pp=2 m=4:4:parallel.tp=2 parallel.pp=2 parallel.pp_microbatches=4"; do
  IFS=: read -r name ranks sets <<< "$spec"
  read T E < <(run "x$RANDOM" "$ranks" $sets)
  pp=$(sed -n 's/.*pp=\([0-9]\).*/\1/p' <<< "$name"); pp=${pp:-1}
  m=$(sed -n 's/.*m=\([0-9]*\).*/\1/p' <<< "$name"); m=${m:-1}
  python3 - "$name" "$T" "$E" "$T1" "$pp" "$m" <<'PY'
import sys
name, t, e, t1, pp, m = sys.argv[1], *map(float, sys.argv[2:])
if pp > 1:
    bubble = 1 - (t1 / pp) / t
    pred = (pp - 1) / (m + pp - 1)
    print(f"{name:<22} {t:10.4f} {e:10.4f} {t/e:8.2f} {bubble:10.3f} {pred:10.3f} {bubble/pred:8.2f}")
else:
    print(f"{name:<22} {t:10.4f} {e:10.4f} {t/e:8.2f}")
PY
done
echo "ranks on this host: $(nproc) cores; ranks beyond the core count share cores (bubble then includes oversubscription)"
