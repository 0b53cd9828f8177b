#!/usr/bin/env python3
"""test-times.py: where `make test`'s time went: seconds per ctest label and the 10 slowest tests.

  scripts/test-times.py BUILD CTEST_LOG [TOTAL_SECONDS]

Reads the test times from ctest's output (CTEST_LOG: "  1/371 Test  #12: Name ....   Passed   3.21 sec")
and each test's labels from `ctest --show-only=json-v1` in BUILD. A test with several labels counts
under each. A test over 60 s must say why in a comment starting "Over 60 s" just above its TEST() or
add_test() (docs/contributing.md): the table marks those that do not. Prints a table; exits 0
whatever it finds (a report, not a check).
"""
import glob
import json
import os
import re
import subprocess
import sys

LONG = 60.0


def labels_of(build):
    out = subprocess.run(["ctest", "--show-only=json-v1"], cwd=build, capture_output=True, text=True).stdout
    labels = {}
    try:
        for t in json.loads(out).get("tests", []):
            for p in t.get("properties", []):
                if p.get("name") == "LABELS":
                    labels[t["name"]] = p.get("value", [])
    except ValueError:
        pass
    return labels


def source_root(build):
    try:
        with open(os.path.join(build, "CMakeCache.txt"), errors="replace") as f:
            for l in f:
                if l.startswith("CMAKE_HOME_DIRECTORY:"):
                    return l.split("=", 1)[1].strip()
    except OSError:
        pass
    return None


def says_why(root, name):
    """Whether the comment just above NAME's TEST() (Suite.Name) or add_test() starts 'Over 60 s'."""
    if not root:
        return False
    suite, _, case = name.partition(".")
    gtest = re.compile(r"^TEST(_F|_P)?\(%s, %s\)" % (re.escape(suite), re.escape(case)))
    cmake = re.compile(r"add_test\(NAME %s[.$]" % re.escape(suite))
    files = glob.glob(os.path.join(root, "tests", "**", "*.cpp"), recursive=True)
    files += glob.glob(os.path.join(root, "**", "CMakeLists.txt"), recursive=True)
    for path in files:
        try:
            lines = open(path, errors="replace").read().split("\n")
        except OSError:
            continue
        pattern = gtest if path.endswith(".cpp") else cmake
        for i, l in enumerate(lines):
            if pattern.search(l.strip()):
                j = i - 1
                while j >= 0 and lines[j].strip().startswith(("//", "#")):
                    if "Over 60 s" in lines[j]:
                        return True
                    j -= 1
    return False


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    build, log = sys.argv[1], sys.argv[2]
    total = float(sys.argv[3]) if len(sys.argv) > 3 else None
    line = re.compile(r"Test\s+#\d+: (\S+) \.+\**\s*(\w[\w ]*?)\s+([\d.]+) sec")
    times = {}
    with open(log, errors="replace") as f:
        for l in f:
            m = line.search(l)
            if m:
                times[m.group(1)] = (float(m.group(3)), m.group(2).strip())
    if not times:
        print("test-times: no test times in %s" % log)
        return 0
    labels = labels_of(build)
    per_label = {}
    for name, (secs, _) in times.items():
        for lab in labels.get(name, ["(none)"]):
            n, s = per_label.get(lab, (0, 0.0))
            per_label[lab] = (n + 1, s + secs)
    tests_s = sum(s for s, _ in times.values())
    print("\ntest time by label (a test with several labels counts under each)")
    print("  %-12s %6s %9s" % ("label", "tests", "minutes"))
    for lab, (n, s) in sorted(per_label.items(), key=lambda kv: -kv[1][1]):
        print("  %-12s %6d %9.1f" % (lab, n, s / 60))
    print("  %-12s %6d %9.1f" % ("all tests", len(times), tests_s / 60))
    if total is not None:
        print("  %-12s %6s %9.1f   (build, set-up and tests: the whole make test)" % ("make test", "", total / 60))
    print("\nthe 10 slowest tests (over %d s: each should say why, in a comment starting 'Over %d s')" % (LONG, LONG))
    root = source_root(build)
    for name, (secs, status) in sorted(times.items(), key=lambda kv: -kv[1][0])[:10]:
        note = ""
        if secs > LONG:
            note = "  (says why)" if says_why(root, name) else "  (over %d s and says not why)" % LONG
        print("  %7.1f s  %-8s %s  [%s]%s" % (secs, status, name, ",".join(labels.get(name, [])), note))
    return 0


if __name__ == "__main__":
    sys.exit(main())
