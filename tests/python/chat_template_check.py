"""chat_template_check.py: gtrain's native chat templates against transformers' apply_chat_template.

For the Llama 3.2, Qwen2.5 (ChatML) and Qwen3 tokenizers in SHARED (genuine files), 200 generated
conversations each (system prompts or none, 1-6 turns, empty and long turns, whitespace at the
ends, Unicode, Qwen3 reasoning in <think> blocks) must give the same token ids through
`gtrain tokenize TOK --chat` as through apply_chat_template(tokenize=True) with the tokenizer's own
template (Llama 3's date fixed at the template's "26 Jul 2024"), and the same assistant mask as
tokenizing the text up to the start and the end of each assistant turn (content and its end-of-turn
token), the way TRL masks a conversation. And the prompt `gtrain sample MODEL --chat Q [--system S]`
generates from (a tiny random Llama saved by transformers, the tokenizer given with --tokenizer) is
apply_chat_template(add_generation_prompt=True, tokenize=True) of that one-turn conversation.
GPT-2's tokenizer with the plain template (each turn, then EOS) is checked the same way, against
transformers given that template's Jinja.

The same conversations prepared by `gtrain prepare --format chat` (train_on assistant, then
last_assistant) and read back from its shards, masks and document index must equal those ids and
masks, less the conversations with no assistant text, which --on-bad-line skip counts.

Usage: chat_template_check.py GTRAIN SHARED_TOKENIZERS   (exit 77 when SHARED is absent)
"""
import array
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

import transformers

GTRAIN, SHARED = sys.argv[1], sys.argv[2]
if not os.path.isfile(os.path.join(SHARED, "qwen3", "tokenizer.json")):
    print(f"chat_template_check: {SHARED} has no tokenizers; skipped")
    sys.exit(77)

WORDS = ["hello", "world", "GPU", "quota", "naïve", "Ünïcödé", "日本語", "中文", "العربية", "עברית", "😀",
         "👨‍👩‍👧", "x²", "42", "3.14", "don't", "I'LL", "\t", "  ", "\n", "\n\n", "<b>", "{json}", "e\u0301"]


def text(rng, long=False):
    n = rng.randint(200, 600) if long else rng.choice([0, 1, 2, 5, 12, 30])
    s = " ".join(rng.choice(WORDS) for _ in range(n))
    if rng.random() < 0.3:
        s = rng.choice([" ", "\n", "  \n", "\t"]) + s + rng.choice([" ", "\n", "\n\n"])
    return s


def conversation(rng, family):
    msgs = []
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": text(rng)})
    for _ in range(rng.randint(1, 3)):
        msgs.append({"role": "user", "content": text(rng, rng.random() < 0.1)})
        answer = text(rng, rng.random() < 0.1)
        if family == "qwen3" and rng.random() < 0.3:
            answer = "<think>\n" + text(rng) + "\n</think>\n\n" + answer
        msgs.append({"role": "assistant", "content": answer})
    if rng.random() < 0.2:  # a conversation ending on the user's turn
        msgs.append({"role": "user", "content": text(rng)})
    return msgs


def spans(rendered, family):
    start = "<|start_header_id|>assistant<|end_header_id|>\n\n" if family == "llama3" else "<|im_start|>assistant\n"
    end = "<|eot_id|>" if family == "llama3" else "<|im_end|>"
    out, at = [], 0
    while True:
        b = rendered.find(start, at)
        if b < 0:
            return out
        b += len(start)
        e = rendered.index(end, b) + len(end)
        out.append((b, e))
        at = e


