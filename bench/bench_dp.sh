#!/usr/bin/env bash
# CPU data parallel on 2 ranks, gtrain against PyTorch DDP (gloo), same GPT, global batch and
# optimizer, in one run: samples/s and start-up (launch -> first finished step).
# Usage: scripts/venv.sh run bench/bench_dp.sh [build-dir]   (PyTorch: the python3 on PATH, the
#        project venv's there; or set PYTHON to another python with torch)
set -euo pipefail
BUILD=${1:-build}
HERE=$(cd "$(dirname "$0")" && pwd)
STEPS=${STEPS:-30}
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
weight_decay = 0.0
[train]
global_batch = 32
steps = $STEPS
threads = 1
[checkpoint]
at_end = false
[log]
progress = "none"
TOML

now() { date +%s.%N; }
for round in 1 2; do
  start=$(now)
  "$BUILD/gtrain" run "$work/gpt.toml" --force --ranks 2 --run-dir "$work/run$round" --quiet
  gtrain_json=$(python3 - "$work/run$round/metrics.jsonl" "$start" <<'PY'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
train = [r for r in recs if r.get("kind") == "train"]
timed = train[5:]
sps = 32 * len(timed) / sum(r["step_time_s"] for r in timed)
print(json.dumps({"samples_per_s": sps, "startup_s": train[0]["time"] - float(sys.argv[2])}))
PY
)
  start=$(now)
  # --redirects 2 --tee 1: rank 0's stdout on the console, its stderr to a file (torch 1.13 on
  # Python 3.11 also cannot parse the default "0": IntFlag iteration skips zero members).
  torch_json=$(STEPS=$STEPS OMP_NUM_THREADS=1 "${PYTHON:-python3}" -m torch.distributed.run --nproc_per_node 2 \
      --master_port $((29500 + round)) --redirects 2 --tee 1 "$HERE/ddp_reference.py" 2>/dev/null | tail -1 |
      sed 's/^\[default0\]://')
  python3 - "$gtrain_json" "$torch_json" "$start" "$round" <<'PY'
import json, sys
g, t, start, rnd = json.loads(sys.argv[1]), json.loads(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
t_startup = t["first_step_wall"] - start
print(f"round {rnd}: samples/s gtrain {g['samples_per_s']:.1f}  pytorch-ddp {t['samples_per_s']:.1f}  "
      f"ratio {g['samples_per_s'] / t['samples_per_s']:.2f}x | start-up to first step gtrain {g['startup_s']:.2f} s  "
      f"pytorch-ddp {t_startup:.2f} s  ratio {g['startup_s'] / t_startup:.2f}x")
PY
done
