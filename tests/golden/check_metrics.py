#!/usr/bin/env python3
"""check_metrics.py: runs a golden config and compares its metrics.jsonl with the committed
expectation, bit for bit: the same config on the same layout must give the same numbers before and
after a change that is not meant to change them (a refactor, a new feature behind a default).

Usage: check_metrics.py GTRAIN CONFIG TORCH_VERSION [--ranks N] [--update]

The numbers differ between LibTorch versions, and between CPUs in their last bits: OpenBLAS picks
its GEMM kernels by CPU model (its core name: Haswell, SkylakeX, Cooperlake, Zen, ...), and a
gradient's rounding follows. So an expectation is CONFIG's name with .torch-<major.minor>.<core>.jsonl,
compared bit for bit on a CPU of that core. On a CPU with none of its own, the expectations of the
other cores (and the first one, .torch-<major.minor>.jsonl, whose core was not recorded) are
compared within a relative 1e-5 instead, which catches any change of what is computed but not of
kernel rounding; --update writes this core's. Without any expectation for this LibTorch the check
is skipped (exit 77). What is compared: each train record's step, loss, lr, grad_norm and consumed
samples, each eval record's loss, accuracy and samples, and the final record's losses (timings and
rates are not).
"""
import ctypes
import glob
import json
import math
import os
import subprocess
import sys
import tempfile

# Within it on another CPU: twelve steps of kernel rounding move the losses by about 2e-7.
RELATIVE_TOLERANCE = 1e-5

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


def blas_core():
    """OpenBLAS's name for this CPU's kernels (as LibTorch's libblas.so.3 will pick them)."""
    for lib in ("libblas.so.3", "libopenblas.so.0"):
        try:
            blas = ctypes.CDLL(lib)
            blas.openblas_get_corename.restype = ctypes.c_char_p
            return blas.openblas_get_corename().decode().strip() or "unknown"
        except (OSError, AttributeError):
            continue
    return "unknown"


def first_difference(got, expected, close):
    """The first differing value as (record index, key), or None; `close` compares floats."""
    for i, (g, e) in enumerate(zip(got, expected)):
        for key in sorted(set(g) | set(e)):
            a, b = g.get(key), e.get(key)
            if a == b:
                continue
            if close and isinstance(a, float) and isinstance(b, float) and math.isclose(
                    a, b, rel_tol=RELATIVE_TOLERANCE, abs_tol=0.0):
                continue
            return i, key
    return None


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
    stem = os.path.splitext(config)[0] + f".torch-{major_minor}"
    core = blas_core()
    own_path = f"{stem}.{core}.jsonl"
    others = sorted(p for p in glob.glob(f"{stem}*.jsonl") if p != own_path)
    if not update and not os.path.exists(own_path) and not others:
        print(f"SKIPPED: no expectation for LibTorch {major_minor} ({stem}.*.jsonl); --update writes one")
        return 77
    with tempfile.TemporaryDirectory(prefix="gtrain-golden-") as run_dir:
        cmd = [gtrain, "run", config, "--run-dir", run_dir, "--no-resume", "--quiet", "--ranks", ranks]
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if done.returncode != 0:
            print(f"{' '.join(cmd)}: exit {done.returncode}\n{done.stdout}")
            return 1
        got = deterministic_records(os.path.join(run_dir, "metrics.jsonl"))
    if update:
        with open(own_path, "w", encoding="utf-8") as f:
            for rec in got:
                f.write(json.dumps(rec) + "\n")
        print(f"wrote {own_path}: {len(got)} records (OpenBLAS core {core})")
        return 0
    bitwise = os.path.exists(own_path)
    for path in [own_path] if bitwise else others:
        expected = [json.loads(line) for line in open(path, encoding="utf-8")]
        if len(got) != len(expected):
            print(f"{config}: {len(got)} deterministic records, {path} has {len(expected)}")
            return 1
        diff = first_difference(got, expected, close=not bitwise)
        if diff:
            i, key = diff
            e = expected[i]
            how = "bitwise" if bitwise else f"within {RELATIVE_TOLERANCE:g} (a CPU of another core)"
            print(f"{config}: record {i} ({e.get('kind')} step {e.get('step')}): {key} = "
                  f"{describe(got[i].get(key))}, expected {describe(e.get(key))} {how} ({path})")
            return 1
    if bitwise:
        print(f"{config}: {len(got)} records bitwise equal to {own_path}")
    else:
        print(f"{config}: {len(got)} records within {RELATIVE_TOLERANCE:g} of {', '.join(others)}; no bitwise "
              f"expectation for OpenBLAS core {core} ({own_path}: --update writes it)")
    return 0

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
