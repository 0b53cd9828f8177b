#!/usr/bin/env bash
# Cheap saves (issue 28): what an interval checkpoint costs training end to end, asynchronous
# against synchronous, the same state, measured side by side in one bench run. Runs of the same job,
# checkpoint.async = false and true, each saving every INTERVAL steps; per save:
#   sync:  the step loop's stall (the whole save: probe forward, copy, write, fsync, commit);
#   async: its stall (only the hand-over: the probe is the next step's own loss, and the writer
#          thread copies the live tensors into its staging memory while that step's forward and
#          backward run) plus what the steps while the write ran took beyond the run's median step.
# Two settings: one core left to the writer (train.threads = cores - 1, the target's setting: a GPU
# job's host has its cores free, and there the copy is a DMA), and every core training (the copy's
# CPU time then comes out of training's). Target: async / sync <= 0.05x with a core left.
# SIZE=big (default): a 6-layer, 768-wide GPT, 43M parameters, a 0.5 GB state with Adam; SIZE=tiny
# for CI's smoke run (the figures mean nothing there).
# Usage: bench/bench_save_stall.sh [build-dir]   (STEPS, INTERVAL)
set -euo pipefail
BUILD=${1:-build}
SIZE=${SIZE:-big}
cores=$(nproc)
spare=$((cores > 1 ? cores - 1 : 1))  # train.threads fixed: the thread tuner would measure the writer too
if [[ $SIZE == tiny ]]; then
  layers=2 embd=64 STEPS=${STEPS:-40} INTERVAL=${INTERVAL:-10}
else
  layers=6 embd=768 STEPS=${STEPS:-60} INTERVAL=${INTERVAL:-6}
fi
work=$(mktemp -d)
trap '[[ -n ${KEEP:-} ]] || rm -rf "$work"' EXIT  # KEEP=1: keep the runs
run() {  # $1: true | false (checkpoint.async), $2: train.threads
  local name=$1-$2
  cat > "$work/job-$name.toml" <<TOML
[model]
name = "gpt"
n_layer = $layers
n_head = 4
n_embd = $embd
seq_len = 32
vocab = 256
[data]
kind = "synthetic"
[optimizer]
learning_rate = 1e-4
[train]
global_batch = 8
steps = $STEPS
threads = $2
[checkpoint]
interval = $INTERVAL
async = $1
keep = 1
[log]
progress = "none"
TOML
  "$BUILD/gtrain" run "$work/job-$name.toml" --force --ranks 1 --run-dir "$work/run-$name" --no-resume --quiet \
    >"$work/log-$name" 2>&1 ||
    { echo "bench_save_stall: gtrain exited $? (checkpoint.async = $1, train.threads = $2):"; cat "$work/log-$name"; exit 1; }
}
for t in $spare $cores; do
  run false "$t"
  run true "$t"
  [[ $cores -gt 1 ]] || break
done
/usr/bin/python3 - "$work" "$spare" "$cores" <<'PY'
import json, os, statistics, sys

def load(path):
    steps, saves = {}, []
    for line in open(path):
        try:
            j = json.loads(line)
        except ValueError:
            continue
        if j.get("kind") == "train":
            steps[j["step"]] = j["step_time_s"]
        elif j.get("kind") == "checkpoint":
            saves.append(j)
    return steps, saves

def cost(path):
    steps, saves = load(path)
    last = max(steps)
    median = statistics.median(t for s, t in steps.items() if s > 2)
    out = []
    for i, rec in enumerate(saves):
        s = rec["step"]
        if s >= last:
            continue  # the final save: no step follows it
        # The write runs until the next save reports it (previous_write_s), else the run's end.
        write_s = next((r["previous_write_s"] for r in saves[i + 1:] if "previous_write_s" in r), None)
        slowed, elapsed, k = 0.0, 0.0, s + 1
        while k in steps and (write_s is None or elapsed < write_s + median) and k < s + 1 + 50:
            slowed += steps[k] - median
            elapsed += steps[k]
            k += 1
            if write_s is None:
                break
        out.append((rec["stall_s"], slowed, write_s or 0.0))
    return median, out

work, spare, cores = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
size = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(f"{work}/run-true-{spare}/checkpoints")
           for f in fs if f.endswith(".bin"))
for threads in sorted({spare, cores}):
    m_sync, sync = cost(f"{work}/run-false-{threads}/metrics.jsonl")
    m_async, asyn = cost(f"{work}/run-true-{threads}/metrics.jsonl")
    sync_s = statistics.mean(s for s, _, _ in sync)
    stall = statistics.mean(s for s, _, _ in asyn)
    slowed = statistics.mean(max(0.0, w) for _, w, _ in asyn)
    write = statistics.mean(w for _, _, w in asyn)
    what = "one core left to the writer" if threads == spare else "every core training"
    print(f"train.threads = {threads} ({what}): state {size / 2**20:.0f} MB, {len(sync)} interval saves per run, "
          f"median step {m_sync * 1e3:.0f} ms (sync run) {m_async * 1e3:.0f} ms (async run)")
    print(f"  sync save:  {sync_s:.3f} s per save (the step loop waits for all of it)")
    print(f"  async save: {stall + slowed:.3f} s per save end to end (hand-over {stall:.3f} s + steps slowed "
          f"{slowed:.3f} s while its {write:.3f} s write ran)")
    target = "   (target <= 0.05x)" if threads == spare else "   (the copy's CPU time comes out of training's)"
    print(f"  async / sync: {(stall + slowed) / sync_s:.3f}x{target}")
PY