def check_generation_prompts(dirs, work):
    """gtrain sample --chat's prompt ids against apply_chat_template(add_generation_prompt=True)."""
    import torch
    torch.manual_seed(0)
    model_dir = os.path.join(work, "tiny-llama")
    config = transformers.LlamaConfig(vocab_size=151936, hidden_size=8, intermediate_size=8, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=512,
                                      tie_word_embeddings=False)
    transformers.LlamaForCausalLM(config).save_pretrained(model_dir)
    asks = [("What is the capital of France?", ""), ("  Ünïcödé 日本語 😀\n", "You are terse.\n")]
    failed = 0
    for family, path in dirs.items():
        if family == "plain":  # no generation prompt to write (the SampleChat tests cover its stop)
            continue
        tok = transformers.AutoTokenizer.from_pretrained(path)
        kwargs = {"date_string": "26 Jul 2024"} if family == "llama3" else {}
        for question, system in asks:
            msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": question}]
            ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, **kwargs)
            if isinstance(ids, dict) or hasattr(ids, "keys"):
                ids = ids["input_ids"]
            cmd = [GTRAIN, "sample", model_dir, "--tokenizer", path, "--chat", question, "--tokens", "2", "--json"]
            r = subprocess.run(cmd + (["--system", system] if system else []), capture_output=True, text=True)
            got = json.loads(r.stdout)["prompt"] if r.returncode == 0 else None
            if got != list(ids):
                failed += 1
                print(f"{family} sample --chat {question!r}: exit {r.returncode} {r.stderr.strip()}\n"
                      f"  transformers {list(ids)}\n  gtrain       {got}")
        print(f"{family}: gtrain sample --chat prompts, {len(asks)} checked")
    return failed


GPT2_EOS = "<|endoftext|>"
PLAIN_JINJA = "{% for message in messages %}{{ message['content'] + eos_token }}{% endfor %}"


def plain_spans(conv, eos):
    out, at = [], 0
    for m in conv:
        n = len(m["content"] + eos)
        if m["role"] == "assistant":
            out.append((at, at + n))
        at += n
    return out


def has_answer(conv):
    return any(m["role"] == "assistant" and m["content"].strip(" \t\r\n") for m in conv)


def read_prepared(out):
    """Each document of OUT's train split: (ids, mask)."""
    with open(os.path.join(out, "prepare_manifest.json")) as f:
        m = json.load(f)
    ids, mask = array.array("I" if m["dtype"] == "uint32" else "H"), bytearray()
    for s in m["shards"]:
        if s["split"] != "train":
            continue
        with open(os.path.join(out, s["file"]), "rb") as f:
            f.seek(1024)
            ids.frombytes(f.read())
        with open(os.path.join(out, s["file"][:-4] + ".mask"), "rb") as f:
            mask += f.read()
    index = next(d for d in m["conversations"]["doc_indexes"] if d["split"] == "train")
    off = array.array("Q")
    with open(os.path.join(out, index["file"]), "rb") as f:
        off.frombytes(f.read())
    docs = [(list(ids[off[i]:off[i + 1]]), list(mask[off[i]:off[i + 1]])) for i in range(len(off) - 1)]
    return docs, m["conversations"]["bad_lines"]


def check_prepared(family, path, conv_file, work, convs, expected):
    """gtrain prepare --format chat read back against transformers' ids and TRL's masks."""
    failed = 0
    for train_on in ("assistant", "last_assistant"):
        out = os.path.join(work, f"{family}-{train_on}")
        cmd = [GTRAIN, "prepare", conv_file, "--tokenizer", path, "--out", out, "--format", "chat", "--train-on",
               train_on, "--on-bad-line", "skip", "--quiet", "--jobs", "2"]
        if family == "plain":
            cmd += ["--chat-template", "plain"]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print(f"{family} prepare: gtrain exited {r.returncode}: {r.stderr}")
            failed += 1
            continue
        docs, bad_lines = read_prepared(out)
        want = []
        for c, (ids, mask, spans_ids) in zip(convs, expected):
            if not has_answer(c):
                continue
            if train_on == "last_assistant":
                mask = [0] * len(ids)
                if spans_ids:
                    lo, hi = spans_ids[-1]
                    mask[lo:hi] = [1] * (hi - lo)
            want.append((ids, mask))
        skipped = len(convs) - len(want)
        bad = sum(1 for g, w in zip(docs, want) if g != w) + abs(len(docs) - len(want)) + abs(bad_lines - skipped)
        print(f"{family} prepared (train_on {train_on}): {len(docs)} documents, {bad_lines} skipped "
              f"(no assistant text: {skipped}), {bad} mismatched")
        failed += bad
    return failed


