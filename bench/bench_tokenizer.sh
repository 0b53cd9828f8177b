#!/usr/bin/env bash
# Tokenizer encode throughput (issue 49): MB/s of text, gtrain tokenize vs Hugging Face tokenizers
# (encode_batch, RAYON_NUM_THREADS = the same thread count) vs tiktoken (GPT-2), on the same corpus
# (the system documents and the generated Unicode corpus of tests/tokenizer/corpus.py), at 1 thread
# and at every core, side by side in one run; prints "gtrain/tokenizers 1 thread: X.XXx" per
# tokenizer (target >= 1.0x at 1 thread and at every core). gtrain's figure is its process's wall
# time on the corpus minus that on a one-line file (start-up, tokenizer load), ids printed.
# bench/bench_tokenizer.py has the details. Runs in the project venv (skipped without it).
# SIZE=full (the default: 32 MB of text, the four genuine tokenizers, best of 2) or tiny (CI's smoke
# run: 1 MB, gpt2 and tinyllama, one round; the figures mean nothing there).
# Usage: bench/bench_tokenizer.sh [build-dir]   (SIZE, MB, TOKENIZERS, ROUNDS, THREADS)
set -euo pipefail
BUILD=$(realpath "${1:-build}")
here=$(cd "$(dirname "$0")" && pwd)
SIZE=${SIZE:-full}
if [[ $SIZE == tiny ]]; then
  MB=${MB:-1} TOKENIZERS=${TOKENIZERS:-gpt2,tinyllama} ROUNDS=${ROUNDS:-1}
else
  MB=${MB:-32} TOKENIZERS=${TOKENIZERS:-gpt2,llama3,qwen3,tinyllama} ROUNDS=${ROUNDS:-2}
fi
exec "$here/../scripts/venv.sh" run python3 "$here/bench_tokenizer.py" "$BUILD/gtrain" --mb "$MB" \
  --tokenizers "$TOKENIZERS" --rounds "$ROUNDS" --threads "${THREADS:-$(nproc)}"
