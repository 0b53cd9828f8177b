#!/usr/bin/env bash
# train.threads on one CPU rank, side by side in one run: 1 thread, every core (the old default),
# and auto (0: the first steps try 1, 2, 4, ... and keep the fastest). Prints samples/s and auto's
# ratio to the best fixed count, which should be about 1 (auto pays for its few slower tuning steps).
# Usage: bench/bench_threads.sh [build-dir]   (STEPS=150 by default; the CI smoke test uses fewer)
set -euo pipefail
BUILD=${1:-build}
STEPS=${STEPS:-150}
CORES=$(nproc)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/gpt.toml" <<TOML
[model]
name = "gpt"
n_layer = 2
n_head = 2
n_embd = 64
seq_len = 64
[data]
kind = "text_bytes"
path = "/usr/share/common-licenses/GPL-3"
eval_fraction = 0.1
[train]
global_batch = 32
steps = $STEPS
eval_batches = 1
[checkpoint]
at_end = false
[log]
progress = "none"
TOML
rate() {  # samples/s of a run with train.threads = $1
  "$BUILD/gtrain" run "$work/gpt.toml" --force --run-dir "$work/run-$1" --no-resume --set train.threads="$1" |
    sed -n 's/.*(\([0-9.]*\) samples\/s.*/\1/p'
}
one=$(rate 1)
all=$(rate "$CORES")
auto=$(rate 0)
chosen=$(grep -o '"kind":"threads"[^}]*' "$work/run-0/metrics.jsonl" || echo "no choice ($CORES core)")
echo "threads=1: $one samples/s   threads=$CORES: $all samples/s   threads=0 (auto): $auto samples/s"
echo "auto chose: $chosen"
awk -v a="$auto" -v o="$one" -v c="$all" 'BEGIN {
  best = (o > c ? o : c); if (best <= 0 || a <= 0) { print "bench_threads: no rate measured"; exit 1 }
  printf "auto / best fixed: %.2fx   auto / every core: %.2fx\n", a / best, a / c }'
