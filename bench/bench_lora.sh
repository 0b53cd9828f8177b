#!/usr/bin/env bash
# One LoRA training step of a small llama (issue 51): gtrain with [adapter] kind = "lora" against
# transformers' LlamaForCausalLM wrapped by peft (bench/lora_reference.py: the same shape, the same
# rank and alpha on the same projections, AdamW over the adapters only, the same clipping), same torch
# threads, fp32, side by side in one run: each one's median step time and the ratio (target >= 1.0x:
# gtrain at least as fast). Then the memory of a full fine-tune against LoRA for the same model, one
# rank: what gtrain measures after a step (metrics.jsonl: param_mb, grad_mb, opt_state_mb, and
# step_tensor_peak_mb, the tensors the step allocates and frees) beside what `gtrain plan --json`
# estimates for the same layout (its memory.live: the tensors at the step's peak; total adds the
# allocator's workspace).
# Usage: bench/bench_lora.sh [build-dir]   (STEPS, default 10; ROUNDS, default 3; THREADS, default
# every core; RANK, default 16; SIZE=tiny for the CI smoke run). Run in the venv:
# scripts/venv.sh run bench/bench_lora.sh
set -euo pipefail
BUILD=${1:-build}
STEPS=${STEPS:-10}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-$(nproc)}
RANK=${RANK:-16}
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
if [[ ${SIZE:-} == tiny ]]; then
  L=2 H=4 KV=2 C=64 I=160 T=32 V=256 B=4 RANK=4
else
  L=4 H=8 KV=2 C=256 I=704 T=512 V=512 B=8
fi
ALPHA=$((2 * RANK))
bench_need_python "peft, transformers"
bench_work
{
  bench_llama_model "$V" rope
  printf '[data]\nkind = "synthetic"\n'
  bench_train_tables "eval_batches = 1" "metrics_interval = 1"
} >"$work/full.toml"
{
  cat "$work/full.toml"
  printf '[adapter]\nkind = "lora"\nrank = %s\nalpha = %s.0\ntargets = ["all"]\nbase_dtype = "fp32"\n' "$RANK" "$ALPHA"
} > "$work/lora.toml"

# gtrain_step CONFIG RUN_DIR [ARGS]: the median step time (s) after the first fifth.
gtrain_step() {
  "$BUILD/gtrain" run "$1" --force --ranks 1 --run-dir "$2" --quiet "${@:3}"
  /usr/bin/python3 - "$2" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
rows = [r for r in rows if r.get("kind") == "train"]
print(statistics.median(r["step_time_s"] for r in rows[max(3, len(rows) // 5):]))
PY
}

echo "lora: llama $L blocks, width $C, $H heads over $KV kv heads, MLP $I, seq $T, vocab $V, batch $B, rank $RANK alpha $ALPHA on q, k, v, o, gate, up, down, $THREADS threads, fp32"
for round in $(seq 1 "$ROUNDS"); do
  g=$(gtrain_step "$work/lora.toml" "$work/lora_$round")
  ref=$("$PYTHON" -W ignore "$HERE/lora_reference.py" --layers $L --heads $H --kv-heads $KV --width $C --mlp $I \
    --seq $T --vocab $V --batch $B --rank "$RANK" --alpha "$ALPHA" --steps "$STEPS" --threads "$THREADS")
  /usr/bin/python3 - "$round" "$g" "$ref" <<'PY'
import json, sys
rnd, g, ref = sys.argv[1], float(sys.argv[2]), json.loads(sys.argv[3])
t = ref["step_s"]
print(f"round {rnd}: step time gtrain {g * 1e3:.1f} ms  transformers + peft {t * 1e3:.1f} ms  "
      f"ratio peft/gtrain {t / g:.2f}x (target >= 1.0x; {ref['trainable']} of {ref['params']} parameters "
      f"train; torch {ref['torch']}, transformers {ref['transformers']}, peft {ref['peft']})")
PY
  echo "$g $(/usr/bin/python3 -c 'import json,sys; print(json.loads(sys.argv[1])["step_s"])' "$ref")" >> "$work/ratios"
done
# A shared machine's steps vary by +-20% from minute to minute: the rounds alternate the two, and
# the median of their ratios is the figure.
if ((ROUNDS > 1)); then
  /usr/bin/python3 - "$work/ratios" <<'PY'
import statistics, sys
pairs = [tuple(map(float, l.split())) for l in open(sys.argv[1])]
print(f"median over {len(pairs)} rounds: ratio peft/gtrain {statistics.median(t / g for g, t in pairs):.2f}x")
PY
fi

# Memory, one rank: a full fine-tune's run (a few steps; its step time too) and the last LoRA round's.
g_full=$(gtrain_step "$work/full.toml" "$work/full" --set train.steps=$((STEPS < 5 ? STEPS : 5)))
"$BUILD/gtrain" plan "$work/full.toml" --ranks 1 --json > "$work/full_plan.json"
"$BUILD/gtrain" plan "$work/lora.toml" --ranks 1 --json > "$work/lora_plan.json"
/usr/bin/python3 - "$work" "$ROUNDS" "$g_full" "$g" <<'PY'
import json, sys
work, rounds, g_full, g_lora = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4])
M = 2.0**20
def measured(run):
    r = [json.loads(l) for l in open(f"{work}/{run}/metrics.jsonl")]
    r = [x for x in r if x.get("kind") == "train"][-1]
    parts = [r["param_mb"], r["grad_mb"], r["opt_state_mb"] + r.get("host_state_mb", 0), r["step_tensor_peak_mb"]]
    return parts + [sum(parts), r["peak_mem_mb"]]
def planned(name):
    m = json.load(open(f"{work}/{name}_plan.json"))["chosen"]["memory"]
    # Parameters (and a frozen base), the gradients kept between steps (ZeRO 0: all of them), the
    # optimizer's state, the rest of the step's peak, the sum (live) and the total with workspace.
    params, grads, opt = m["params"] + m["frozen"], m["grads"] + m["flat_accumulators"], m["optimizer"] + m["host"]
    return [x / M for x in (params, grads, opt, m["live"] - params - grads - opt, m["live"], m["total"])]
full, lora = measured("full"), measured(f"lora_{rounds}")
pf, pl = planned("full"), planned("lora")
print(f"memory, one rank (MiB; measured: the engine's tensors after a step and the step's tensor peak, "
      f"process: resident high-water mark; planned: gtrain plan --json):")
print(f"{'':24s} {'full measured':>14s} {'full planned':>13s} {'lora measured':>14s} {'lora planned':>13s}")
names = ["parameters (+ frozen)", "gradients", "optimizer state", "step tensors", "all tensors at the peak",
         "process / plan total"]
for i, n in enumerate(names):
    print(f"{n:24s} {full[i]:14.1f} {pf[i]:13.1f} {lora[i]:14.1f} {pl[i]:13.1f}")
print(f"memory: full fine-tune {full[4]:.1f} MiB (planned {pf[4]:.1f}, {pf[4] / full[4] - 1:+.1%})  "
      f"lora {lora[4]:.1f} MiB (planned {pl[4]:.1f}, {pl[4] / lora[4] - 1:+.1%})  lora/full {lora[4] / full[4]:.2f}x")
print(f"step time: full fine-tune {g_full * 1e3:.1f} ms  lora {g_lora * 1e3:.1f} ms  lora/full {g_lora / g_full:.2f}x")
PY
