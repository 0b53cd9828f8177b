#!/usr/bin/env bash
# GPT-2 124M on one CUDA GPU in one call: builds gtrain against python3's CUDA LibTorch, trains
# 12 layers x 12 heads x 768 wide, vocab 50304, sequence 1024, batch 16, bf16, 30 steps (10 warm-up,
# 20 timed), then the same model in PyTorch eager and with torch.compile (bench/gpt2_reference.py);
# prints tokens/s, MFU (H200 bf16 peak 989 TFLOP/s) and the ratios, checks that every loss starts near
# ln(vocab) and falls, compares the planner's memory estimate with torch's max allocated, runs the
# gpu test suite (tests/test_gpu.cpp), then, with the time left, gtrain without its fused loss and
# without fused AdamW (what each is worth), and appends a dated section with the commit to
# bench/RESULTS.md (and writes everything under $OUT).
#
# Usage: bench/gpu_gpt2.sh            the GPU benchmark (about 6-9 minutes on 16 cores, build included)
#        bench/gpu_gpt2.sh --smoke    the same path on CPU with a tiny GPT and the existing CPU build
#                                     (BUILD=build): proves the script, both programs and the checks
#        options: --no-build (reuse $BUILD), --no-record (leave RESULTS.md alone)
# Environment: BUILD (default build-cuda; build for --smoke), OUT (results folder), PYTHON (a python3
#   with torch), BUDGET_S (total seconds, default 570), JOBS (default nproc), COMMIT (when no .git).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
cd "$ROOT"
SMOKE=0 BUILD_IT=1 RECORD=1
for arg in "$@"; do
  case "$arg" in
    --smoke) SMOKE=1 ;;
    --no-build) BUILD_IT=0 ;;
    --no-record) RECORD=0 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"; exit 0 ;;
    *) echo "gpu_gpt2.sh: unknown option $arg (see --help)" >&2; exit 2 ;;
  esac
done
BUDGET_S=${BUDGET_S:-570}
JOBS=${JOBS:-$(nproc)}
STAMP=$(date -u +%Y%m%d-%H%M%S)
OUTDIR=${OUT:-$ROOT/bench/out/gpu_gpt2-$STAMP}
mkdir -p "$OUTDIR"
SECONDS=0
log() { echo "[gpu_gpt2 ${SECONDS}s] $*"; }
# Seconds a phase may take: its own cap, what the budget has left less a reserve for the phases
# after it, and never less than a floor (a phase cut short measures nothing).
allow() {
  local cap=$1 reserve=$2 floor=${3:-10} left
  left=$((BUDGET_S - SECONDS - reserve))
  ((left >= floor)) || left=$floor
  echo $((cap < left ? cap : left))
}

# shellcheck source=bench/gpu_lib.sh
source "$HERE/gpu_lib.sh"
gpu_find_python

if ((SMOKE)); then
  BUILD=${BUILD:-build}
  L=2 H=2 C=64 T=64 V=512 B=8 STEPS=30 WARM=10 DEVICE=cpu MODE="CPU smoke run (tiny GPT, not a GPU figure)"
  METRICS_EVERY=1 THREADS=1  # one thread each: steadier on a shared machine
else
  BUILD=${BUILD:-build-cuda}
  L=12 H=12 C=768 T=1024 V=50304 B=16 STEPS=30 WARM=10 DEVICE=cuda MODE="GPU benchmark"
  METRICS_EVERY=10 THREADS=0
fi

# ---- 0. facts -------------------------------------------------------------------------------
# COMMIT may be given (a copy of the tree without .git, as on a lent GPU machine).
if [[ -z "${COMMIT:-}" ]]; then
  COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  [[ "$COMMIT" == unknown ]] || git diff --quiet HEAD -- . ':!bench/RESULTS.md' 2>/dev/null || COMMIT="$COMMIT+dirty"
fi
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "commit: $COMMIT"
  echo "mode: $MODE"
  echo "host: $(hostname)"
  echo "cores: $(nproc)"
  echo "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1 || echo none)"
  echo "python: $PYTHON $("$PYTHON" -c 'import torch,sys;print("torch",torch.__version__,"cuda",torch.version.cuda,"available",torch.cuda.is_available())' 2>&1 | tail -1)"
  echo "compiler: $(c++ --version 2>/dev/null | head -1)  cmake: $(cmake --version 2>/dev/null | head -1)"
  echo "nvcc: $(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || echo none)"
} | tee "$OUTDIR/facts.txt"

