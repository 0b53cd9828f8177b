#!/usr/bin/env bash
# One CPU training step of a small llama (issue 26): gtrain against transformers' LlamaForCausalLM
# with torch.optim.AdamW in PyTorch eager (the project venv's torch), same shape, same threads, fp32,
# side by side in one run. Prints each one's median step time and the ratio (target >= 1.0x: gtrain
# at least as fast).
# Usage: bench/bench_llama.sh [build-dir]   (STEPS, default 20; ROUNDS, default 5; THREADS, default
# every core; SIZE=tiny for the CI smoke run). Run in the venv: scripts/venv.sh run bench/bench_llama.sh
set -euo pipefail
BUILD=${1:-build}
STEPS=${STEPS:-20}
ROUNDS=${ROUNDS:-5}
THREADS=${THREADS:-$(nproc)}
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
if [[ ${SIZE:-} == tiny ]]; then
  L=2 H=4 KV=2 C=64 I=160 T=32 V=256 B=4
else
  L=4 H=8 KV=2 C=256 I=704 T=128 V=512 B=8
fi
bench_need_python "transformers"
bench_work
{
  bench_llama_model "$V" rope
  printf '[data]\nkind = "synthetic"\n'
  bench_train_tables
} >"$work/llama.toml"

gtrain_step() {
  "$BUILD/gtrain" run "$work/llama.toml" --force --ranks 1 --run-dir "$1" --quiet
  /usr/bin/python3 - "$1" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
rows = [r for r in rows if r.get("kind") == "train"]
print(statistics.median(r["step_time_s"] for r in rows[max(3, len(rows) // 5):]))
PY
}

echo "llama: $L blocks, width $C, $H heads over $KV kv heads, MLP $I, seq $T, vocab $V, batch $B, $THREADS threads, fp32"
for round in $(seq 1 "$ROUNDS"); do
  g=$(gtrain_step "$work/run_$round")
  ref=$("$PYTHON" "$HERE/llama_reference.py" --layers $L --heads $H --kv-heads $KV --width $C --mlp $I --seq $T \
    --vocab $V --batch $B --steps "$STEPS" --threads "$THREADS")
  /usr/bin/python3 - "$round" "$g" "$ref" <<'PY'
import json, sys
rnd, g, ref = sys.argv[1], float(sys.argv[2]), json.loads(sys.argv[3])
t = ref["step_s"]
print(f"round {rnd}: step time gtrain {g * 1e3:.1f} ms  transformers eager {t * 1e3:.1f} ms  "
      f"ratio transformers/gtrain {t / g:.2f}x (target >= 1.0x; torch {ref['torch']}, transformers {ref['transformers']})")
PY
  echo "$g $(/usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])["step_s"])' "$ref")" >> "$work/ratios"
done
# A shared machine's steps vary by +-20% from minute to minute: the rounds alternate the two, and
# the median of their ratios is the figure.
if ((ROUNDS > 1)); then
  /usr/bin/python3 - "$work/ratios" <<'PY'
import statistics, sys
pairs = [tuple(map(float, l.split())) for l in open(sys.argv[1])]
print(f"median over {len(pairs)} rounds: ratio transformers/gtrain {statistics.median(t / g for g, t in pairs):.2f}x")
PY
fi
