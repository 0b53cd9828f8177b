#!/usr/bin/env python3
"""tokdiff.py: gtrain's tokenizer against Hugging Face `tokenizers`, id for id and text for text.

For each tokenizer family (families.py), the corpus (corpus.py: a sample, or all of it) is encoded
by HF (Tokenizer.from_file, encode_batch with add_special_tokens True and False; on the whole
corpus HF encodes without and its post_process adds the specials, what encode(True) does) and by
`gtrain tokenize TOK --file F --each-json-line --json [--no-special]` (one process per pass and
shard); HF's ids are then decoded both ways (`gtrain tokenize TOK --decode-file F --json`, with and
without --skip-special, against HF decode_batch with the same skip_special_tokens), and so are
random id sequences (any id, special ones included: invalid UTF-8 after byte fallback or ByteLevel
must decode as HF's does). Prints per tokenizer

  TOKENIZER: N texts, M MB, K ids, 0 mismatched ids, 0 mismatched decodes

and, for the first few mismatches, the text (repr, around the first difference), both id lists and
where they first differ. Exit 0 when nothing differs, 1 on any mismatch, 2 on a usage error, 77
(skipped) when a genuine tokenizer file is not on this machine.

Usage (in the project venv: scripts/venv.sh run python3 tests/tokenizer/tokdiff.py ...):
  tokdiff.py --gtrain BUILD/gtrain [--family NAME]... [--corpus sample|full] [--sample-kb 300]
             [--report FILE] [--show 5] [--shard-mb 16]
  tokdiff.py --self-test     the harness on HF itself (must pass) and on an injected error (must fail)
Families: all of families.ALL by default. `--gtrain hf` runs hf_tokenize.py (HF) in gtrain's place.
"""
import argparse
import itertools
import json
import os
import random
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import corpus  # noqa: E402
import families  # noqa: E402


class Result:
    def __init__(self, family):
        self.family, self.texts, self.bytes, self.ids = family, 0, 0, 0
        self.bad_ids, self.bad_decodes, self.errors = 0, 0, []
        self.id_examples, self.decode_examples = [], []
        self.t_hf, self.t_gtrain = 0.0, 0.0

    def line(self):
        return (f"{self.family}: {self.texts} texts, {self.bytes / 1e6:.2f} MB, {self.ids} ids, "
                f"{self.bad_ids} mismatched ids, {self.bad_decodes} mismatched decodes")


def first_diff(a, b):
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def clip(s, n=400):
    return s if len(s) <= n else s[:n] + f"... ({len(s)} chars)"


class Failure(str):
    """A run of gtrain that failed (the message), told apart from a decoded text."""


class Runner:
    """Runs gtrain tokenize (or the HF stand-in) on a shard; bisects a shard whose run fails."""

    def __init__(self, gtrain, path, work):
        if gtrain == "hf":
            self.cmd = [sys.executable, os.path.join(HERE, "hf_tokenize.py"), path]
        else:
            self.cmd = [gtrain, "tokenize", path]
        self.work, self.calls = work, 0

    def run(self, args, lines_in, n_out):
        """The parsed JSON output lines, or an error string."""
        f = os.path.join(self.work, "in.txt")
        with open(f, "w", encoding="utf-8", newline="\n") as fh:
            fh.write("".join(x + "\n" for x in lines_in))
        self.calls += 1
        p = subprocess.run(self.cmd + [a if a != "@" else f for a in args], capture_output=True)
        if p.returncode != 0:
            err = p.stderr.decode("utf-8", "replace").strip().splitlines()
            return Failure(f"exit {p.returncode}: {err[-1] if err else '(no stderr)'}")
        out = p.stdout.decode("utf-8", "surrogateescape").split("\n")
        if out and out[-1] == "":
            out.pop()
        if len(out) != n_out:
            return Failure(f"printed {len(out)} lines for {n_out} inputs")
        try:
            return [json.loads(x) for x in out]
        except ValueError as e:
            return Failure(f"output is not JSON lines ({e})")

    def each(self, args, lines_in, depth=0):
        """Outputs for every input line: a parsed value, or an error string for inputs that fail alone."""
        got = self.run(args, lines_in, len(lines_in))
        if not isinstance(got, Failure):
            return got
        if len(lines_in) == 1 or depth > 40:
            return [got] * len(lines_in)
        mid = len(lines_in) // 2
        return self.each(args, lines_in[:mid], depth + 1) + self.each(args, lines_in[mid:], depth + 1)


def describe_ids(tok, ids, at, width=6):
    lo = max(0, at - width)
    part = ids[lo:at + width]
    toks = [tok.id_to_token(i) if isinstance(i, int) and 0 <= i < 2**32 else None for i in part]
    return f"[{'... ' if lo else ''}{', '.join(f'{i}:{t!r}' for i, t in zip(part, toks))}{' ...' if at + width < len(ids) else ''}]"


