#!/usr/bin/env bash
# Keeping a job alive (issue 28): how long a 2-rank job takes from a failure to its first step after
# the in-job restart, for a killed rank (SIGKILL) and a hung one (SIGSTOP), small GPT on CPU. Prints,
# for each: seconds from the signal to the detection, from the detection to the first step after the
# restart (restarts.jsonl's "recovered"), the steps lost, and the total. Target: <= 10 s from a kill
# to the first step after it. The hang uses parallel.collective_timeout_s = HANG_S (default 5: the
# auto rule waits max(5 x slowest step, 30 s), which the tests check), so it measures everything after.
# Usage: bench/bench_restart.sh [build-dir]   (AT_STEP, default 200: rank 1 gets the signal once its
# heartbeat, written every second, shows it past this step; STEPS, default 3000; checkpoints every 100)
set -euo pipefail
# shellcheck source=bench/lib.sh
source "$(dirname "$0")/lib.sh"
BUILD=${1:-build}
AT_STEP=${AT_STEP:-200}
STEPS=${STEPS:-3000}
HANG_S=${HANG_S:-5}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/gpt.toml" <<TOML
[model]
name = "gpt"
n_layer = 2
n_head = 2
n_embd = 64
seq_len = 32
vocab = 128
[data]
kind = "synthetic"
[optimizer]
learning_rate = 1e-3
[train]
global_batch = 16
steps = $STEPS
threads = 1
[checkpoint]
interval = 100
[log]
progress = "none"
TOML

# One disrupted run: signal $1 to rank 1 once its heartbeat passes AT_STEP; prints the figures.
disrupt() {
  local sig=$1 name=$2 dir=$work/$2
  shift 2
  "$BUILD/gtrain" run "$work/gpt.toml" --force --ranks 2 --run-dir "$dir" --quiet "$@" >"$work/$name.log" 2>&1 &
  local launcher=$! pid="" t_signal=""
  for _ in $(seq 1 6000); do
    sleep 0.05
    kill -0 "$launcher" 2>/dev/null || break # gtrain ended before the step: say so below, do not wait
    read -r step pid < <(bench_heartbeat "$dir" 1)
    if ((step >= AT_STEP && pid > 0)); then
      t_signal=$(date +%s.%N)
      kill "-$sig" "$pid"
      break
    fi
  done
  wait "$launcher" || { echo "$name: gtrain exited $? (log below)"; cat "$work/$name.log"; return 1; }
  [[ -n $t_signal ]] || { echo "$name: rank 1 never passed step $AT_STEP"; return 1; }
  /usr/bin/python3 - "$dir/restarts.jsonl" "$t_signal" "$name" <<'PY'
import json, os, sys
recs = [json.loads(l) for l in open(sys.argv[1])] if os.path.exists(sys.argv[1]) else []
t_signal, name = float(sys.argv[2]), sys.argv[3]
restart = next((r for r in recs if r["kind"] == "restart"), None)
recovered = next((r for r in recs if r["kind"] == "recovered"), None)
if not restart or not recovered:
    sys.exit(f"{name}: the run ended without a restart and its recovery (restarts.jsonl: {recs}); raise STEPS")
detect = restart["detected_unix"] - t_signal
print(f"{name}: detected {detect:.1f} s after the signal, first step {recovered['seconds']:.1f} s after the "
      f"detection, {restart['steps_lost']} steps lost; signal to first step {detect + recovered['seconds']:.1f} s "
      f"({restart['cause'][:60]})")
PY
}

echo "2 ranks, gpt 2 x 64 on CPU, $STEPS steps; the signal past step $AT_STEP, checkpoints every 100 steps"
disrupt KILL kill
disrupt STOP hang --set parallel.collective_timeout_s="$HANG_S"
