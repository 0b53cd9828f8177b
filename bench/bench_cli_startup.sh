#!/usr/bin/env bash
# A command line that answers at once (issue 48): the whole-process wall time of commands that
# neither train nor load weights, gtrain (torch-free: answers them itself) against gtrain-worker
# with the same arguments (what gtrain exec'd for them before, LibTorch loaded first), side by side
# in one run, median of RUNS each, alternating the two so both see the same machine:
#   gtrain --help
#   gtrain status RUN_DIR          (a finished 4-step run: stages, metrics, checkpoints)
#   gtrain plan 175B --gpus 4096   (GPT-3 175B's shape on 4096 H100s, its what-if table up to 4096)
# Targets (SIZE=full, the default; exit 1 when missed): --help and status under 50 ms, the plan
# under 0.3 s. SIZE=tiny is CI's smoke run (RUNS=3, no targets: the figures mean nothing there).
# Usage: bench/bench_cli_startup.sh [build-dir]   (RUNS)
set -euo pipefail
BUILD=$(realpath "${1:-build}")
SIZE=${SIZE:-full}
if [[ $SIZE == tiny ]]; then RUNS=${RUNS:-3}; else RUNS=${RUNS:-21}; fi
new=$BUILD/gtrain old=$BUILD/gtrain-worker
work=$(mktemp -d)
trap '[[ -n ${KEEP:-} ]] || rm -rf "$work"' EXIT  # KEEP=1: keep the configs and the run
cat > "$work/gpt3-175b.toml" <<'TOML'
[model]
name = "gpt"
n_layer = 96
n_head = 96
n_embd = 12288
seq_len = 2048
vocab = 50257
[data]
kind = "synthetic"
[precision]
dtype = "bf16"
[train]
global_batch = 1536
steps = 100000
TOML
cat > "$work/tiny.toml" <<'TOML'
[model]
name = "gpt"
n_layer = 2
n_head = 2
n_embd = 16
seq_len = 8
vocab = 32
[data]
kind = "synthetic"
[train]
global_batch = 4
steps = 4
threads = 1
[checkpoint]
interval = 2
[log]
progress = "none"
TOML
"$new" run "$work/tiny.toml" --force --ranks 1 --run-dir "$work/run" --no-resume --quiet >"$work/run.log" 2>&1 ||
  { echo "bench_cli_startup: the run for gtrain status failed:"; cat "$work/run.log"; exit 1; }

# Median wall time in ms of RUNS runs of `$@` with gtrain and with gtrain-worker, alternating:
# sets new_ms and old_ms. The two print the same (checked once).
measure() {
  "$new" "$@" >"$work/new.out" 2>&1 || true
  "$old" "$@" >"$work/old.out" 2>&1 || true
  cmp -s "$work/new.out" "$work/old.out" ||
    { echo "bench_cli_startup: gtrain and gtrain-worker differ on: $*"; diff "$work/old.out" "$work/new.out" | head; exit 1; }
  local n t0 t1 news=() olds=()
  for ((n = 0; n < RUNS; n++)); do
    t0=$(date +%s%N); "$new" "$@" >/dev/null 2>&1 || true; t1=$(date +%s%N); news+=($(((t1 - t0) / 1000)))
    t0=$(date +%s%N); "$old" "$@" >/dev/null 2>&1 || true; t1=$(date +%s%N); olds+=($(((t1 - t0) / 1000)))
  done
  new_ms=$(printf '%s\n' "${news[@]}" | sort -n | awk '{a[NR] = $1} END {printf "%.1f", a[int((NR + 1) / 2)] / 1000}')
  old_ms=$(printf '%s\n' "${olds[@]}" | sort -n | awk '{a[NR] = $1} END {printf "%.1f", a[int((NR + 1) / 2)] / 1000}')
}

# Peak resident memory in MB of one run of `$@` by `$1` (blank without GNU time).
peak_mb() {
  [[ -x /usr/bin/time ]] || return 0
  /usr/bin/time -f '%M' -o "$work/rss" "$@" >/dev/null 2>&1 || true
  awk '{printf "%.0f", $1 / 1024}' "$work/rss"
}

echo "whole-process wall time, median of $RUNS ($(nproc) cores); old = gtrain-worker, what gtrain exec'd before"
printf '%-32s %12s %12s %10s %16s\n' command old new old/new "peak MB old/new"
failed=0
row() {  # $1: label, $2: target ms, rest: the arguments
  local label=$1 target=$2
  shift 2
  measure "$@"
  local ratio rss
  ratio=$(awk -v o="$old_ms" -v n="$new_ms" 'BEGIN {printf "%.1fx", o / n}')
  rss="$(peak_mb "$old" "$@")/$(peak_mb "$new" "$@")"
  printf '%-32s %9s ms %9s ms %10s %16s\n' "$label" "$old_ms" "$new_ms" "$ratio" "$rss"
  if [[ $SIZE != tiny ]] && ! awk -v n="$new_ms" -v t="$target" 'BEGIN {exit !(n < t)}'; then
    echo "  MISSED: $label takes $new_ms ms, the target is under $target ms"
    failed=1
  fi
}
row "gtrain --help" 50 --help
row "gtrain status RUN_DIR" 50 status "$work/run"
row "gtrain plan 175B --gpus 4096" 300 plan "$work/gpt3-175b.toml" --gpus 4096 --gpu-type H100-80GB
if [[ $SIZE == tiny ]]; then
  echo "targets: not judged at SIZE=tiny (--help and status < 50 ms, plan < 300 ms at full size)"
elif ((failed)); then
  echo "targets: missed"
  exit 1
else
  echo "targets: met (--help and status < 50 ms, plan < 300 ms)"
fi
