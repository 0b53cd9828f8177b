#!/usr/bin/env bash
# A llama of about 1B parameters (Llama 3.2 1B's shape: 16 layers, 2048 wide, 32 heads over 8
# key/value heads, SwiGLU 8192, vocab 128256, tied head, llama3 rope) on one CUDA GPU: gtrain with
# its fused loss against transformers' LlamaForCausalLM in the same torch, eager and compiled
# (bench/llama_reference.py), bf16 autocast over fp32 weights, fused AdamW, sequence 2048, batch 8.
# Prints tokens/s, MFU (against the H200's 989 TFLOP/s) and the ratios, checks that every loss starts
# near ln(vocab) and falls, and writes llama_section.md (and its logs) into OUT. bench/gpu_gpt2.sh
# calls it with the time its own phases left; it also runs alone.
#
# Usage: bench/gpu_llama.sh            on a CUDA machine (about 3 minutes, compile included)
#        bench/gpu_llama.sh --smoke    a tiny llama on CPU in fp32, eager only: proves the script
# With time left after the references, gtrain again with one of the llama's fused kernels off at a
# time (RMSNorm, SwiGLU, rotary: runtime/models/fused_ops.h), 5 timed steps each: what each is worth.
# Environment: BUILD (default build-cuda; build for --smoke), OUT (results folder), PYTHON (a python3
#   with torch and transformers), BUDGET_S (seconds, default 240), MODES (reference modes, default
#   eager,compile on CUDA and eager on CPU), VARIANTS_S (seconds the variants may take, default 75;
#   the smoke run tries only the first, to prove the path).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
SMOKE=0
for arg in "$@"; do
  case "$arg" in
    --smoke) SMOKE=1 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"; exit 0 ;;
    *) echo "gpu_llama.sh: unknown option $arg (see --help)" >&2; exit 2 ;;
  esac
done
BUDGET_S=${BUDGET_S:-240}
OUTDIR=${OUT:-$HERE/out/gpu_llama-$(date -u +%Y%m%d-%H%M%S)}
mkdir -p "$OUTDIR"
SECONDS=0
log() { echo "[gpu_llama ${SECONDS}s] $*"; }
# shellcheck source=bench/gpu_lib.sh
source "$HERE/gpu_lib.sh"
PYTHON=${PYTHON:-python3}
if ! "$PYTHON" -c 'import transformers' 2>/dev/null; then
  echo "SKIPPED: $PYTHON has no transformers (run in the project venv: scripts/venv.sh run $0)"
  exit 77
fi
if ((SMOKE)); then
  BUILD=${BUILD:-build}
  L=2 H=4 KV=2 C=64 I=160 T=32 V=256 B=4 TIED=1 FACTOR=8.0 STEPS=12 WARM=4 DEVICE=cpu DTYPE=fp32 THREADS=1
  MODES=${MODES:-eager} TITLE="CPU smoke run (tiny llama on CPU, fp32, not a GPU figure)"
else
  BUILD=${BUILD:-build-cuda}
  L=16 H=32 KV=8 C=2048 I=8192 T=2048 V=128256 B=8 TIED=1 FACTOR=32.0 STEPS=15 WARM=5 DEVICE=cuda DTYPE=bf16 THREADS=0
  MODES=${MODES:-eager,compile} TITLE="GPU benchmark: a 1.2B llama (Llama 3.2 1B's shape), bf16, batch 8 x 2048"
fi
[[ $DTYPE == bf16 ]] && PRECISION=bf16 || PRECISION=fp32

