#!/usr/bin/env bash
# One fine-tuning step on conversations (issue 50): gtrain against a transformers + PyTorch loop doing
# the same work (bench/sft_reference.py: the same llama shape, the same packed rows with a
# block-diagonal mask and restarting positions, the loss over the assistant tokens, AdamW), same
# torch threads, fp32, side by side in one run: each one's median step time and the ratio (target
# >= 1.0x: gtrain at least as fast). Then packing's gain over padding on the same conversations,
# whose lengths follow a long-tailed (log-normal) distribution as real chat data does: trained
# tokens per second of data.packing = true and false, and their ratio.
# Usage: bench/bench_sft.sh [build-dir]   (STEPS, default 10; ROUNDS, default 3; THREADS, default
# every core; CONVS, default 400; SIZE=tiny for the CI smoke run). Run in the venv:
# scripts/venv.sh run bench/bench_sft.sh
set -euo pipefail
BUILD=${1:-build}
STEPS=${STEPS:-10}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-$(nproc)}
CONVS=${CONVS:-400}
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=bench/lib.sh
source "$HERE/lib.sh"
TOK=$HERE/../examples/chat_sft/tokenizer
if [[ ${SIZE:-} == tiny ]]; then
  L=2 H=4 KV=2 C=64 I=160 T=128 B=4 CONVS=60
else
  L=4 H=8 KV=2 C=256 I=704 T=512 B=8
fi
bench_need_python "transformers"
bench_work
# Conversations of words from a fixed list: 1-3 exchanges, log-normal turn lengths (median 12 words
# a question, 40 an answer), a third with a system prompt; at most a row's worth of ids in all.
/usr/bin/python3 - "$work/convs.jsonl" "$CONVS" "$T" <<'PY'
import json, math, random, sys
path, n, seq = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(50)
words = ("the of and to in is it that for on with as was at by an be this from or have not are but what all "
         "were when we there can more if will one about how up out them then she many some so these would other "
         "into has her two like him see time could no make than first been its who now people my made over did "
         "down only way find use may water long little very after words called just where most know").split()
def turn(median):
    k = max(1, min(int(rng.lognormvariate(math.log(median), 0.8)), seq // 6))
    return " ".join(rng.choice(words) for _ in range(k)).capitalize() + "."
with open(path, "w") as f:
    for i in range(n):
        msgs = [{"role": "system", "content": turn(8)}] if i % 3 == 0 else []
        for _ in range(rng.randint(1, 3)):
            msgs += [{"role": "user", "content": turn(12)}, {"role": "assistant", "content": turn(40)}]
        f.write(json.dumps({"messages": msgs}) + "\n")
PY
{
  bench_llama_model 512
  cat <<TOML
[data]
kind = "jsonl"
format = "chat"
path = "$work/convs.jsonl"
tokenizer = "$TOK"
eval_fraction = 0
TOML
  bench_train_tables
} >"$work/sft.toml"

# gtrain_step RUN_DIR PACKING: the median step time (s) after the first fifth, and the trained
# tokens of an average row (the ledger's data counts).
gtrain_step() {
  "$BUILD/gtrain" run "$work/sft.toml" --force --ranks 1 --run-dir "$1" --quiet --set data.packing="$2" \
    --set data.cache_dir="$work/cache"
  /usr/bin/python3 - "$1" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1] + "/metrics.jsonl")]
rows = [r for r in rows if r.get("kind") == "train"]
data = [json.loads(l) for l in open(sys.argv[1] + "/stages.jsonl")][-1]["data"]
print(statistics.median(r["step_time_s"] for r in rows[max(3, len(rows) // 5):]), data["trained_tokens"] / data["rows"])
PY
}

echo "sft: llama $L blocks, width $C, $H heads over $KV kv heads, MLP $I, rows of $T, vocab 512, batch $B rows, $THREADS threads, fp32, $CONVS conversations"
for round in $(seq 1 "$ROUNDS"); do
  read -r g g_trained < <(gtrain_step "$work/packed_$round" true)
  read -r p p_trained < <(gtrain_step "$work/padded_$round" false)
  ref=$("$PYTHON" "$HERE/sft_reference.py" --data "$work/convs.jsonl" --tokenizer "$TOK" --layers $L --heads $H \
    --kv-heads $KV --width $C --mlp $I --seq $T --batch $B --steps "$STEPS" --threads "$THREADS")
  /usr/bin/python3 - "$round" "$g" "$ref" "$B" "$g_trained" "$p" "$p_trained" <<'PY'
import json, sys
rnd, g, ref, b = sys.argv[1], float(sys.argv[2]), json.loads(sys.argv[3]), int(sys.argv[4])
g_trained, p, p_trained = float(sys.argv[5]), float(sys.argv[6]), float(sys.argv[7])
t = ref["step_s"]
print(f"round {rnd}: step time gtrain {g * 1e3:.1f} ms  transformers {t * 1e3:.1f} ms  "
      f"ratio transformers/gtrain {t / g:.2f}x (target >= 1.0x; {ref['rows']} packed rows; torch {ref['torch']}, "
      f"transformers {ref['transformers']})")
packed, padded = b * g_trained / g, b * p_trained / p
print(f"round {rnd}: trained tokens/s packed {packed:.0f}  padded {padded:.0f}  packing gain {packed / padded:.2f}x")
PY
done
