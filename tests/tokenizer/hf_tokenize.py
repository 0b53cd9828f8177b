#!/usr/bin/env python3
"""hf_tokenize.py: `gtrain tokenize`'s command line computed by Hugging Face `tokenizers`.

The differential harness (tokdiff.py) runs it in place of gtrain for its self-test: the same
arguments and output (docs/tokenize contract), so the harness is shown to pass on an exact tokenizer
and, with TOKDIFF_INJECT=1 (one id changed in every encoded text holding "e", one character in
every decoded text holding "e"), to report mismatches.

  hf_tokenize.py TOKENIZER [--text STR | --file F] [--each-line | --each-json-line] [--json] [--no-special]
  hf_tokenize.py TOKENIZER (--decode IDS | --decode-file F) [--skip-special] [--json]
"""
import argparse
import json
import os
import sys

from tokenizers import Tokenizer


def parse_ids(s):
    s = s.strip()
    if s.startswith("["):
        return [int(x) for x in json.loads(s)]
    return [int(x) for x in s.replace(",", " ").split()]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tokenizer")
    ap.add_argument("--text")
    ap.add_argument("--file")
    ap.add_argument("--each-line", action="store_true")
    ap.add_argument("--each-json-line", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--no-special", action="store_true")
    ap.add_argument("--decode")
    ap.add_argument("--decode-file")
    ap.add_argument("--skip-special", action="store_true")
    a = ap.parse_args()
    path = a.tokenizer if os.path.isfile(a.tokenizer) else os.path.join(a.tokenizer, "tokenizer.json")
    tok = Tokenizer.from_file(path)
    inject = os.environ.get("TOKDIFF_INJECT") == "1"
    out = sys.stdout
    if a.decode is not None or a.decode_file is not None:
        if a.decode is not None:
            rows = [parse_ids(a.decode)]
        else:
            with open(a.decode_file, encoding="utf-8") as f:
                rows = [parse_ids(line) for line in f.read().split("\n")[:-1]]
        for text in tok.decode_batch(rows, skip_special_tokens=a.skip_special):
            if inject and "e" in text:
                text = text.replace("e", "E", 1)
            out.write((json.dumps(text, ensure_ascii=False) if a.json else text) + "\n")
        return 0
    if a.text is not None:
        texts = [a.text]
    else:
        with open(a.file, encoding="utf-8", newline="") as f:
            data = f.read()
        if a.each_json_line:
            texts = [json.loads(line) for line in data.split("\n")[:-1]]
        elif a.each_line:
            texts = data.split("\n")
            if texts and texts[-1] == "":
                texts.pop()
        else:
            texts = [data]
    for text, enc in zip(texts, tok.encode_batch(texts, add_special_tokens=not a.no_special)):
        ids = list(enc.ids)
        if inject and "e" in text and ids:
            ids[len(ids) // 2] += 1
        out.write((json.dumps(ids) if a.json else " ".join(map(str, ids))) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