def main():
    work = tempfile.mkdtemp()
    try:
        dirs = {"llama3": os.path.join(SHARED, "llama3"), "qwen3": os.path.join(SHARED, "qwen3")}
        chatml = os.path.join(work, "qwen2.5")
        os.mkdir(chatml)
        shutil.copy(os.path.join(SHARED, "qwen3", "tokenizer.json"), chatml)
        shutil.copy(os.path.join(SHARED, "qwen3", "tokenizer_config.qwen2.5.json"),
                    os.path.join(chatml, "tokenizer_config.json"))
        dirs["chatml"] = chatml
        dirs["plain"] = os.path.join(SHARED, "gpt2")
        failed = 0
        for family, path in dirs.items():
            rng = random.Random(family)
            convs = [conversation(rng, family) for _ in range(200)]
            tok = transformers.AutoTokenizer.from_pretrained(path)
            kwargs = {"date_string": "26 Jul 2024"} if family == "llama3" else {}
            if family == "plain":
                kwargs = {"chat_template": PLAIN_JINJA, "eos_token": GPT2_EOS}  # its config names none
            conv_file = os.path.join(work, family + ".jsonl")
            with open(conv_file, "w") as f:
                for c in convs:
                    f.write(json.dumps({"messages": c}) + "\n")
            cmd = [GTRAIN, "tokenize", path, "--file", conv_file, "--chat"]
            if family == "plain":
                cmd += ["--chat-template", "plain"]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                print(f"{family}: gtrain exited {r.returncode}: {r.stderr}")
                failed += 1
                continue
            got = [json.loads(line) for line in r.stdout.split("\n")[:-1]]
            bad_ids = bad_mask = 0
            expected = []
            for i, c in enumerate(convs):
                ids = tok.apply_chat_template(c, tokenize=True, **kwargs)
                if isinstance(ids, dict) or hasattr(ids, "keys"):
                    ids = ids["input_ids"]
                rendered = tok.apply_chat_template(c, tokenize=False, **kwargs)
                mask, spans_ids = [0] * len(ids), []
                turns = plain_spans(c, GPT2_EOS) if family == "plain" else spans(rendered, family)
                for b, e in turns:
                    lo = len(tok(rendered[:b], add_special_tokens=False)["input_ids"])
                    hi = min(len(tok(rendered[:e], add_special_tokens=False)["input_ids"]), len(ids))
                    spans_ids.append((lo, hi))
                    for k in range(lo, hi):
                        mask[k] = 1
                expected.append((list(ids), mask, spans_ids))
                if got[i]["ids"] != list(ids):
                    bad_ids += 1
                    if bad_ids <= 2:
                        k = next(k for k in range(len(ids) + 1) if k >= len(ids) or k >= len(got[i]["ids"])
                                 or got[i]["ids"][k] != ids[k])
                        print(f"{family} conversation {i}: ids differ at {k}: transformers {list(ids)[k:k + 6]} "
                              f"gtrain {got[i]['ids'][k:k + 6]}\n  {rendered[:300]!r}")
                elif got[i]["train"] != mask:
                    bad_mask += 1
                    if bad_mask <= 2:
                        print(f"{family} conversation {i}: masks differ\n  {rendered[:300]!r}")
            tokens = sum(len(g["ids"]) for g in got)
            trained = sum(sum(g["train"]) for g in got)
            print(f"{family}: {len(convs)} conversations, {tokens} ids ({trained} trained on), "
                  f"{bad_ids} mismatched ids, {bad_mask} mismatched masks")
            failed += bad_ids + bad_mask
            failed += check_prepared(family, path, conv_file, work, convs, expected)
        failed += check_generation_prompts(dirs, work)
        sys.exit(1 if failed else 0)
    finally:
        shutil.rmtree(work)


main()
