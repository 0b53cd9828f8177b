#!/usr/bin/env python3
"""tb_peer.py: gtrain's TensorBoard event files read by TensorBoard's own reader (ctest label python).

A small GPT trains 24 steps with a checkpoint every 8 (one TensorBoard file), then a second stage
resumes from the step-8 checkpoint and trains steps 9-24 again (a second file). TensorBoard's
EventAccumulator must read back every number of every train and eval record in metrics.jsonl, as
"train/<key>" / "eval/<key>" at its step (float32), and hold each step once: the second file's
SessionLog START at step 9 drops what the first file held from step 9 on.

Usage: tb_peer.py GTRAIN   (run in the project venv)
"""
import json
import os
import subprocess
import sys
import tempfile

from tensorboard.backend.event_processing import event_accumulator

JOB = """
[model]
name = "gpt"
n_layer = 2
n_head = 2
n_embd = 32
seq_len = 16
vocab = 64
[data]
kind = "synthetic"
[train]
global_batch = 4
steps = 24
eval_interval = 8
threads = 1
[checkpoint]
interval = 8
keep = 5
[log]
progress = "none"
"""


def run(gtrain, *args):
    r = subprocess.run([gtrain, "run", *args], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"tb_peer: gtrain run {' '.join(args)} exited {r.returncode}:\n{r.stdout}{r.stderr}")
    return r.stdout + r.stderr


def main():
    gtrain = sys.argv[1]
    with tempfile.TemporaryDirectory() as tmp:
        job = os.path.join(tmp, "job.toml")
        with open(job, "w") as f:
            f.write(JOB)
        run_dir = os.path.join(tmp, "run")
        run(gtrain, job, "--run-dir", run_dir)
        out = run(gtrain, job, "--run-dir", run_dir, "--resume",
                  os.path.join(run_dir, "checkpoints", "step_00000008"))
        assert "resuming from the older checkpoint" in out, out
        files = sorted(os.listdir(os.path.join(run_dir, "tb")))
        assert len(files) == 2 and all("tfevents" in f for f in files), files

        want = {}  # (tag, step) -> value, from metrics.jsonl (each step once after the resume)
        for line in open(os.path.join(run_dir, "metrics.jsonl")):
            rec = json.loads(line)
            if rec.get("kind") not in ("train", "eval"):
                continue
            for key, v in rec.items():
                if key in ("step", "time", "kind") or isinstance(v, bool) or not isinstance(v, (int, float)):
                    continue
                want[(f"{rec['kind']}/{key}", rec["step"])] = float(v)
        acc = event_accumulator.EventAccumulator(os.path.join(run_dir, "tb"),
                                                 size_guidance={event_accumulator.SCALARS: 0})
        acc.Reload()
        got = {}
        for tag in acc.Tags()["scalars"]:
            steps = [e.step for e in acc.Scalars(tag)]
            assert len(steps) == len(set(steps)), f"{tag}: a step twice after the resume: {steps}"
            for e in acc.Scalars(tag):
                got[(tag, e.step)] = e.value
        missing = sorted(set(want) - set(got))
        extra = sorted(set(got) - set(want))
        assert not missing and not extra, f"missing {missing[:5]}, extra {extra[:5]}"
        bad = [(k, want[k], got[k]) for k in want
               if abs(got[k] - want[k]) > 1e-6 * max(1.0, abs(want[k])) + 1e-30]
        assert not bad, f"values differ (tag, step, metrics.jsonl, tensorboard): {bad[:5]}"
        losses = sorted((s, v) for (t, s), v in got.items() if t == "train/loss")
        assert [s for s, _ in losses] == list(range(1, 25)), losses
        assert any(t == "eval/loss" for t, _ in got), sorted({t for t, _ in got})
        print(f"tb_peer: ok: {len(got)} scalars in {len(acc.Tags()['scalars'])} tags read back by "
              f"TensorBoard's EventAccumulator equal metrics.jsonl; steps 9-24 once after the resume")


if __name__ == "__main__":
    main()
