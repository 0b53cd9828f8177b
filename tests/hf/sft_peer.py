#!/usr/bin/env python3
"""sft_peer.py: gtrain's fine-tune on conversations against transformers (ctest label hf).

A random Qwen3 or Llama made by transformers (tests/hf/hf_peer.py's, with the chat example's 512-id
ChatML tokenizer) starts `gtrain run` (checkpoint.init_from, data.format = "chat") on the first 48
conversations of examples/chat_sft. The global batch is every row, so step 1's loss (logged before
the update) is the mean over every trained token whatever the sample order. The reference is a
PyTorch loop over transformers' model: each conversation alone (apply_chat_template's ids, the
assistant mask of tokenizing each prefix, as TRL masks), the token losses summed over the trained
targets and divided by their count; and, for the packed run, gtrain's own packed rows in one
batch through transformers with a block-diagonal 4-D mask and position ids that restart. All within
1e-5 relative, packed and padded (data.packing = false).

Usage: sft_peer.py GTRAIN SOURCE_DIR CASE   (cases: qwen3, llama; run in the project venv)
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_peer  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python"))
from chat_masks import assistant_mask  # noqa: E402

GTRAIN, SOURCE, CASE = sys.argv[1], sys.argv[2], sys.argv[3]
EXAMPLE = os.path.join(SOURCE, "examples", "chat_sft")
N = 48  # conversations
SEQ = 96  # slots a row holds: every example conversation (at most 70 ids) fits whole
hf_peer.V = 512


def documents(tok, convs):
    docs = []
    for c in convs:
        ids = tok.apply_chat_template(c, tokenize=True)
        ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        docs.append((ids, assistant_mask(tok, tok.apply_chat_template(c, tokenize=False), len(ids))))
    return docs


def one_by_one(model, docs):
    """Summed loss of the trained targets and their count, each document alone."""
    total, count = 0.0, 0
    with torch.no_grad():
        for ids, mask in docs:
            x = torch.tensor([ids[:-1]])
            logits = model(x).logits[0].double()
            target = torch.tensor(ids[1:])
            keep = torch.tensor(mask[1:], dtype=torch.bool)
            total += F.cross_entropy(logits[keep], target[keep], reduction="sum").item()
            count += int(keep.sum())
    return total, count


def pack(docs):
    """Best fit decreasing, as gtrain packs (runtime/core/text/sft_data.h): documents by slots (ids - 1),
    longest first, ties by index; each into the fullest row it fits, ties by row; rows in creation order."""
    order = sorted(range(len(docs)), key=lambda i: (-(len(docs[i][0]) - 1), i))
    rows, room = [], []
    for i in order:
        slots = len(docs[i][0]) - 1
        fits = [r for r in range(len(rows)) if room[r] >= slots]
        if fits:
            r = min(fits, key=lambda r: (room[r], r))
        else:
            rows.append([]), room.append(SEQ)
            r = len(rows) - 1
        rows[r].append(i)
        room[r] -= slots
    return rows


def packed_rows(model, docs, rows):
    """Summed loss and count over the packed rows in one transformers batch: a block-diagonal causal
    4-D mask and position ids that restart at each document (padding a document of its own)."""
    ids = torch.zeros(len(rows), SEQ, dtype=torch.long)
    targets = torch.full((len(rows), SEQ), -100, dtype=torch.long)
    pos = torch.zeros(len(rows), SEQ, dtype=torch.long)
    for r, members in enumerate(rows):
        at = 0
        for i in members:
            d, mask = docs[i]
            n = len(d) - 1
            ids[r, at:at + n] = torch.tensor(d[:-1])
            targets[r, at:at + n] = torch.tensor([t if m else -100 for t, m in zip(d[1:], mask[1:])])
            pos[r, at:at + n] = torch.arange(n)
            at += n
        pos[r, at:] = torch.arange(SEQ - at)
    doc = (pos == 0).cumsum(1)
    allowed = (doc.unsqueeze(2) == doc.unsqueeze(1)) & torch.ones(SEQ, SEQ, dtype=torch.bool).tril()
    bias = torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min).unsqueeze(1)
    with torch.no_grad():
        logits = model(ids, attention_mask=bias, position_ids=pos).logits.double()
    keep = targets >= 0
    return F.cross_entropy(logits[keep], targets[keep], reduction="sum").item(), int(keep.sum())


def job(path, model_dir, data, rows, packing):
    with open(path, "w") as f:
        f.write(f"""[model]
name = "hf"
seq_len = {SEQ}
[data]
kind = "jsonl"
format = "chat"
path = "{data}"
packing = {"true" if packing else "false"}
eval_fraction = 0
[optimizer]
learning_rate = 0.01
[train]
global_batch = {rows}
steps = 1
warmup_steps = 0
threads = 1
[checkpoint]
interval = 0
init_from = "{model_dir}"
[log]
progress = "none"
""")


def main():
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        model = hf_peer.make_model(CASE, tied=True)
        model_dir = os.path.join(tmp, "model")
        model.save_pretrained(model_dir)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(EXAMPLE, "tokenizer", name), model_dir)
        convs = [json.loads(line)["messages"] for line in open(os.path.join(EXAMPLE, "conversations.jsonl"))][:N]
        data = os.path.join(tmp, "convs.jsonl")
        with open(data, "w") as f:
            for c in convs:
                f.write(json.dumps({"messages": c}) + "\n")
        tok = transformers.AutoTokenizer.from_pretrained(model_dir)
        docs = documents(tok, convs)
        reference = hf_peer.load(model_dir)  # eager attention: the 4-D mask is added to the scores
        total, count = one_by_one(reference, docs)
        want = total / count
        rows = pack(docs)
        ptotal, pcount = packed_rows(reference, docs, rows)
        print(f"{CASE}: {N} conversations, {count} trained tokens, {len(rows)} packed rows of {SEQ}")
        ok &= pcount == count
        ok &= hf_peer.close(ptotal / pcount, want, "transformers: packed rows vs one by one",
                            ("packed", "one by one"))
        for packing in (False, True):
            n_rows = len(rows) if packing else N
            path = os.path.join(tmp, f"job-{packing}.toml")
            job(path, model_dir, data, n_rows, packing)
            records, out = hf_peer.run_gtrain(GTRAIN, path, os.path.join(tmp, f"run-{packing}"))
            got = next(r["loss"] for r in records if r.get("kind") == "train")
            ok &= hf_peer.close(got, want, f"step 1, {'packed' if packing else 'padded'} rows ({n_rows})")
    sys.exit(0 if ok else 1)


main()
