#!/usr/bin/env python3
"""run_stats.py: one gtrain run's step figures for the bench scripts.

    run_stats.py RUN_DIR [--param-mb]

Prints the median step time (s) after the first fifth of the steps (warm-up), the planner's
estimate from plan.json, and with --param-mb the last train record's param_mb."""
import json
import statistics
import sys

run = sys.argv[1]
train = [json.loads(line) for line in open(run + "/metrics.jsonl")]
train = [r for r in train if r.get("kind") == "train"]
times = [r["step_time_s"] for r in train[max(1, len(train) // 5):]]
plan = json.load(open(run + "/plan.json"))
out = [statistics.median(times), plan["est_step_seconds"]]
if "--param-mb" in sys.argv[2:]:
    out.append(train[-1]["param_mb"])
print(*out)