# A build packed elsewhere (bench/gpu_pack_build.sh, with --no-build): its libraries and Open MPI.
gpu_use_packed_build "$BUILD" "$OUTDIR/facts.txt"

# ---- 1. build -------------------------------------------------------------------------------
BUILD_STATUS=ok
if ((BUILD_IT)) && ! ((SMOKE)); then
  # The same configuration as CI's torch2 build (scripts/build-torch2.sh: the CUDA toolkit, the
  # NCCL of torch's wheel, CUDA and NCCL required), with this machine's python's torch.
  EXTRA_PREFIX=
  EXTRA=()
  # Header-only dependencies a bare machine may lack: bench/gpu_pack_deps.sh copies them from a
  # machine that has them into bench/.deps (carry that folder along).
  if [[ -d "$HERE/.deps/usr" ]]; then
    [[ -f /usr/include/toml++/toml.h && -f /usr/include/nlohmann/json.hpp && -f /usr/include/gtest/gtest.h &&
      -f /usr/include/CLI/CLI.hpp ]] ||
      EXTRA_PREFIX="$HERE/.deps/usr"
    if [[ ! -f /usr/include/zlib.h && -f "$HERE/.deps/usr/include/zlib.h" ]]; then
      zlib_so=$( (ls /usr/lib/x86_64-linux-gnu/libz.so* /lib/x86_64-linux-gnu/libz.so* 2>/dev/null || true) | head -1)
      EXTRA+=(-DZLIB_INCLUDE_DIR="$HERE/.deps/usr/include" -DZLIB_LIBRARY="$zlib_so")
    fi
  fi
  # The GPU test suite needs GoogleTest (here, or carried in bench/.deps); without it only gtrain.
  if [[ -f /usr/include/gtest/gtest.h || -f "$HERE/.deps/usr/include/gtest/gtest.h" ]]; then TESTS=ON; else TESTS=OFF; fi
  log "configuring $BUILD with scripts/build-torch2.sh (python $PYTHON)"
  t=$(allow 150 300 60)
  if ! PYTHON=$PYTHON EXTRA_PREFIX=$EXTRA_PREFIX BUILD_TYPE=Release timeout "$t" "$ROOT/scripts/build-torch2.sh" \
      --configure-only "$BUILD" -- -DGTRAIN_BUILD_TESTS=$TESTS "${EXTRA[@]}" >"$OUTDIR/configure.log" 2>&1; then
    BUILD_STATUS="configure failed (see configure.log)"
    tail -25 "$OUTDIR/configure.log"
  else
    cat "$OUTDIR/configure.log"
    sed -n 's/^build-torch2: /torch2 build: /p' "$OUTDIR/configure.log" >>"$OUTDIR/facts.txt"
    t=$(allow 330 240 120)
    log "building gtrain -j$JOBS (at most ${t}s)"
    if ! timeout "$t" cmake --build "$BUILD" -j "$JOBS" --target gtrain >"$OUTDIR/build.log" 2>&1; then
      BUILD_STATUS="build failed or timed out (see build.log)"
      grep -m 20 -E "error|Error" "$OUTDIR/build.log" || tail -25 "$OUTDIR/build.log"
    fi
  fi
  log "build: $BUILD_STATUS"
fi
[[ -x "$BUILD/gtrain" ]] || { [[ "$BUILD_STATUS" == ok ]] && BUILD_STATUS="no $BUILD/gtrain"; }

# Warm-up steps 6-8 of both programs run under their profilers (outside the timed steps): where a
# step's time goes, kernel by kernel, for gtrain and for PyTorch eager side by side.
PROFILE_FIRST=$((WARM > 8 ? 6 : 0)) PROFILE_COUNT=3

