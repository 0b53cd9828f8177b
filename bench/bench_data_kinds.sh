#!/usr/bin/env bash
# Text in at no cost to training (issue 49), side by side in one run:
#  1. gtrain prepare end to end (read JSONL, tokenize, write shards) in MB/s of text, on 1 thread
#     and on every core, per core (target >= 5 MB/s per core here), with Hugging Face's tokenizers
#     doing the same tokenizing work in Python (encode_batch on the same documents) beside it;
#  2. the step time of a run on data.kind = "jsonl" (cache warm) against the same run on the token
#     shards prepare wrote (data.kind = "tokens"): the ratio is 1 within noise, and the first
#     stage's preparation time is the ledger's prepare_s.
# Usage: bench/bench_data_kinds.sh [build-dir]   (MB: corpus size, default 20; STEPS, default 40;
#        ROUNDS of the step-time pair, default 2 (the faster of each kind is printed);
#        TOKENIZER: a tokenizer for part 1, default GPT-2's from ../shared/tokenizers, else the
#        example one; PYTHON: the venv's python for tokenizers, skipped when unset)
set -euo pipefail
BUILD=$(cd "${1:-build}" && pwd)
MB=${MB:-20}
STEPS=${STEPS:-40}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
TOKENIZER=${TOKENIZER:-$root/../shared/tokenizers/gpt2}
[[ -f $TOKENIZER/tokenizer.json ]] || TOKENIZER=$root/examples/tokenizer-bpe512
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# A JSONL corpus of MB megabytes: the paragraphs of the licence texts, over and over.
/usr/bin/python3 - "$work/corpus.jsonl" "$MB" <<'PY'
import glob, json, sys
paras = []
for p in sorted(glob.glob("/usr/share/common-licenses/*")):
    try:
        paras += [t for t in open(p, encoding="utf-8").read().split("\n\n") if t.strip()]
    except (UnicodeDecodeError, IsADirectoryError):
        pass
out, size, i = open(sys.argv[1], "w"), 0, 0
while size < float(sys.argv[2]) * 1e6:
    line = json.dumps({"text": paras[i % len(paras)]}) + "\n"
    out.write(line)
    size += len(line.encode())
    i += 1
PY
bytes=$(stat -c %s "$work/corpus.jsonl")
cores=$(nproc)

prepare_rate() {  # MB/s of prepare on $1 threads
  local t0 t1
  t0=$(date +%s.%N)
  "$BUILD/gtrain" prepare "$work/corpus.jsonl" --tokenizer "$TOKENIZER" --out "$work/prep-$1" --jobs "$1" \
    --append-eos --quiet >/dev/null
  t1=$(date +%s.%N)
  /usr/bin/python3 -c "print(f'{$bytes / 1e6 / ($t1 - $t0):.2f}')"
}
r1=$(prepare_rate 1)
rn=$(prepare_rate "$cores")
hf="skipped (no PYTHON)"
if [[ -n ${PYTHON:-} ]]; then
  hf=$(RAYON_NUM_THREADS=1 "$PYTHON" - "$work/corpus.jsonl" "$TOKENIZER" <<'PY'
import json, sys, time, tokenizers
tok = tokenizers.Tokenizer.from_file(sys.argv[2] + "/tokenizer.json")
t0 = time.time()
texts = [json.loads(line)["text"] for line in open(sys.argv[1])]
ids = tok.encode_batch(texts)
print(f"{sum(len(t.encode()) for t in texts) / 1e6 / (time.time() - t0):.2f} MB/s")
PY
)
fi
echo "prepare ($(basename "$TOKENIZER"), $((bytes / 1000000)) MB JSONL): 1 thread $r1 MB/s  $cores threads $rn MB/s" \
  "($(/usr/bin/python3 -c "print(f'{$rn / $cores:.2f}')") MB/s per core)  tokenizers encode_batch 1 thread: $hf"

# Part 2: the same small gpt on the jsonl sources (prepared by the first run) and on the shards.
cat > "$work/gpt.toml" <<TOML
[model]
name = "gpt"
n_layer = 2
n_head = 2
n_embd = 64
seq_len = 64
vocab = 512
[train]
global_batch = 16
steps = $STEPS
threads = 1
[checkpoint]
at_end = false
[log]
progress = "none"
TOML
"$BUILD/gtrain" prepare "$work/corpus.jsonl" --tokenizer "$root/examples/tokenizer-bpe512" --out "$work/shards" \
  --append-eos --eval-fraction 0.1 --quiet >/dev/null
run() {  # name, then --set flags
  local name=$1
  shift
  "$BUILD/gtrain" run "$work/gpt.toml" --force --ranks 1 --run-dir "$work/$name" --quiet "$@" >/dev/null
  /usr/bin/python3 "$here/run_stats.py" "$work/$name" | cut -d' ' -f1
}
jsonl=(--set data.kind=jsonl --set "data.path=$work/corpus.jsonl" --set "data.tokenizer=$root/examples/tokenizer-bpe512"
  --set "data.cache_dir=$work/cache")
cold=$(run jsonl-cold "${jsonl[@]}")
prepare_s=$(/usr/bin/python3 -c "import json; print(json.loads(open('$work/jsonl-cold/stages.jsonl').readline()).get('prepare_s', 'absent'))")
# Alternating rounds, the faster of each kind: the machine's other load falls on both alike.
warm=1e9 tokens=1e9
for round in $(seq 1 "${ROUNDS:-2}"); do
  t=$(run "tokens-$round" --set data.kind=tokens --set "data.path=$work/shards/train_*.bin" \
    --set "data.eval_path=$work/shards/eval_*.bin")
  w=$(run "jsonl-warm-$round" "${jsonl[@]}")
  tokens=$(/usr/bin/python3 -c "print(min($tokens, $t))")
  warm=$(/usr/bin/python3 -c "print(min($warm, $w))")
done
/usr/bin/python3 - "$tokens" "$warm" "$cold" "$prepare_s" <<'PY'
import sys
tokens, warm, cold = map(float, sys.argv[1:4])
print(f"step time: tokens {tokens * 1e3:.2f} ms  jsonl (cache warm) {warm * 1e3:.2f} ms  ratio jsonl/tokens "
      f"{warm / tokens:.2f}x  (first stage: prepare_s {sys.argv[4]}, step {cold * 1e3:.2f} ms)")
PY
