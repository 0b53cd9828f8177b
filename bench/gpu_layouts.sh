#!/usr/bin/env bash
# Every multi-rank layout on the one lent GPU (issue 54): 2-4 ranks share it, so their CUDA tensors
# go over MPI through host memory (runtime/comm/device_sharing.h says so in a line this checks). Each
# layout trains the same small GPT (fp32, 4 blocks) and its losses are compared with one rank's on
# the same GPU: dp with ZeRO 0-3, tp2, pp2, dp2 x pp2, uneven shares on 3 ranks, LoRA; bitwise mode
# and SFT packing (examples/chat_sft, bitwise) must equal one rank bit for bit; a killed rank's
# in-job restart must finish with the uninterrupted run's losses. Prints one row per layout, writes
# everything under $OUT, and appends a dated section with the commit to bench/RESULTS.md.
#
# Usage: bench/gpu_layouts.sh            on the GPU machine, with a packed build (bench/gpu_pack_build.sh:
#                                        BUILD=bench/.gpubuild, its Open MPI included); about 3 minutes
#        bench/gpu_layouts.sh --smoke    the same layouts on CPU ranks with every tensor staged through
#                                        host buffers (GTRAIN_STAGED_COMM=all) and the CPU build (BUILD=build;
#                                        a packed one too, to check a pack: see bench/gpu_pack_mpi.sh --check)
#        options: --no-record (leave RESULTS.md alone)
# Environment: BUILD, OUT (results folder), PYTHON (the GPU run's python with torch, for the packed
#   build's libraries), STEPS (default 30; 8 for --smoke), TOL (relative loss tolerance, 1e-5),
#   BUDGET_S (seconds for all of it, 0 = no limit: a layout that would start past it, at the pace of
#   the runs so far, is skipped and its row says so; the rows it has are recorded all the same).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
cd "$ROOT"
SMOKE=0 RECORD=1
for arg in "$@"; do
  case "$arg" in
    --smoke) SMOKE=1 ;;
    --no-record) RECORD=0 ;;
    -h|--help) awk 'NR > 1 && !/^#/ {exit} NR > 1' "$0"; exit 0 ;;
    *) echo "gpu_layouts.sh: unknown option $arg (see --help)" >&2; exit 2 ;;
  esac
done
STAMP=$(date -u +%Y%m%d-%H%M%S)
OUTDIR=${OUT:-$ROOT/bench/out/gpu_layouts-$STAMP}
mkdir -p "$OUTDIR"
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
SECONDS=0
TOL=${TOL:-1e-5}
BUDGET_S=${BUDGET_S:-0}
CORES=$(nproc)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
if ((SMOKE)); then
  BUILD=${BUILD:-build} STEPS=${STEPS:-8} DEVICE=cpu MODE="CPU smoke run (every tensor staged; not a GPU figure)"
  export GTRAIN_STAGED_COMM=all
  note_want="GTRAIN_STAGED_COMM=all: every tensor"
else
  BUILD=${BUILD:-bench/.gpubuild} STEPS=${STEPS:-30} DEVICE=cuda MODE="one GPU shared by every rank"
  note_want="NCCL refuses two ranks on one device"