# ---- 2. gtrain ------------------------------------------------------------------------------
GTRAIN_STATUS="not run ($BUILD_STATUS)"
RUN_DIR="$OUTDIR/gtrain-run"
cat >"$OUTDIR/gpt2.toml" <<TOML
# gpu_gpt2.sh: GPT-2 124M shape (or the smoke run's tiny GPT), synthetic tokens.
[model]
name = "gpt"
n_layer = $L
n_head = $H
n_embd = $C
seq_len = $T
vocab = $V
dropout = 0.0
[data]
kind = "synthetic"
synthetic_samples = 4096
workers = 2
prefetch = 4
[optimizer]
name = "adamw"
learning_rate = 6e-4
weight_decay = 0.1
beta1 = 0.9
beta2 = 0.95
[train]
global_batch = $B
steps = $STEPS
warmup_steps = 5
grad_clip = 1.0
eval_batches = 1
deterministic = false
device = "$DEVICE"
threads = $THREADS
[precision]
dtype = "bf16"
[parallel]
micro_batch = $B
[checkpoint]
at_end = false
[log]
progress = "plain"
interval = $METRICS_EVERY
metrics_interval = $METRICS_EVERY
profile_start = $PROFILE_FIRST
profile_steps = $PROFILE_COUNT
TOML
if [[ "$BUILD_STATUS" == ok ]]; then
  t=$(allow 120 170 60)
  log "gtrain: $L layers, $C wide, seq $T, vocab $V, batch $B, bf16, $STEPS steps on $DEVICE (at most ${t}s)"
  if timeout "$t" "$BUILD/gtrain" run "$OUTDIR/gpt2.toml" --force --run-dir "$RUN_DIR" --no-resume >"$OUTDIR/gtrain.log" 2>&1; then
    GTRAIN_STATUS=ok
  else
    GTRAIN_STATUS="failed with exit $? (see gtrain.log)"
    tail -8 "$OUTDIR/gtrain.log"
    # Once more without the fused AdamW kernel (the newest LibTorch API this run depends on), when
    # the budget still has room for it and the reference.
    if ((BUDGET_S - SECONDS > 200)) && ! ((SMOKE)); then
      log "gtrain failed; once more with optimizer.fused = false"
      t=$(allow 90 170 45)
      if timeout "$t" "$BUILD/gtrain" run "$OUTDIR/gpt2.toml" --force --run-dir "$RUN_DIR" --no-resume \
          --set optimizer.fused=false >"$OUTDIR/gtrain-unfused.log" 2>&1; then
        GTRAIN_STATUS="ok with optimizer.fused = false (the fused run failed: gtrain.log)"
      else
        GTRAIN_STATUS="$GTRAIN_STATUS; unfused retry failed too (gtrain-unfused.log)"
      fi
    fi
  fi
  grep -E "^gtrain:|^step" "$OUTDIR/gtrain.log" | tail -12 || true
  [[ "$GTRAIN_STATUS" == ok* ]] || tail -15 "$OUTDIR/gtrain.log"
  log "gtrain: $GTRAIN_STATUS"
fi

# ---- 3. PyTorch eager and torch.compile -----------------------------------------------------
t=$(allow 240 15 120)
log "PyTorch reference: eager, compile (at most ${t}s)"
timeout "$t" "$PYTHON" "$HERE/gpt2_reference.py" --device "$DEVICE" --modes eager,compile --layers $L --heads $H \
  --width $C --seq $T --vocab $V --batch $B --steps $STEPS --warmup $WARM --threads $THREADS \
  --profile-steps "$PROFILE_FIRST-$((PROFILE_FIRST + PROFILE_COUNT - 1))" --profile-out "$OUTDIR/profile-eager.txt" >"$OUTDIR/reference.jsonl" \
  2>"$OUTDIR/reference.err" || log "reference exited with $? (see reference.err)"
cat "$OUTDIR/reference.jsonl"

# ---- 3a. GPU test suite -------------------------------------------------------------------
# The gpu-labelled GoogleTest suite (tests/test_gpu.cpp: bf16 and fp16 training, fused loss, CUDA
# memory statistics, profiler, checkpoints, NCCL), built after the timed runs so that the build does
# not share the machine with them. The smoke run stands in the CPU suite's fused-loss tests.
if ((SMOKE)); then
  TEST_BIN=$BUILD/tests/gtrain_cpu_tests TEST_ARGS=(--gtest_filter='FusedLoss.*:FusedMath.*') TEST_KIND="CPU stand-in (FusedLoss.*, FusedMath.*)"
else
  TEST_BIN=$BUILD/tests/gtrain_gpu_tests TEST_ARGS=() TEST_KIND="gpu suite"
fi
TESTS_STATUS="not run"
rm -f "$OUTDIR/gpu-tests.json"
if [[ "$BUILD_STATUS" != ok ]]; then
  TESTS_STATUS="not run ($BUILD_STATUS)"
