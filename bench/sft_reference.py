"""PyTorch reference for bench/bench_sft.sh: one fine-tuning step on packed conversations, done as a
transformers + PyTorch loop does it: LlamaForCausalLM (eager attention) of the bench's shape, the
conversations tokenized by apply_chat_template with the assistant mask of tokenizing each prefix (as
TRL masks), packed best-fit-decreasing into rows of SEQ ids as gtrain packs them, each batch through
the model with a block-diagonal causal 4-D mask and position ids that restart at each conversation,
the summed cross-entropy of the trained targets over their count, backward, torch.optim.AdamW. fp32
on the CPU with the given threads. Prints one JSON line: the median step time after the warm-up, the
rows, and the torch and transformers versions.

  python3 bench/sft_reference.py --data convs.jsonl --tokenizer examples/chat_sft/tokenizer --layers 4 \\
      --heads 8 --kv-heads 2 --width 256 --mlp 704 --seq 512 --batch 8 --steps 10 --threads 2
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F
import transformers

START, END = "<|im_start|>assistant\n", "<|im_end|>"


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--tokenizer", required=True)
    for name, default in [("layers", 4), ("heads", 8), ("kv-heads", 2), ("width", 256), ("mlp", 704), ("seq", 512),
                          ("batch", 8), ("steps", 10), ("warmup", 3), ("threads", 2)]:
        p.add_argument("--" + name, type=int, default=default)
    return p.parse_args()


def documents(tok, path):
    docs = []
    for line in open(path):
        conv = json.loads(line)["messages"]
        ids = tok.apply_chat_template(conv, tokenize=True)
        ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        text, mask, at = tok.apply_chat_template(conv, tokenize=False), [0] * len(ids), 0
        while (b := text.find(START, at)) >= 0:
            b += len(START)
            e = text.index(END, b) + len(END)
            lo = len(tok(text[:b], add_special_tokens=False)["input_ids"])
            hi = len(tok(text[:e], add_special_tokens=False)["input_ids"])
            mask[lo:hi] = [1] * (min(hi, len(ids)) - lo)
            at = e
        docs.append((ids, mask))
    return docs


def packed_rows(docs, seq):
    """Rows of seq slots: best fit decreasing (longest first; the fullest row that fits)."""
    order = sorted(range(len(docs)), key=lambda i: (-(len(docs[i][0]) - 1), i))
    rows, room = [], []
    for i in order:
        slots = min(len(docs[i][0]) - 1, seq)
        fits = [r for r in range(len(rows)) if room[r] >= slots]
        r = min(fits, key=lambda r: (room[r], r)) if fits else len(rows)
        if r == len(rows):
            rows.append([]), room.append(seq)
        rows[r].append(i)
        room[r] -= slots
    out = []
    for members in rows:
        ids, targets, pos, at = torch.zeros(seq, dtype=torch.long), torch.full((seq,), -100), torch.zeros(seq, dtype=torch.long), 0
        for i in members:
            d, m = docs[i]
            n = min(len(d) - 1, seq)
            ids[at:at + n] = torch.tensor(d[:n])
            targets[at:at + n] = torch.tensor([t if k else -100 for t, k in zip(d[1:n + 1], m[1:n + 1])])
            pos[at:at + n] = torch.arange(n)
            at += n
        pos[at:] = torch.arange(seq - at)
        out.append((ids, targets, pos))
    return out


def main():
    a = parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    tok = transformers.AutoTokenizer.from_pretrained(a.tokenizer)
    rows = packed_rows(documents(tok, a.data), a.seq)
    cfg = transformers.LlamaConfig(vocab_size=len(tok), hidden_size=a.width, intermediate_size=a.mlp,
                                   num_hidden_layers=a.layers, num_attention_heads=a.heads,
                                   num_key_value_heads=a.kv_heads, max_position_embeddings=a.seq,
                                   tie_word_embeddings=False, attn_implementation="eager")
    model = transformers.LlamaForCausalLM(cfg).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1, foreach=True)
    tril = torch.ones(a.seq, a.seq, dtype=torch.bool).tril()
    times = []
    for step in range(a.warmup + a.steps):
        batch = [rows[(step * a.batch + k) % len(rows)] for k in range(a.batch)]
        t0 = time.perf_counter()
        ids, targets, pos = (torch.stack([b[j] for b in batch]) for j in range(3))
        doc = (pos == 0).cumsum(1)
        allowed = (doc.unsqueeze(2) == doc.unsqueeze(1)) & tril
        mask = torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min).unsqueeze(1)
        logits = model(ids, attention_mask=mask, position_ids=pos).logits
        keep = targets >= 0
        loss = F.cross_entropy(logits[keep], targets[keep], reduction="sum") / keep.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
    print(json.dumps({"step_s": statistics.median(times), "rows": len(rows), "torch": torch.__version__,
                      "transformers": transformers.__version__}))


if __name__ == "__main__":
    main()