fi
[[ $BUILD == /* ]] || BUILD=$ROOT/$BUILD
# shellcheck source=bench/gpu_lib.sh
source "$HERE/gpu_lib.sh"
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
[[ -f $BUILD/BUILD_INFO ]] && gpu_find_python  # a packed build loads torch from python's wheel
GTRAIN=$BUILD/gtrain
COMMIT=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "commit: $COMMIT"
  echo "mode: $MODE"
  echo "host: $(hostname), $CORES cores"
  echo "gpu: $(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -1 || echo none)"
} | tee "$OUTDIR/facts.txt"
gpu_use_packed_build "$BUILD" "$OUTDIR/facts.txt"
[[ -x $GTRAIN ]] || { echo "gpu_layouts.sh: $GTRAIN is missing (BUILD)" >&2; exit 2; }
command -v mpirun >/dev/null || { echo "gpu_layouts.sh: no mpirun (a packed build brings its own: bench/gpu_pack_build.sh)" >&2; exit 2; }

# The job: a GPT of 4 blocks in fp32 (one matmul order per layout: 1 thread), checkpoints every 10 steps.
cat >"$WORK/gpt.toml" <<TOML
[model]
name = "gpt"
n_layer = 4
n_head = 4
n_embd = 64
seq_len = 32
vocab = 64
[data]
kind = "synthetic"
[train]
device = "$DEVICE"
global_batch = 24
steps = $STEPS
threads = 1
[optimizer]
eps = 1e-6
[checkpoint]
interval = 10
[log]
progress = "none"
TOML
ex=$ROOT/examples/chat_sft
cat >"$WORK/sft.toml" <<TOML
[model]
name = "llama"
preset = "llama-tiny"
n_layer = 2
n_embd = 32
n_head = 4
n_kv_head = 2
intermediate_size = 64
seq_len = 64
[data]
kind = "jsonl"
format = "chat"
path = "$ex/conversations.jsonl"
tokenizer = "$ex/tokenizer"
[train]
device = "$DEVICE"
global_batch = 10
steps = $STEPS
threads = 1
reproducible = "bitwise"
reproducible_chunk = 2
[checkpoint]
interval = 0
[log]
progress = "none"
TOML

# With BUDGET_S: whether a run of RANKS ranks would not finish in it, at the slowest pace per rank
# so far; skip NAME records that it did not run (check prints its row as skipped).
slowest=0
over_budget() { ((BUDGET_S > 0 && SECONDS + slowest * $1 > BUDGET_S)); }
skip() {
  echo skipped >"$WORK/$1.seconds"
  echo "gpu_layouts.sh: $1 skipped: ${SECONDS} s of the ${BUDGET_S} s budget spent" >"$OUTDIR/$1.log"
}

# run NAME CONFIG RANKS [SETS...]: trains into $WORK/NAME (unless over_budget); its output in
# $OUTDIR/NAME.log.
run() {
  local name=$1 config=$2 ranks=$3 t0=$SECONDS rc=0
  shift 3
  if over_budget "$ranks"; then
    skip "$name"
    return 1
  fi
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  # --force: a layout of a run already trained is the same run to gtrain (bitwise mode: any layout).
  timeout 300 "$GTRAIN" run "$WORK/$config.toml" --run-dir "$WORK/$name" --ranks "$ranks" --force "${sets[@]}" \
    >"$OUTDIR/$name.log" 2>&1 || rc=$?
  echo "$((SECONDS - t0))" >"$WORK/$name.seconds"
  local per_rank=$(((SECONDS - t0 + ranks - 1) / ranks))
  ((per_rank <= slowest)) || slowest=$per_rank
  return $rc
}

# Kills rank 1 once its heartbeat passes step $2, while NAME trains (the in-job restart).
kill_rank_at() {
  local dir=$WORK/$1 at=$2 i step pid
  for ((i = 0; i < 6000; i++)); do
    sleep 0.05
    read -r step pid < <(bench_heartbeat "$dir" 1)
    if ((step >= at && pid > 0)); then kill -9 "$pid"; echo "$step" >"$WORK/$1.killed_at"; return; fi
  done
}

results=$OUTDIR/layouts.txt
: >"$results"
# check NAME REF RULE: one row comparing NAME's losses with REF's (RULE: tol | bitwise).
check() {
  python3 - "$WORK" "$1" "$2" "$3" "$TOL" "$note_want" "$OUTDIR/$1.log" >>"$results" <<'PY'
import json, os, sys
work, name, ref, rule, tol, want, log = sys.argv[1:8]
def losses(n):
    p = os.path.join(work, n, "metrics.jsonl")
    if not os.path.exists(p):
        return []
    out = {}
    for line in open(p):
        j = json.loads(line)
        if j.get("kind") == "train":
            out[j["step"]] = j["loss"]  # a restart repeats steps: the last record of each counts
    return [out[k] for k in sorted(out)]
a, b = losses(name), losses(ref)
secs = open(os.path.join(work, name + ".seconds")).read().strip()
if secs == "skipped" or open(os.path.join(work, ref + ".seconds")).read().strip() == "skipped":
    print(f"{name:<22}    - s  skipped (budget spent)")
    sys.exit()
text = open(log, errors="replace").read()
staged = "yes" if want in text else "no"
if not a or len(a) != len(b):
    print(f"{name:<22} {secs:>4} s  steps {len(a)} vs {len(b)}  staged {staged}  FAIL")
    sys.exit()
rel = max(abs(x - y) / max(abs(y), 1e-12) for x, y in zip(a, b))
ok = (a == b) if rule == "bitwise" else rel <= float(tol)
verdict = "ok" if ok and (staged == "yes" or name.endswith("1rank")) else "FAIL"
what = "bitwise equal" if a == b else f"max rel diff {rel:.2e}"
print(f"{name:<22} {secs:>4} s  {what:<22} ({rule})  staged {staged}  {verdict}")
PY
  tail -1 "$results"
}

set +e
run ref_1rank gpt 1
run dp2_zero0 gpt 2 parallel.mode=explicit parallel.zero=0; check dp2_zero0 ref_1rank tol
for z in 1 2 3; do run dp2_zero$z gpt 2 parallel.mode=explicit parallel.zero=$z parallel.bucket_mb=0.01; check dp2_zero$z ref_1rank tol; done
run tp2 gpt 2 parallel.mode=explicit parallel.tp=2; check tp2 ref_1rank tol
run pp2 gpt 2 parallel.mode=explicit parallel.pp=2; check pp2 ref_1rank tol
run dp2_pp2 gpt 4 parallel.mode=explicit parallel.dp=2 parallel.pp=2 parallel.zero=1 parallel.micro_batch=2; check dp2_pp2 ref_1rank tol
run uneven_3ranks gpt 3 parallel.mode=explicit; check uneven_3ranks ref_1rank tol
run lora_1rank gpt 1 adapter.kind=lora adapter.rank=4 'adapter.targets=["all"]'
run lora_dp2 gpt 2 parallel.mode=explicit adapter.kind=lora adapter.rank=4 'adapter.targets=["all"]'; check lora_dp2 lora_1rank tol
run bitwise_1rank gpt 1 train.reproducible=bitwise
run bitwise_dp2_zero2 gpt 2 parallel.mode=explicit train.reproducible=bitwise parallel.zero=2; check bitwise_dp2_zero2 bitwise_1rank bitwise
run bitwise_3ranks gpt 3 parallel.mode=explicit train.reproducible=bitwise; check bitwise_3ranks bitwise_1rank bitwise
run sft_1rank sft 1
run sft_dp2 sft 2 parallel.mode=explicit; check sft_dp2 sft_1rank bitwise
if over_budget 2; then
  skip restart_dp2
  check restart_dp2 dp2_zero1 tol
else
  kill_rank_at restart_dp2 $((STEPS / 2)) &
  killer=$!
  run restart_dp2 gpt 2 parallel.mode=explicit parallel.zero=1 parallel.bucket_mb=0.01
  kill "$killer" 2>/dev/null
  wait "$killer" 2>/dev/null
  check restart_dp2 dp2_zero1 tol
  restarts=$(cat "$WORK/restart_dp2/restarts.jsonl" 2>/dev/null | wc -l)
  echo "restart_dp2: rank 1 killed at step $(cat "$WORK/restart_dp2.killed_at" 2>/dev/null || echo '?'), restarts recorded: $restarts" |
    tee -a "$results"
  ((restarts >= 1)) || sed -i '$ s/$/  FAIL/' "$results"
fi
set -e

rows=$(grep -c ' s  ' "$results")
skipped=$(grep -c 'skipped (budget spent)' "$results" || true)
bad=$(grep -c 'FAIL' "$results" || true)
echo "layouts within tolerance: $((rows - skipped - bad)) of $rows ($MODE, ${SECONDS} s$( ((skipped == 0)) || echo ", $skipped skipped: budget spent"))" |
  tee -a "$results"
if ((RECORD)) && ! ((SMOKE)); then
  {
    echo
    echo "## $(date -u '+%Y-%m-%d %H:%M UTC') - commit $COMMIT - every layout on one GPU (bench/gpu_layouts.sh)"
    echo
    sed 's/^/- /' "$OUTDIR/facts.txt" | grep -v '^- packed build libs'
    echo
    echo '```'
    cat "$results"
    echo '```'
  } >>"$ROOT/bench/RESULTS.md"
fi
((bad == 0))