elif ! ((SMOKE)) && ((BUILD_IT)) && [[ "${TESTS:-OFF}" != ON ]]; then
  TESTS_STATUS="not run (no GoogleTest here: run bench/gpu_pack_deps.sh and carry bench/.deps)"
elif ! ((BUILD_IT)) && [[ ! -x "$TEST_BIN" ]]; then
  TESTS_STATUS="not run (--no-build and no $TEST_BIN)"
elif ((BUDGET_S - SECONDS < 90)); then
  TESTS_STATUS="not run (budget spent)"
else
  TESTS_STATUS=built
  if ! ((SMOKE)) && ((BUILD_IT)); then
    t=$(allow 150 60 45)
    log "building gtrain_gpu_tests (at most ${t}s)"
    timeout "$t" cmake --build "$BUILD" -j "$JOBS" --target gtrain_gpu_tests >"$OUTDIR/build-tests.log" 2>&1 ||
      { TESTS_STATUS="build failed or timed out (build-tests.log)"; grep -m 10 -E "error|Error" "$OUTDIR/build-tests.log" || true; }
  fi
  if [[ "$TESTS_STATUS" == built ]]; then
    t=$(allow 150 45 30)
    log "$TEST_KIND (at most ${t}s)"
    if timeout "$t" "$TEST_BIN" "${TEST_ARGS[@]}" --gtest_output="json:$OUTDIR/gpu-tests.json" >"$OUTDIR/gpu-tests.log" 2>&1; then
      TESTS_STATUS=ran
    else
      TESTS_STATUS="exited with $? (gpu-tests.log)"
    fi
    grep -E "^\[ *(OK|FAILED|SKIPPED|PASSED) *\]" "$OUTDIR/gpu-tests.log" | tail -20 || true
  fi
fi
log "tests: $TESTS_STATUS"

# ---- 3b. a 1B llama ---------------------------------------------------------------------------
# With what is left (issue 32's "if time remains"): bench/gpu_llama.sh, gtrain's llama with the fused
# loss against transformers' model in the same torch, eager and compiled. The smoke run proves it
# on CPU with a tiny llama.
LLAMA_STATUS="not run"
LLAMA_RESERVE=25
if ((SMOKE)) || ((BUDGET_S - SECONDS - LLAMA_RESERVE >= 120)); then
  lb=$((BUDGET_S - SECONDS - LLAMA_RESERVE))
  ((lb >= 120)) || lb=120
  log "llama (bench/gpu_llama.sh, at most ${lb}s)"
  smoke_arg=()
  ((SMOKE)) && smoke_arg=(--smoke)
  if BUILD=$BUILD OUT=$OUTDIR PYTHON=$PYTHON BUDGET_S=$lb "$HERE/gpu_llama.sh" "${smoke_arg[@]}" >"$OUTDIR/llama.log" 2>&1; then
    LLAMA_STATUS=ok
  else
    LLAMA_STATUS="exited with $?"
  fi
  sed -n '/^### /,$p' "$OUTDIR/llama.log" | grep -v '^\[gpu_llama' || tail -15 "$OUTDIR/llama.log"
else
  log "llama: skipped (budget spent: $((BUDGET_S - SECONDS))s left)"
fi
log "llama: $LLAMA_STATUS"

# ---- 3c. gtrain variants --------------------------------------------------------------------
# With what the budget has left after the main figures and the llama: gtrain again without one of
# its GPU-specific choices at a time, WARM + 10 steps (10 timed), no profiler: what each choice is
# worth on this GPU. Each "name|KEY=VALUE": a --set override, or with env: an environment variable
# (the fused loss's CUDA kernel against the ATen ops it replaces: runtime/models/fused_loss.h; the
# models' fused kernels, runtime/models/fused_ops.h and runtime/train/fused_adamw.h).
VARIANTS=("fused_loss off|train.fused_loss=off" "AdamW not fused|optimizer.fused=false"
  "loss kernel off (ATen ops)|env:GTRAIN_FUSED_LOSS_KERNEL=0" "norm kernels off (ATen ops)|env:GTRAIN_FUSED_NORM=0"
  "bias+GELU kernel off (ATen ops)|env:GTRAIN_FUSED_GELU=0"
  "AdamW-clip kernel off (at::_fused_adamw_)|env:GTRAIN_FUSED_ADAMW_CLIP=0")
