#!/usr/bin/env python3
"""report_browser.py: gtrain report's HTML opened in a real browser (ctest label browser).

A small GPT trains in three stages in one run directory: 2 ranks until a SIGUSR1 asks it to stop (it
saves, exit 3), 1 rank killed -9 with its launcher 15 steps past a checkpoint, 2 ranks to the end.
`gtrain report` writes report.html; browser_check.py opens it in headless Chromium, which must render
all six charts (loss, learning rate, throughput, MFU, timeline, time buckets) with no console error
into a non-blank screenshot. The screenshot stays in OUT_DIR for humans (the test prints its path).

Usage: report_browser.py GTRAIN OUT_DIR   (Debian's /usr/bin/python3; exit 77, skipped, without chromium)
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

JOB = """
[model]
name = "gpt"
n_layer = 2
n_head = 2
n_embd = 64
seq_len = 32
vocab = 64
[data]
kind = "synthetic"
[train]
global_batch = 16
steps = 160
eval_interval = 40
threads = 1
[checkpoint]
interval = 10
[log]
progress = "none"
"""


def last_step(metrics):
    step = 0
    try:
        with open(metrics) as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if rec.get("kind") == "train":
                    step = rec["step"]
    except FileNotFoundError:
        pass
    return step


def wait_for(metrics, step, proc, log):
    deadline = time.time() + 120
    while last_step(metrics) < step:
        if proc.poll() is not None or time.time() > deadline:
            sys.exit("report_browser: FAIL: the stage never reached step %d:\n%s" % (step, open(log).read()))
        time.sleep(0.05)


def main():
    gtrain, out_dir = sys.argv[1], sys.argv[2]
    if not any(shutil.which(c) for c in ("chromium", "chromium-browser")):
        print("report_browser: SKIPPED: chromium is not installed (make test installs it: scripts/install-deps.sh --test)")
        sys.exit(77)
    os.makedirs(out_dir, exist_ok=True)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as tmp:
        job = os.path.join(tmp, "job.toml")
        with open(job, "w") as f:
            f.write(JOB)
        run = os.path.join(tmp, "run")
        metrics = os.path.join(run, "metrics.jsonl")
        base = [gtrain, "run", job, "--run-dir", run]

        def start(ranks, log):
            return subprocess.Popen(base + ["--ranks", str(ranks)], stdout=open(log, "w"), stderr=subprocess.STDOUT,
                                    env=env, start_new_session=True)

        log1 = os.path.join(tmp, "s1.log")
        p = start(2, log1)
        wait_for(metrics, 25, p, log1)
        p.send_signal(signal.SIGUSR1)
        if p.wait(120) != 3:
            sys.exit("report_browser: FAIL: stage 1 did not stop with exit 3:\n" + open(log1).read())
        log2 = os.path.join(tmp, "s2.log")
        p = start(1, log2)
        wait_for(metrics, (last_step(metrics) // 10 + 1) * 10 + 15, p, log2)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        time.sleep(0.5)
        third = subprocess.run(base + ["--ranks", "2"], capture_output=True, text=True, env=env)
        if third.returncode != 0:
            sys.exit("report_browser: FAIL: stage 3 exited %d:\n%s" % (third.returncode, third.stdout + third.stderr))
        html = os.path.join(out_dir, "report.html")
        rep = subprocess.run([gtrain, "report", run, "-o", html, "--price-per-gpu-hour", "2.5"], capture_output=True,
                             text=True, env=env)
        if rep.returncode != 0:
            sys.exit("report_browser: FAIL: gtrain report exited %d: %s" % (rep.returncode, rep.stdout + rep.stderr))
        print(rep.stdout.strip())
        shot = os.path.join(out_dir, "report.png")
        check = os.path.join(os.path.dirname(os.path.abspath(__file__)), "browser_check.py")
        r = subprocess.run([sys.executable, check, html, "--charts", "6", "--screenshot", shot])
        if r.returncode != 0:
            sys.exit(r.returncode)
        print("report_browser: screenshot kept at " + shot)


if __name__ == "__main__":
    main()
