#!/usr/bin/env python3
"""bench_tokenizer.py: encode throughput (MB/s of UTF-8 text), gtrain vs Hugging Face tokenizers vs
tiktoken (GPT-2), on the same corpus, at 1 thread and at every core. Run by bench_tokenizer.sh.

  bench_tokenizer.py GTRAIN [--mb 32] [--tokenizers gpt2,llama3,qwen3,tinyllama] [--rounds 2]

The corpus: the system documents and the generated Unicode corpus of tests/tokenizer/corpus.py (files
as texts, in a fixed order), cut at --mb MB, written as JSON lines. gtrain: the wall time of
`gtrain tokenize TOK --file F --each-json-line --jobs N` (ids printed to a file) minus that of the
same command on a one-line file (start-up and tokenizer load), best of --rounds. tokenizers:
Tokenizer.from_file + encode_batch(texts) in a fresh process with RAYON_NUM_THREADS=N (the texts
already in memory; loading not timed). tiktoken: an Encoding built offline from the genuine GPT-2
vocabulary (same ranks as tiktoken's "gpt2"), encode per text at 1 thread and
encode_batch(num_threads=N) at N ("<|endoftext|>" in the text is the special token, as in HF). Every run's id count is checked to equal HF's.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "tokenizer"))
import corpus  # noqa: E402
import families  # noqa: E402

GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""


def write_corpus(path, mb):
    """JSON lines of the corpus up to `mb` MB; returns (texts, bytes)."""
    limit, n, size = int(mb * 1e6), 0, 0
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for src, t in list(corpus.unicode_documents()) + [x for x in corpus.system_documents(with_chunks=False)]:
            b = len(t.encode("utf-8"))
            if size + b > limit:
                t = t[: max(0, limit - size) // 2]
                b = len(t.encode("utf-8"))
            f.write(json.dumps(t, ensure_ascii=False) + "\n")
            n, size = n + 1, size + b
            if size >= limit * 0.999:
                break
    return n, size


def child(kind, tok_path, data, threads):
    """In a fresh process (RAYON_NUM_THREADS set before tokenizers is imported): seconds, ids."""
    texts = [json.loads(x) for x in open(data, encoding="utf-8").read().split("\n")[:-1]]
    if kind == "hf":
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(tok_path)
        tok.encode_batch(texts[:10])
        t0 = time.perf_counter()
        enc = tok.encode_batch(texts, add_special_tokens=True)
        dt = time.perf_counter() - t0
        return dt, sum(len(e.ids) for e in enc)
    import tiktoken
    from tokenizers import Tokenizer
    byte_of = {c: b for b, c in bytes_to_unicode().items()}
    vocab = Tokenizer.from_file(tok_path).get_vocab(with_added_tokens=False)
    ranks = {bytes(byte_of[c] for c in tok): i for tok, i in vocab.items()}
    enc = tiktoken.Encoding("gpt2-offline", pat_str=GPT2_PATTERN, mergeable_ranks=ranks,
                            special_tokens={"<|endoftext|>": 50256})
    enc.encode_batch(texts[:10], allowed_special="all")
    t0 = time.perf_counter()
    if threads == 1:
        out = [enc.encode(t, allowed_special="all") for t in texts]
    else:
        out = enc.encode_batch(texts, num_threads=threads, allowed_special="all")
    dt = time.perf_counter() - t0
    return dt, sum(len(x) for x in out)


def bytes_to_unicode():
    """GPT-2's byte -> character map (what ByteLevel writes tokens in)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def run_child(kind, tok_path, data, threads):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads), TOKENIZERS_PARALLELISM="true")
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", kind, tok_path, data, str(threads)],
                       env=env, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{kind} child failed: {p.stderr.strip()[-500:]}")
    dt, ids = p.stdout.split()
    return float(dt), int(ids)


def time_gtrain(gtrain, tok_path, data, tiny, threads, rounds, out):
    def once(f):
        t0 = time.perf_counter()
        with open(out, "w") as o:
            p = subprocess.run([gtrain, "tokenize", tok_path, "--file", f, "--each-json-line", "--jobs", str(threads)],
                               stdout=o, stderr=subprocess.PIPE, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"gtrain tokenize failed: {p.stderr.strip()[-500:]}")
        return time.perf_counter() - t0
    start = min(once(tiny) for _ in range(3))
    big = min(once(data) for _ in range(rounds))
    with open(out) as o:
        ids = sum(len(line.split()) for line in o)
    return max(big - start, 1e-6), start, ids


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        dt, ids = child(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
        print(dt, ids)
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("gtrain")
    ap.add_argument("--mb", type=float, default=32)
    ap.add_argument("--tokenizers", default="gpt2,llama3,qwen3,tinyllama")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    a = ap.parse_args()
    cores = a.threads
    with tempfile.TemporaryDirectory(prefix="bench-tok-") as work:
        data, tiny, out = (os.path.join(work, x) for x in ("corpus.jsonl", "tiny.jsonl", "ids.txt"))
        n, size = write_corpus(data, a.mb)
        with open(tiny, "w") as f:
            f.write(json.dumps("Hello world") + "\n")
        mb = size / 1e6
        print(f"corpus: {n} texts, {mb:.2f} MB (system documents and the generated Unicode corpus); "
              f"{cores} cores; gtrain {a.gtrain}")
        print(f"{'tokenizer':<10} {'threads':>7} {'gtrain MB/s':>12} {'tokenizers MB/s':>16} {'tiktoken MB/s':>14}"
              f" {'gtrain start':>13}")
        ratios, bad = [], []
        for name in a.tokenizers.split(","):
            path = families.build(name, work)
            row_ratio = {}
            for threads in sorted({1, cores}):
                g_dt, g_start, g_ids = time_gtrain(a.gtrain, path, data, tiny, threads, a.rounds, out)
                h_dt, h_ids = min(run_child("hf", path, data, threads) for _ in range(a.rounds))
                tk = ""
                if name == "gpt2":
                    t_dt, t_ids = min(run_child("tiktoken", path, data, threads) for _ in range(a.rounds))
                    tk = f"{mb / t_dt:14.2f}"
                    row_ratio[f"gtrain/tiktoken {threads} thread{'s' if threads > 1 else ''}"] = (mb / g_dt) / (mb / t_dt)
                    if t_ids != h_ids and threads == 1:
                        bad.append(f"{name}: tiktoken gave {t_ids} ids, tokenizers {h_ids}")
                if g_ids != h_ids:
                    bad.append(f"{name} at {threads} threads: gtrain gave {g_ids} ids, tokenizers {h_ids}")
                print(f"{name:<10} {threads:>7} {mb / g_dt:12.2f} {mb / h_dt:16.2f} {tk:>14} {g_start * 1000:10.0f} ms",
                      flush=True)
                row_ratio[f"gtrain/tokenizers {threads} thread{'s' if threads > 1 else ''}"] = h_dt / g_dt
            ratios.append((name, row_ratio))
        print()
        for name, r in ratios:
            print(f"{name}: " + "   ".join(f"{k}: {v:.2f}x" for k, v in r.items()))
        for b in bad:
            print("WARNING: " + b)
    return 0


if __name__ == "__main__":
    sys.exit(main())