def compare_shard(res, tok, runner, shard, show, derive_special):
    texts = [t for _, t in shard]
    jl = [json.dumps(t, ensure_ascii=False) for t in texts]
    hf = {}
    if derive_special:  # the whole corpus: HF encodes once, its post-processor adds the specials
        t0 = time.time()
        encs = tok.encode_batch(texts, add_special_tokens=False)
        hf[False] = [e.ids for e in encs]
        hf[True] = [tok.post_process(e, None, True).ids for e in encs]
        res.t_hf += time.time() - t0
    for special in (True, False):
        t0 = time.time()
        if not derive_special:
            hf[special] = [e.ids for e in tok.encode_batch(texts, add_special_tokens=special)]
        res.t_hf += time.time() - t0
        t0 = time.time()
        got = runner.each(["--file", "@", "--each-json-line", "--json"] + ([] if special else ["--no-special"]), jl)
        res.t_gtrain += time.time() - t0
        for (src, text), want, have in zip(shard, hf[special], got):
            res.ids += len(want)
            if have == want:
                continue
            res.bad_ids += 1
            if len(res.id_examples) < show:
                res.id_examples.append(id_example(tok, src, text, special, want, have))
    # Decodes of HF's ids (with the special tokens), then of random id sequences.
    rows = hf[True]
    rng = random.Random(len(texts))
    n = tok.get_vocab_size()
    rows = rows + [[rng.randrange(n) for _ in range(rng.randint(1, 24))] for _ in range(max(20, len(texts) // 20))]
    lines = [json.dumps(r) for r in rows]
    for skip in (False, True):
        want = tok.decode_batch(rows, skip_special_tokens=skip)
        got = runner.each(["--decode-file", "@", "--json"] + (["--skip-special"] if skip else []), lines)
        for i, (r, w, h) in enumerate(zip(rows, want, got)):
            if w == h:
                continue
            res.bad_decodes += 1
            if len(res.decode_examples) < show:
                src = shard[i][0] if i < len(shard) else "random ids"
                res.decode_examples.append(decode_example(tok, src, r, skip, w, h))
    res.texts += len(texts)
    res.bytes += sum(len(t.encode("utf-8")) for t in texts)


def id_example(tok, src, text, special, want, have):
    head = f"- ids ({'with' if special else 'no'} specials), {src}:"
    if isinstance(have, Failure) or not isinstance(have, list):
        return f"{head} gtrain failed: {have}\n  text {clip(repr(text))}"
    at = first_diff(want, have)
    enc = tok.encode(text, add_special_tokens=special)
    off = enc.offsets[at][0] if at < len(enc.offsets) else len(text)
    ctx = text[max(0, off - 60):off + 60]
    return (f"{head} first differ at id {at} of {len(want)} (HF) / {len(have)} (gtrain), text offset {off}\n"
            f"  text {clip(repr(text), 300)}\n  around the difference {ctx!r}\n"
            f"  HF     {describe_ids(tok, want, at)}\n  gtrain {describe_ids(tok, have, at)}")


def decode_example(tok, src, ids, skip, want, have):
    head = f"- decode ({'--skip-special' if skip else 'specials shown'}), {src}:"
    ids_s = clip(str(ids), 300)
    if isinstance(have, Failure) or not isinstance(have, str):
        return f"{head} gtrain failed: {have!r}\n  ids {ids_s}"
    at = first_diff(want, have)
    return (f"{head} first differ at char {at}\n  ids {ids_s}\n  HF     {clip(repr(want[max(0, at - 40):at + 80]))}\n"
            f"  gtrain {clip(repr(have[max(0, at - 40):at + 80]))}")


def shards(texts, shard_bytes):
    cur, size = [], 0
    for item in texts:
        cur.append(item)
        size += len(item[1]) * 2 + 8
        if size >= shard_bytes:
            yield cur
            cur, size = [], 0
    if cur:
        yield cur


def added_token_texts(tok, seed):
    """Texts made of this tokenizer's own added tokens: each alone, spaced, glued, cut, re-cased, and
    random runs of them (longest match among tokens sharing a prefix, lstrip / rstrip / single_word)."""
    added = [t.content for _, t in sorted(tok.get_added_tokens_decoder().items())]
    out = []
    for c in added[:400]:
        out += [(f"added:{c}", x) for x in (c, " " + c + " ", "a" + c + "b", c + c, c[:-1], c[1:], c.upper(),
                                             c.lower(), "x  " + c, c + "\n", "\t" + c, c + "s", "The" + c + " end")]
    rng = random.Random(seed)
    for i in range(300 if added else 0):
        parts = [rng.choice(added) for _ in range(rng.randint(2, 5))]
        out.append((f"added:run{i}", "".join(p + rng.choice(["", " ", "  ", "\n", "a", "é", " x "]) for p in parts)))
    return out


def run_family(family, gtrain, texts, work, show, shard_bytes, derive_special=False):
    from tokenizers import Tokenizer
    res = Result(family)
    path = families.build(family, work)
    tok = Tokenizer.from_file(path)
    runner = Runner(gtrain, path, work)
    probe = runner.run(["--text", "a", "--json"], [], 1)
    if isinstance(probe, Failure):
        res.errors.append(f"`tokenize {path} --text a --json` failed: {probe}")
        res.bad_ids = res.bad_decodes = 1
        return res
    own = added_token_texts(tok, len(family))
    for shard in shards(itertools.chain(own, texts() if callable(texts) else texts), shard_bytes):
        compare_shard(res, tok, runner, shard, show, derive_special)
        if derive_special:  # the whole corpus: a progress line per shard
            print(f"  ... {res.line()}", file=sys.stderr, flush=True)
    return res


def report(results, args, out):
    lines = [f"# tokdiff report ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, corpus {args.corpus}"
             + (f" {args.sample_kb} KB" if args.corpus == "sample" else "") + f", gtrain {args.gtrain})", ""]
    for r in results:
        lines += [f"## {r.line()}", "",
                  f"HF {r.t_hf:.1f} s, gtrain {r.t_gtrain:.1f} s (both encode passes, process start-up included)", ""]
        lines += r.errors
        if r.id_examples or r.decode_examples:
            lines += ["```"] + r.id_examples + r.decode_examples + ["```"]
        lines.append("")
    text = "\n".join(lines)
    if out:
        with open(out, "w", encoding="utf-8") as f:
            f.write(text)
    return text


def self_test():
    """The harness passes HF against itself and reports an injected difference."""
    ok = True
    for inject in ("0", "1"):
        env = dict(os.environ, TOKDIFF_INJECT=inject)
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--gtrain", "hf", "--family", "mistral",
                            "--sample-kb", "30"], env=env, capture_output=True, text=True)
        print(p.stdout, end="")
        summary = [x for x in p.stdout.splitlines() if x.startswith("mistral: ")]
        if inject == "0":
            good = p.returncode == 0 and len(summary) == 1 and all("0 mismatched ids, 0 mismatched decodes" in x
                                                                   for x in summary)
        else:
            good = p.returncode == 1 and len(summary) == 1 and all(
                " 0 mismatched ids" not in x and " 0 mismatched decodes" not in x for x in summary) \
                and "first differ at id" in p.stdout and "first differ at char" in p.stdout
        print(f"self-test {'exact' if inject == '0' else 'injected error'}: {'ok' if good else 'FAILED'} (exit {p.returncode})")
        if not good:
            print(p.stderr)
        ok &= good
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gtrain", help="the gtrain executable, or 'hf' for the HF stand-in")
    ap.add_argument("--family", action="append", help=f"one of {', '.join(families.ALL)} (default: all)")
    ap.add_argument("--corpus", choices=["sample", "full"], default="sample")
    ap.add_argument("--sample-kb", type=int, default=300)
    ap.add_argument("--seed", type=int, default=49)
    ap.add_argument("--shard-mb", type=float, default=16)
    ap.add_argument("--show", type=int, default=5, help="mismatches shown per tokenizer (ids and decodes)")
    ap.add_argument("--report", help="also write the report (markdown) to this file")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    if not args.gtrain:
        ap.error("--gtrain is required")
    fams = args.family or list(families.ALL)
    for f in fams:
        if f not in families.ALL:
            ap.error(f"unknown family {f!r} (known: {', '.join(families.ALL)})")
    for f in fams:
        if f in families.GENUINE or f == "gpt2_prefix":
            try:
                families.check_genuine("gpt2" if f == "gpt2_prefix" else f)
            except FileNotFoundError as e:
                print(f"SKIPPED: {e}")
                return 77
    if args.corpus == "sample":
        texts = corpus.sample(args.sample_kb, args.seed)
    else:
        def texts():
            return corpus.full(args.seed)
    results = []
    with tempfile.TemporaryDirectory(prefix="tokdiff-") as work:
        for f in fams:
            t0 = time.time()
            r = run_family(f, args.gtrain, texts, work, args.show, int(args.shard_mb * 1e6), args.corpus == "full")
            results.append(r)
            print(r.line() + f"   ({time.time() - t0:.1f} s: HF {r.t_hf:.1f} s, gtrain {r.t_gtrain:.1f} s)", flush=True)
            for e in r.errors:
                print("  " + e)
            for e in r.id_examples + r.decode_examples:
                print("  " + e.replace("\n", "\n  "))
            report(results, args, args.report)  # after each tokenizer: a long run is read as it goes
    bad = sum(r.bad_ids + r.bad_decodes for r in results)
    total_texts = sum(r.texts for r in results)
    print(f"tokdiff: {len(results)} tokenizers, {total_texts} texts, "
          f"{sum(r.bad_ids for r in results)} mismatched ids, {sum(r.bad_decodes for r in results)} mismatched decodes")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
