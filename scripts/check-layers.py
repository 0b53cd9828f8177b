#!/usr/bin/env python3
"""check-layers.py: every #include in launcher/, runtime/ and strategies/ points down a layer.

Layers, lowest first (a file may include its own layer and those below it):
  0 core        runtime/core/         torch-free: errors, formats, config, plan and parallel
                                      types, schedule and quota windows, checkpoint manifest
  1 planner     strategies/planner/   torch-free: the planner and its cost model
  2 runtime     runtime/              LibTorch: comm, models, data, trainer, checkpoint, metrics
  3 strategies  strategies/           LibTorch: the parallel engines and the engine factory
  4 launcher    launcher/             the gtrain CLI and gtrain-worker

Inside the launcher, its folders stack the same way, lowest first:
  base < scheduler < cluster < launch < report < chain < sweep < commands < cli < launcher/*.cpp (the two mains)
  base        text helpers, the program runner, the hardware query, the run lock
  scheduler   allocation discovery, one backend per scheduler, limits, batch scripts
  launch      ranks, mpirun and its output, devices, the stage hand-off
  report      gtrain report's reading and rendering
  chain       chains of stages, stage sizing, quota-window calendars
  sweep       hyper-parameter searches: the space, ASHA's decisions, the ledger, the trial loop
  commands    each command's work
  cli         each command's flags

The torch-free layers also include no LibTorch header (<torch/...>, <ATen/...>, <c10/...>).
Usage: check-layers.py [ROOT]. Prints one line per offending include; exits 1 when there is any.
"""
import os
import re
import sys

LAYERS = [  # (folder prefix, layer, name); the longest matching prefix wins
    ("runtime/core/", 0, "core"),
    ("strategies/planner/", 1, "planner"),
    ("runtime/", 2, "runtime"),
    ("strategies/", 3, "strategies"),
    ("launcher/", 4, "launcher"),
]
LAUNCHER_FOLDERS = ["base", "scheduler", "cluster", "launch", "report", "chain", "sweep", "commands", "cli"]
TORCH_FREE = {0, 1}
TORCH_HEADER = re.compile(r"#\s*include\s*<(torch|ATen|c10)/")
LOCAL_INCLUDE = re.compile(r'#\s*include\s*"([^"]+)"')


def layer_of(path):
    best = None
    for prefix, layer, name in LAYERS:
        if path.startswith(prefix) and (best is None or len(prefix) > len(best[0])):
            best = (prefix, layer, name)
    return best


def launcher_rank(path):
    """The sub-layer of a launcher/ file: its folder's place in LAUNCHER_FOLDERS (the mains on top)."""
    parts = path.split("/")
    if len(parts) == 2:
        return len(LAUNCHER_FOLDERS), "launcher"
    if parts[1] not in LAUNCHER_FOLDERS:
        return None, parts[1]
    return LAUNCHER_FOLDERS.index(parts[1]), parts[1]


def launcher_problem(rel, include):
    """A message when launcher file `rel` includes a launcher file from a folder above its own."""
    own, own_name = launcher_rank(rel)
    target, target_name = launcher_rank(include)
    if own is None:
        return f"{rel}: launcher/{own_name}/ is not one of the launcher's folders ({', '.join(LAUNCHER_FOLDERS)})"
    if target is None:
        return f"{rel}: includes {include} from launcher/{target_name}/, not one of the launcher's folders"
    if target > own:
        return (f"{rel}: launcher/{own_name}/ includes {include} from launcher/{target_name}/, a folder above it "
                f"({' < '.join(LAUNCHER_FOLDERS)})")
    return None


def main(argv):
    root = argv[0] if argv else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    problems = []
    for top in ("launcher", "runtime", "strategies"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if not f.endswith((".cpp", ".h")):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, f), root)
                own = layer_of(rel)
                for n, line in enumerate(open(os.path.join(root, rel), encoding="utf-8"), 1):
                    if own[1] in TORCH_FREE and TORCH_HEADER.search(line):
                        problems.append(f"{rel}:{n}: {own[2]} is torch-free but includes {line.strip()}")
                    m = LOCAL_INCLUDE.search(line)
                    if not m:
                        continue
                    target = layer_of(m.group(1))
                    if target is None:
                        continue
                    if target[1] > own[1]:
                        problems.append(f"{rel}:{n}: {own[2]} (layer {own[1]}) includes {m.group(1)} from "
                                        f"{target[2]} (layer {target[1]}), a layer above it")
                    elif own[2] == "launcher" and target[2] == "launcher":
                        problem = launcher_problem(rel, m.group(1))
                        if problem:
                            problems.append(problem.replace(f"{rel}:", f"{rel}:{n}:", 1))
    for p in problems:
        print(p)
    if problems:
        print(f"check-layers: {len(problems)} upward include(s)")
        return 1
    print("check-layers: every include points down (core < planner < runtime < strategies < launcher; "
          f"in the launcher {' < '.join(LAUNCHER_FOLDERS)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
