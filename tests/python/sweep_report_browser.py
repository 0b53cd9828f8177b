#!/usr/bin/env python3
"""sweep_report_browser.py: a sweep's `gtrain report` in a real browser (ctest label browser).

A 9-trial ASHA of a tiny gpt runs with `gtrain sweep` on 2 ranks; `gtrain report SWEEP_DIR` writes
report.html; browser_check.py opens it in headless Chromium, which must render its two charts (every
trial's metric at its rungs, every trial's training loss) with no console error into a non-blank
screenshot, kept in OUT_DIR for humans. The page must also name every trial, the best one and its job.

Usage: sweep_report_browser.py GTRAIN OUT_DIR   (Debian's /usr/bin/python3; exit 77, skipped, without chromium)
"""
import os
import shutil
import subprocess
import sys
import tempfile

SWEEP = """
[model]
name = "gpt"
n_layer = 1
n_embd = 16
n_head = 2
seq_len = 16
[data]
kind = "text_bytes"
path = "/usr/share/common-licenses/GPL-3"
eval_fraction = 0.1
[train]
global_batch = 8
steps = 9
eval_batches = 2
threads = 1
[log]
progress = "none"
metrics_interval = 1
[checkpoint]
interval = 0
[search]
method = "asha"
trials = 9
eta = 3
min_steps = 1
[search.space]
"optimizer.learning_rate" = { log_uniform = [1e-3, 1e-1] }
"""


def main():
    gtrain, out_dir = sys.argv[1], sys.argv[2]
    if not any(shutil.which(c) for c in ("chromium", "chromium-browser")):
        print("sweep_report_browser: SKIPPED: chromium is not installed (make test installs it: "
              "scripts/install-deps.sh --test)")
        sys.exit(77)
    os.makedirs(out_dir, exist_ok=True)
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMP_NUM_THREADS="1")
    with tempfile.TemporaryDirectory() as tmp:
        sweep = os.path.join(tmp, "sweep.toml")
        with open(sweep, "w") as f:
            f.write(SWEEP)
        d = os.path.join(tmp, "s")
        r = subprocess.run([gtrain, "sweep", sweep, "--dir", d, "--ranks", "2", "--quiet"], capture_output=True,
                           text=True, env=env)
        if r.returncode != 0:
            sys.exit("sweep_report_browser: FAIL: gtrain sweep exited %d:\n%s" % (r.returncode, r.stdout + r.stderr))
        html = os.path.join(out_dir, "sweep_report.html")
        rep = subprocess.run([gtrain, "report", d, "-o", html], capture_output=True, text=True, env=env)
        if rep.returncode != 0:
            sys.exit("sweep_report_browser: FAIL: gtrain report exited %d: %s" % (rep.returncode, rep.stdout + rep.stderr))
        print(rep.stdout.strip())
        page = open(html).read()
        missing = [w for w in ["t%03d" % i for i in range(9)] + ["best", "4 promotions", "[optimizer]",
                                                              "learning_rate"] if w not in page]
        if missing:
            sys.exit("sweep_report_browser: FAIL: the page lacks %s" % missing)
        shot = os.path.join(out_dir, "sweep_report.png")
        check = os.path.join(os.path.dirname(os.path.abspath(__file__)), "browser_check.py")
        r = subprocess.run([sys.executable, check, html, "--charts", "2", "--screenshot", shot])
        if r.returncode != 0:
            sys.exit(r.returncode)
        print("sweep_report_browser: screenshot kept at " + shot)


if __name__ == "__main__":
    main()
