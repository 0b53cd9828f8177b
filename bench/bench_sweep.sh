#!/usr/bin/env bash
# Sweeps (issue 52): what pausing trials costs. A 27-trial ASHA (eta 3: rungs of STEPS/27, STEPS/9,
# STEPS/3 and STEPS steps) of a gpt on RANKS CPU ranks, every trial paused (evaluated and saved) at
# every rung it reaches and resumed for the next; then each trial run alone, straight to the step it
# reached, RANKS at a time. Prints the rank-seconds of both, the pauses' share of the sweep ((sweep -
# alone) / sweep; target <= 3%), and the sweep's own count of its runs' time outside training steps.
# Usage: bench/bench_sweep.sh [build-dir]   (STEPS default 243, SIZE medium|small|tiny, RANKS default 2)
set -euo pipefail
BUILD=$(realpath "${1:-build}")
STEPS=${STEPS:-243}
SIZE=${SIZE:-small}
RANKS=${RANKS:-2}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
case $SIZE in
  medium) layers=6 width=256 seq=128 batch=16 ;;
  small) layers=4 width=128 seq=64 batch=16 ;;
  tiny) layers=1 width=16 seq=16 batch=8 ;;
  *) echo "bench_sweep.sh: SIZE must be medium, small or tiny" >&2; exit 2 ;;
esac
cat > "$work/sweep.toml" <<TOML
[model]
name = "gpt"
n_layer = $layers
n_head = 4
n_embd = $width
seq_len = $seq
[data]
kind = "text_bytes"
path = "/usr/share/common-licenses/GPL-3"
eval_fraction = 0.05
[train]
global_batch = $batch
steps = $STEPS
eval_batches = 2
threads = 1
[checkpoint]
interval = 0
[log]
progress = "none"
[search]
method = "asha"
trials = 27
eta = 3
min_steps = $((STEPS / 27 > 0 ? STEPS / 27 : 1))
seed = 0
[search.space]
"optimizer.learning_rate" = { log_uniform = [1e-4, 1e-2] }
TOML
t0=$(date +%s.%N)
"$BUILD/gtrain" sweep "$work/sweep.toml" --dir "$work/sweep" --ranks "$RANKS" --quiet > "$work/sweep.out"
t1=$(date +%s.%N)
# Each trial alone: one stage from step 0 to the step its sweep reached, RANKS at a time.
/usr/bin/python3 - "$work/sweep/sweep.json" > "$work/alone.txt" <<'PY'
import json, sys
l = json.load(open(sys.argv[1]))
last = l["rungs"][-1]["steps"]
for t in l["trials"]:
    reached = [l["rungs"][k]["steps"] for k, r in enumerate(t["results"]) if r is not None][-1]
    sets = " ".join("--set %s=%r" % (k, v) for k, v in t["params"])
    print(t["name"], reached, last, sets)
PY
alone_start=$(date +%s.%N)
run_alone() {
  local name=$1 reached=$2 last=$3
  shift 3
  local stop=$reached
  [[ $reached == "$last" ]] && stop=0
  local a b
  a=$(date +%s.%N)
  # shellcheck disable=SC2086
  "$BUILD/gtrain" run "$work/sweep.toml" --run-dir "$work/alone/$name" --quiet --force --ranks 1 $* \
    --set train.steps="$last" --set schedule.stop_at_step="$stop" > "$work/alone-$name.log" 2>&1 || [[ $? == 3 ]]
  b=$(date +%s.%N)
  echo "$name $a $b" >> "$work/alone-times.txt"
}
while read -r name reached last sets; do
  while (($(jobs -rp | wc -l) >= RANKS)); do sleep 0.05; done
  run_alone "$name" "$reached" "$last" "$sets" &
done < "$work/alone.txt"
wait
alone_end=$(date +%s.%N)
/usr/bin/python3 - "$work/sweep/sweep.json" "$work/alone-times.txt" "$t0" "$t1" "$alone_start" "$alone_end" <<'PY'
import json, sys
l = json.load(open(sys.argv[1]))
alone = sum(float(line.split()[2]) - float(line.split()[1]) for line in open(sys.argv[2]))
sweep = sum(t["rank_seconds"] for t in l["trials"])
outside = sum(t["pause_rank_seconds"] for t in l["trials"])
runs = sum(t["runs"] for t in l["trials"])
print("27-trial ASHA, %d runs (%d pauses), rungs %s steps" % (runs, runs - len(l["trials"]),
      ", ".join(str(r["steps"]) for r in l["rungs"])))
print("sweep: %.1f rank-s (wall %.1f s)   trials alone: %.1f rank-s (wall %.1f s)" %
      (sweep, float(sys.argv[4]) - float(sys.argv[3]), alone, float(sys.argv[6]) - float(sys.argv[5])))
print("sweep / trials alone: %.3fx   pause and resume share: %.1f%%   (target <= 3%%)" %
      (sweep / alone, 100.0 * (sweep - alone) / sweep))
print("outside training steps, all runs: %.1f rank-s (%.1f%% of the sweep)" % (outside, 100.0 * outside / sweep))
PY