: >"$OUTDIR/variants.tsv"
if [[ "$GTRAIN_STATUS" == ok ]]; then
  for v in "${VARIANTS[@]}"; do
    t=0
    ((BUDGET_S - SECONDS < 75)) || t=$(allow 60 15 30)
    gpu_variant "$v" "$OUTDIR/variant-" "$OUTDIR/variants.tsv" "$t" "$OUTDIR/gpt2.toml" \
      --set train.steps=$((WARM + 10)) --set log.profile_start=0
  done
fi

# ---- 4. table, checks, RESULTS.md -----------------------------------------------------------
set +e
"$PYTHON" - "$OUTDIR" "$RUN_DIR/metrics.jsonl" "$GTRAIN_STATUS" "$WARM" "$B" "$T" "$V" "$L" "$C" "$SMOKE" \
  "$TESTS_STATUS" "$TEST_KIND" \
  <<'PY'
import json, math, os, sys
out, metrics, status, warm, B, T, V, L, C, smoke, tests_status, test_kind = sys.argv[1:]
warm, B, T, V, L, C, smoke = int(warm), int(B), int(T), int(V), int(L), int(C), smoke == "1"
facts = dict(l.split(": ", 1) for l in open(os.path.join(out, "facts.txt")).read().splitlines() if ": " in l)
PEAK = 989e12
ln_v = math.log(V)
rows, problems, notes = {}, [], []
ref = [json.loads(l) for l in open(os.path.join(out, "reference.jsonl")) if l.strip().startswith("{")]
for r in ref:
    if "mode" in r:
        rows[r["mode"]] = r
    else:  # the reference could not start at all
        for mode in ("eager", "compile"):
            rows[mode] = {"mode": mode, "error": r.get("error", "no result")}
# The reference counts its parameters; without it (it failed to start), GPT-2's count from the shape:
# token and position embeddings (the output layer is tied), 12C^2 + 13C a block, the final LayerNorm.
params = next((r["params"] for r in ref if "params" in r), None) or V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C

def gtrain_row(name, status, metrics):
    """A table row from a gtrain run's metrics.jsonl: tokens/s over the steps after warm-up."""
    g = {"mode": name, "status": status}
    if not (status.startswith("ok") and os.path.exists(metrics)):
        return g
    recs = [json.loads(l) for l in open(metrics)]
    train = {r["step"]: r for r in recs if r.get("kind") == "train"}
    if not train:
        g["status"] = "no train records in " + os.path.basename(metrics)
        return g
    last = max(train)
    if warm in train and last > warm:
        dt = train[last]["elapsed_s"] - train[warm]["elapsed_s"]
        g["tokens_per_s"] = (last - warm) * B * T / dt
        if params:
            fpt = 6 * params + 12 * L * C * T
            g["mfu"] = g["tokens_per_s"] * fpt / PEAK
    g["first_loss"] = train[min(train)]["loss"]
    g["last_loss"] = train[last]["loss"]
    for k in ("peak_mem_mb", "est_mem_mb", "est_step_s", "est_device_mem_mb", "cuda_max_allocated_mb", "cuda_max_reserved_mb",
              "gpu_mem_used_mb", "gpu_util"):
        if k in train[last]:
            g[k] = train[last][k]
    return g

g = gtrain_row("gtrain", status, metrics)
rows["gtrain"] = g
variants = []
vpath = os.path.join(out, "variants.tsv")
for line in (open(vpath).read().splitlines() if os.path.exists(vpath) else []):
    vname, vstatus, vmetrics = line.split("\t")
    key = "gtrain, " + vname
    rows[key] = gtrain_row(key, vstatus, vmetrics)
    variants.append(key)

def fmt(x, spec):
    return format(x, spec) if isinstance(x, (int, float)) else "-"

lines = ["| run | tokens/s | MFU | vs eager | first loss | last loss | max allocated MB | note |",
         "|---|---:|---:|---:|---:|---:|---:|---|"]
eager = rows.get("eager", {}).get("tokens_per_s")
for name in ["gtrain"] + variants + ["eager", "compile"]:
    r = rows.get(name, {"status": "not run"})
    tps = r.get("tokens_per_s")
    ratio = tps / eager if tps and eager else None
    mem = r.get("cuda_max_allocated_mb", r.get("max_allocated_mb"))
    note = r.get("skipped") or r.get("error") or ("" if r.get("status", "ok") == "ok" else r.get("status"))
    if name != "gtrain" and "optimizer" in r:
        note = (note + " " if note else "") + f"AdamW {r['optimizer']}, attention {r['attention']}"
    mfu = r.get("mfu") if not smoke else None  # MFU against a GPU peak means nothing on a CPU
    lines.append(f"| {name} | {fmt(tps, ',.0f')} | {fmt(mfu, '.1%') if mfu else '-'} | "
                 f"{fmt(ratio, '.2f') + 'x' if ratio else '-'} | {fmt(r.get('first_loss'), '.3f')} | "
                 f"{fmt(r.get('last_loss'), '.3f')} | {fmt(mem, ',.0f')} | {note} |")