cat >"$OUTDIR/llama.toml" <<TOML
# gpu_llama.sh: Llama 3.2 1B's shape (or the smoke run's tiny llama), synthetic tokens.
[model]
name = "llama"
n_layer = $L
n_head = $H
n_kv_head = $KV
n_embd = $C
intermediate_size = $I
seq_len = $T
vocab = $V
tied_embeddings = $( ((TIED)) && echo true || echo false)
rope_theta = 500000.0
rope_scaling = "llama3"
rope_factor = $FACTOR
[data]
kind = "synthetic"
synthetic_samples = 4096
[optimizer]
learning_rate = 1e-3
beta1 = 0.9
beta2 = 0.95
weight_decay = 0.1
[train]
global_batch = $B
steps = $STEPS
warmup_steps = 0
eval_batches = 1
deterministic = false
device = "$DEVICE"
threads = $THREADS
fused_loss = "on"
[precision]
dtype = "$PRECISION"
[parallel]
micro_batch = $B
[checkpoint]
at_end = false
[log]
progress = "none"
metrics_interval = $WARM
TOML

GTRAIN_STATUS="not run"
RUN_DIR="$OUTDIR/llama-run"
MAIN_S=0
if [[ -x "$BUILD/gtrain" ]]; then
  t=$((BUDGET_S * 2 / 5))
  log "gtrain: llama $L layers, $C wide, $H/$KV heads, MLP $I, seq $T, vocab $V, batch $B, $DTYPE on $DEVICE (at most ${t}s)"
  if timeout "$t" "$BUILD/gtrain" run "$OUTDIR/llama.toml" --force --ranks 1 --run-dir "$RUN_DIR" --no-resume \
      >"$OUTDIR/llama-gtrain.log" 2>&1; then
    GTRAIN_STATUS=ok
  else
    GTRAIN_STATUS="failed with exit $? (see llama-gtrain.log)"
    tail -8 "$OUTDIR/llama-gtrain.log"
  fi
  MAIN_S=$SECONDS
else
  GTRAIN_STATUS="not run (no $BUILD/gtrain)"
fi
log "gtrain: $GTRAIN_STATUS"

t=$((BUDGET_S - SECONDS - 10))
((t >= 30)) || t=30
log "transformers: $MODES (at most ${t}s)"
timeout "$t" "$PYTHON" "$HERE/llama_reference.py" --device "$DEVICE" --dtype "$DTYPE" --modes "$MODES" \
  --layers $L --heads $H --kv-heads $KV --width $C --mlp $I --seq $T --vocab $V --batch $B --tied $TIED \
  --rope-factor $FACTOR --steps $STEPS --warmup $WARM --threads $((THREADS > 0 ? THREADS : $(nproc))) \
  >"$OUTDIR/llama-reference.jsonl" 2>"$OUTDIR/llama-reference.err" || log "reference exited with $? (see llama-reference.err)"
cat "$OUTDIR/llama-reference.jsonl"

# The variants: one fused kernel off at a time (its switch set to 0: the ATen ops), WARM + 5 steps,
# while the time left holds another run as long as the main one and VARIANTS_S is not spent.
VARIANTS=("RMSNorm kernels off (ATen ops)|env:GTRAIN_FUSED_NORM=0"
  "SwiGLU kernel off (ATen ops)|env:GTRAIN_FUSED_SWIGLU=0" "rotary kernel off (ATen ops)|env:GTRAIN_FUSED_ROPE=0")
((SMOKE)) && VARIANTS=("${VARIANTS[0]}")
VARIANTS_S=${VARIANTS_S:-75}
: >"$OUTDIR/llama-variants.tsv"
if [[ "$GTRAIN_STATUS" == ok ]]; then
  vstart=$SECONDS
  for v in "${VARIANTS[@]}"; do
    t=0
    ((SECONDS - vstart + MAIN_S > VARIANTS_S || BUDGET_S - SECONDS < MAIN_S + 15)) || t=$((MAIN_S + 15))
    gpu_variant "$v" "$OUTDIR/llama-variant-" "$OUTDIR/llama-variants.tsv" "$t" "$OUTDIR/llama.toml" --ranks 1 \
      --set train.steps=$((WARM + 5))
  done
fi

