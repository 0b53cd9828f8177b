#!/usr/bin/env python3
"""check_metrics.py: runs a golden config and compares its metrics.jsonl with the committed
expectation, bit for bit: the same config on the same layout must give the same numbers before and
after a change that is not meant to change them (a refactor, a new feature behind a default).

Usage: check_metrics.py GTRAIN CONFIG TORCH_VERSION [--ranks N] [--update]

The expectation is CONFIG's name with .torch-<major.minor>.jsonl (the numbers differ between LibTorch
versions); without one for this LibTorch the check is skipped (exit 77), --update writes it. What is
compared: each train record's step, loss, lr, grad_norm and consumed samples, each eval record's
loss, accuracy and samples, and the final record's losses (timings and rates are not).
"""
import json
import os
import subprocess
import sys
import tempfile

KEEP = {
    "train": ("step", "loss", "lr", "grad_norm", "consumed_samples", "skipped"),
    "eval": ("step", "loss", "accuracy", "samples"),
    "final": ("step", "train_loss", "eval_loss", "eval_accuracy"),
}


def deterministic_records(path):
    out = []
    for line in open(path, encoding="utf-8"):
        rec = json.loads(line)
        keys = KEEP.get(rec.get("kind"))
        if keys:
            out.append({"kind": rec["kind"], **{k: rec[k] for k in keys if k in rec}})
    return out


def describe(value):
    return f"{value!r} ({value.hex()})" if isinstance(value, float) else repr(value)


def main(argv):
    update = "--update" in argv
    args = [a for a in argv if a != "--update"]
    ranks = "1"
    if "--ranks" in args:
        i = args.index("--ranks")
        ranks = args[i + 1]
        del args[i : i + 2]
    gtrain, config, torch_version = args
    major_minor = ".".join(torch_version.split(".")[:2])
    expected_path = os.path.splitext(config)[0] + f".torch-{major_minor}.jsonl"
    if not update and not os.path.exists(expected_path):
        print(f"SKIPPED: no expectation for LibTorch {major_minor} ({expected_path}); --update writes one")
        return 77
    with tempfile.TemporaryDirectory(prefix="gtrain-golden-") as run_dir:
        cmd = [gtrain, "run", config, "--run-dir", run_dir, "--no-resume", "--quiet", "--ranks", ranks]
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0:
            print(f"{' '.join(cmd)}: exit {done.returncode}\n{done.stdout}")
            return 1
        got = deterministic_records(os.path.join(run_dir, "metrics.jsonl"))
    if update:
        with open(expected_path, "w", encoding="utf-8") as f:
            for rec in got:
                f.write(json.dumps(rec) + "\n")
        print(f"wrote {expected_path}: {len(got)} records")
        return 0
    expected = [json.loads(line) for line in open(expected_path, encoding="utf-8")]
    if len(got) != len(expected):
        print(f"{config}: {len(got)} deterministic records, {expected_path} has {len(expected)}")
    for i, (g, e) in enumerate(zip(got, expected)):
        for key in sorted(set(g) | set(e)):
            if g.get(key) != e.get(key):
                print(f"{config}: record {i} ({e.get('kind')} step {e.get('step')}): {key} = "
                      f"{describe(g.get(key))}, expected {describe(e.get(key))} ({expected_path})")
                return 1
    if len(got) != len(expected):
        return 1
    print(f"{config}: {len(got)} records bitwise equal to {expected_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