# Checks: every loss that ran starts near ln(vocab) and falls.
for name, r in rows.items():
    if "first_loss" not in r:
        continue
    if abs(r["first_loss"] - ln_v) > 0.5:
        problems.append(f"{name}: first loss {r['first_loss']:.3f} is not near ln({V}) = {ln_v:.2f}")
    if not r["last_loss"] < r["first_loss"]:
        problems.append(f"{name}: loss did not fall ({r['first_loss']:.3f} -> {r['last_loss']:.3f})")
if "first_loss" not in g:
    problems.append(f"gtrain: no figures ({status})")
if "est_mem_mb" in g and "cuda_max_allocated_mb" in g:
    rel = g["est_mem_mb"] / g["cuda_max_allocated_mb"] - 1
    if "est_device_mem_mb" in g:
        notes.append(f"planner's whole-GPU estimate (tensors + CUDA context, workspaces, allocator slack) "
                     f"{g['est_device_mem_mb']:,.0f} MB vs max reserved {g.get('cuda_max_reserved_mb', 0):,.0f} MB"
                     + (f", NVML used {g['gpu_mem_used_mb']:,.0f} MB" if "gpu_mem_used_mb" in g else ""))
    notes.append(f"planner estimate of tensors {g['est_mem_mb']:,.0f} MB vs torch max allocated {g['cuda_max_allocated_mb']:,.0f} MB: "
                 f"{rel:+.1%} ({'within' if abs(rel) <= 0.10 else 'outside'} the 10% target)")
elif smoke:
    notes.append("memory: CPU run, no CUDA max allocated to compare (the CPU resident-memory check is test MemoryEstimate)")
if "est_step_s" in g and g.get("tokens_per_s"):
    measured = B * T / g["tokens_per_s"]
    rel = g["est_step_s"] / measured - 1
    notes.append(f"planner step estimate {g['est_step_s']:.3f} s vs measured {measured:.3f} s: {rel:+.1%}"
                 + ("" if smoke else f" ({'within' if abs(rel) <= 0.10 else 'outside'} the 10% target)"))
if eager and g.get("tokens_per_s"):
    r = g["tokens_per_s"] / eager
    notes.append(f"gtrain / eager = {r:.2f}x" + (" (CPU smoke run: says nothing about the GPU target)" if smoke else
                 f" (target >= 1.00x: {'met' if r >= 1.0 else 'NOT met'})"))
for key in variants:
    v = rows[key].get("tokens_per_s")
    if v and g.get("tokens_per_s"):
        notes.append(f"{key}: {v:,.0f} tokens/s; gtrain's default is {g['tokens_per_s'] / v:.2f}x that "
                     f"(10 timed steps against 20)")
comp = rows.get("compile", {}).get("tokens_per_s")
if comp and g.get("tokens_per_s"):
    r = g["tokens_per_s"] / comp
    notes.append(f"gtrain / torch.compile = {r:.2f}x" + ("" if smoke else
                 f" (issue 54's target >= 1.00x: {'met' if r >= 1.0 else 'NOT met'}; moonshot 1.10x)"))
# The test suite: every test passed or skipped (a GPU test skips only without a device).
tpath = os.path.join(out, "gpu-tests.json")
if os.path.exists(tpath):
    suites = json.load(open(tpath)).get("testsuites", [])
    cases = [(f"{su['name']}.{c['name']}", c) for su in suites for c in su.get("testsuite", [])]
    failed = [n for n, c in cases if c.get("failures")]
    skipped = [n for n, c in cases if c.get("result") == "SKIPPED" and not c.get("failures")]
    notes.append(f"{test_kind}: {len(cases)} tests, {len(cases) - len(failed) - len(skipped)} passed, "
                 f"{len(failed)} failed, {len(skipped)} skipped"
                 + (f" (failed: {', '.join(failed)})" if failed else "")
                 + (f" (skipped: {', '.join(skipped)})" if skipped else ""))
    if failed:
        problems.append(f"{test_kind}: {len(failed)} failed")