set +e
"$PYTHON" - "$OUTDIR" "$RUN_DIR/metrics.jsonl" "$GTRAIN_STATUS" "$WARM" "$B" "$T" "$V" "$L" "$C" "$SMOKE" "$TITLE" <<'PY'
import json, math, os, sys
out, metrics, status, warm, B, T, V, L, C, smoke, title = sys.argv[1:]
warm, B, T, V, L, C, smoke = int(warm), int(B), int(T), int(V), int(L), int(C), smoke == "1"
PEAK = 989e12
ref = [json.loads(l) for l in open(os.path.join(out, "llama-reference.jsonl")) if l.strip().startswith("{")]

def gtrain_figures(path):
    """tokens/s over the steps after `warm`, losses and memory from a run's metrics.jsonl."""
    r = {}
    train = {t["step"]: t for t in map(json.loads, open(path)) if t.get("kind") == "train"}
    last = max(train) if train else 0
    if warm in train and last > warm:
        r["tokens_per_s"] = (last - warm) * B * T / (train[last]["elapsed_s"] - train[warm]["elapsed_s"])
        r["timed_steps"] = last - warm
        if fpt and not smoke:
            r["mfu"] = r["tokens_per_s"] * fpt / PEAK
    if train:
        r["first_loss"], r["last_loss"] = train[min(train)]["loss"], train[last]["loss"]
        for k in ("cuda_max_allocated_mb", "est_mem_mb", "est_step_s", "step_time_s"):
            if k in train[last]:
                r[k] = train[last][k]
    return r, train
rows = {r.get("mode", "reference"): r for r in ref}
fpt = next((r["flops_per_token"] for r in ref if "flops_per_token" in r), None)
problems, notes = [], []
g = {"status": status}
g_train = {}
if status == "ok" and os.path.exists(metrics):
    figures, train = gtrain_figures(metrics)
    g.update(figures)
    if not train:
        g["status"] = "no train records"
    g_train = train
variants = []
for line in open(os.path.join(out, "llama-variants.tsv")):
    name, vstatus, vpath = line.rstrip("\n").split("\t")
    v = {"status": vstatus}
    if vstatus == "ok" and os.path.exists(vpath):
        figures, vtrain = gtrain_figures(vpath)
        v.update(figures)
        # The kernel and the ATen ops it replaces train the same: losses at the steps both logged
        # within 1% (bf16 rounding differs; on CPU the switch changes nothing: equal).
        both = sorted(set(vtrain) & set(g_train))
        worst = max((abs(vtrain[k]["loss"] - g_train[k]["loss"]) / abs(g_train[k]["loss"]) for k in both), default=None)
        if worst is None or worst > 0.01:
            problems.append(f"gtrain, {name}: losses differ from the default run's by "
                            f"{'-' if worst is None else format(worst, '.2%')} at steps {both} (1% allowed)")
    variants.append("gtrain, " + name)
    rows["gtrain, " + name] = v
rows = {"gtrain": g, **{k: v for k, v in rows.items() if k != "gtrain"}}

def fmt(x, spec):
    return format(x, spec) if isinstance(x, (int, float)) else "-"

eager = rows.get("eager", {}).get("tokens_per_s")
lines = ["| run | tokens/s | MFU | vs transformers eager | first loss | last loss | max allocated MB | note |",
         "|---|---:|---:|---:|---:|---:|---:|---|"]
for name in ["gtrain"] + variants + ["eager", "compile"]:
    r = rows.get(name, {"status": "not run"})
    tps = r.get("tokens_per_s")
    note = r.get("error") or r.get("skipped") or ("" if r.get("status", "ok") == "ok" else r.get("status"))
    label = name if name.startswith("gtrain") else f"transformers {name}"
    mem = r.get("cuda_max_allocated_mb", r.get("max_allocated_mb"))
    lines.append(f"| {label} | {fmt(tps, ',.0f')} | {fmt(r.get('mfu'), '.1%') if r.get('mfu') and not smoke else '-'} | "
                 f"{fmt(tps / eager, '.2f') + 'x' if tps and eager else '-'} | {fmt(r.get('first_loss'), '.3f')} | "
                 f"{fmt(r.get('last_loss'), '.3f')} | {fmt(mem, ',.0f')} | {note} |")
for name, r in rows.items():
    if "first_loss" not in r:
        continue
    if abs(r["first_loss"] - math.log(V)) > 0.5:
        problems.append(f"{name}: first loss {r['first_loss']:.3f} is not near ln({V}) = {math.log(V):.2f}")
    if not r["last_loss"] < r["first_loss"]:
        # gtrain must learn; the references' losses are for timing (a constant 1e-3 without warm-up
        # for 15 steps can rise for a while, as transformers' compiled run did on the H200).
        (problems if name == "gtrain" else notes).append(
            f"{name}: loss did not fall ({r['first_loss']:.3f} -> {r['last_loss']:.3f})")
if "first_loss" not in g:
    problems.append(f"gtrain: no figures ({g['status']})")
for name in variants:
    v = rows[name]
    if v.get("tokens_per_s") and g.get("tokens_per_s"):
        notes.append(f"{name}: {v['tokens_per_s']:,.0f} tokens/s; gtrain's default is "
                     f"{g['tokens_per_s'] / v['tokens_per_s']:.2f}x that ({v['timed_steps']} timed steps against "
                     f"{g['timed_steps']})")
    elif v["status"] != "ok":
        notes.append(f"{name}: {v['status']}")
    elif "first_loss" in v:
        problems.append(f"{name}: no timed steps")
if eager and g.get("tokens_per_s"):
    notes.append(f"llama: gtrain / transformers eager = {g['tokens_per_s'] / eager:.2f}x"
                 + (" (CPU smoke run: says nothing about the GPU)" if smoke else ""))
comp = rows.get("compile", {}).get("tokens_per_s")
if comp and g.get("tokens_per_s"):
    r = g["tokens_per_s"] / comp
    notes.append(f"llama: gtrain / transformers compiled = {r:.2f}x"
                 + ("" if smoke else f" (target >= 1.00x: {'met' if r >= 1.0 else 'NOT met'})"))
if "est_mem_mb" in g and "cuda_max_allocated_mb" in g:
    rel = g["est_mem_mb"] / g["cuda_max_allocated_mb"] - 1
    notes.append(f"llama: planner estimate of tensors {g['est_mem_mb']:,.0f} MB vs torch max allocated "
                 f"{g['cuda_max_allocated_mb']:,.0f} MB ({rel:+.1%}, {'within' if abs(rel) <= 0.10 else 'outside'} "
                 "the 10% target)")
if "est_step_s" in g and g.get("tokens_per_s"):
    measured = B * T / g["tokens_per_s"]
    rel = g["est_step_s"] / measured - 1
    notes.append(f"llama: planner step estimate {g['est_step_s']:.3f} s vs measured {measured:.3f} s ({rel:+.1%}"
                 + ("" if smoke else f", {'within' if abs(rel) <= 0.10 else 'outside'} the 10% target") + ")")
params = next((r["params"] for r in ref if "params" in r), None)
section = [f"### {title}", "",
           f"- model: {L} layers, {C} wide, seq {T}, vocab {V}, batch {B}" + (f", {params / 1e9:.2f}B parameters" if params and params >= 1e8 else f", {params / 1e6:.2f}M parameters" if params else "")
           + f"; timed steps after {warm} warm-up steps", ""] + lines + [""] + [f"- {n}" for n in notes] + \
          [f"- checks: {'all loss checks passed' if not problems else '; '.join(problems)}", ""]
text = "\n".join(section)
print("\n" + text)
open(os.path.join(out, "llama_section.md"), "w").write(text + "\n")
sys.exit(1 if problems else 0)
PY
rc=$?
log "done in ${SECONDS}s; exit $rc"
exit $rc