else:
    notes.append(f"{test_kind}: {tests_status}")
    if tests_status.startswith("exited"):  # stopped before writing its report: a crash or the timeout
        problems.append(f"{test_kind}: {tests_status}")
checks = "all loss checks passed" if not problems else "; ".join(problems)
title = ("CPU smoke run (tiny GPT on CPU, not a GPU benchmark)" if smoke
         else "GPU benchmark: GPT-2 124M, bf16, batch 16 x 1024")
section = [f"## {facts.get('date', '?')} - commit {facts.get('commit', '?')} - {title}", "",
           f"- machine: {facts.get('host', '?')} ({facts.get('cores', '?')} cores), GPU: {facts.get('gpu', '?')}",
           f"- {facts.get('python', '?')}",
           f"- model: {L} layers, {C} wide, seq {T}, vocab {V}, batch {B}; timed steps after {warm} warm-up steps; "
           f"MFU against 989 TFLOP/s (H200 bf16 dense)", ""] + lines + [""] + \
          [f"- {n}" for n in notes] + [f"- checks: {checks}", ""]
text = "\n".join(section)
print("\n" + text)
open(os.path.join(out, "results_section.md"), "w").write(text + "\n")
json.dump({"rows": rows, "problems": problems, "notes": notes}, open(os.path.join(out, "summary.json"), "w"), indent=2)
sys.exit(1 if problems else 0)
PY
rc=$?
set -e
if [[ -f "$OUTDIR/llama_section.md" ]]; then
  { echo; cat "$OUTDIR/llama_section.md"; } >>"$OUTDIR/results_section.md"
elif [[ "$LLAMA_STATUS" != "not run" ]]; then
  printf '\n### llama\n\n- %s (see llama.log)\n' "$LLAMA_STATUS" >>"$OUTDIR/results_section.md"
fi
# The llama's checks count as the GPT's do (a loss that does not fall is a failed check); a llama
# skipped for want of time or of transformers is not a failure.
[[ "$LLAMA_STATUS" == ok || "$LLAMA_STATUS" == "not run" || "$LLAMA_STATUS" == "exited with 77" ]] || rc=1
if ((RECORD)); then
  [[ -f "$HERE/RESULTS.md" ]] || printf '# Benchmark results\n\n' >"$HERE/RESULTS.md"
  { echo; cat "$OUTDIR/results_section.md"; } >>"$HERE/RESULTS.md"
  log "appended to bench/RESULTS.md (the section alone: $OUTDIR/results_section.md)"
fi
cp "$RUN_DIR/metrics.jsonl" "$OUTDIR/gtrain-metrics.jsonl" 2>/dev/null || true
cp "$RUN_DIR/profile/profile-rank0.txt" "$OUTDIR/profile-gtrain.txt" 2>/dev/null || true
for f in profile-gtrain.txt profile-eager.txt; do
  [[ -f "$OUTDIR/$f" ]] && { echo "== $f (top)"; head -22 "$OUTDIR/$f"; }
done
# A lent machine sends back at most 8 files: keep the summaries whole and pack the logs, the config
# and the run directory (less Kineto traces and checkpoints) into logs.tgz.
packed=()
for f in configure.log build.log build-tests.log gpu-tests.log gpu-tests.json gtrain.log gtrain-unfused.log \
    reference.err gpt2.toml variants.tsv RESULTS.md ldd.txt llama.log llama.toml llama-gtrain.log \
    llama-reference.jsonl llama-reference.err llama_section.md llama-run llama-variants.tsv; do
  [[ -e "$OUTDIR/$f" ]] && packed+=("$f")
done
[[ -d "$RUN_DIR" ]] && packed+=("$(basename "$RUN_DIR")")
for f in "$OUTDIR"/variant-* "$OUTDIR"/llama-variant-*; do [[ -e "$f" ]] && packed+=("$(basename "$f")"); done
if ((${#packed[@]})); then
  tar -C "$OUTDIR" --exclude='trace-rank*.json' --exclude='checkpoints' -czf "$OUTDIR/logs.tgz" "${packed[@]}" &&
    (cd "$OUTDIR" && rm -rf "${packed[@]}")
fi
log "done in ${SECONDS}s; files in $OUTDIR: $(cd "$OUTDIR" && ls | tr '\n' ' '); exit $rc"
exit $rc
