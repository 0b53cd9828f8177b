#!/usr/bin/env python3
"""docs_check.py: README.md and docs/*.md stay true (ctest Docs.*).

  static  (label cpu): every relative link resolves and every #anchor names a heading of its target
          (GitHub's slugs); every ```sh block is marked `sh run` or `sh norun: REASON`; no page
          holds a merge conflict marker;
          docs/configuration.md's "## Every key" block is exactly `gtrain config reference` (a key
          in the structs but not in the docs, or the reverse, is named); every command's and
          subcommand's --help ends with a docs page that exists.
  run     (label docs): every `sh run` block, a page's blocks in order in one fresh directory (with
          copies of examples/ and configs/ and build/gtrain*), as `bash -euo pipefail`, in the
          environment a reader has (no GTRAIN_* variable); it must exit 0 and its output hold each
          `# expect: TEXT`.

Usage: docs_check.py static|run --root REPO --gtrain BUILD/gtrain
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time


def pages(root):
    docs = os.path.join(root, "docs")
    return [os.path.join(root, "README.md")] + sorted(
        os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))


def fenced_blocks(path):
    """(info string, body, line number) of every fenced block."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"^```(\S.*)?$", lines[i])
        if m:
            j = i + 1
            while j < len(lines) and lines[j] != "```":
                j += 1
            out.append(((m.group(1) or "").strip(), "\n".join(lines[i + 1:j]), i + 1))
            i = j + 1
        else:
            i += 1
    return out


def slugs(path):
    """GitHub's anchors for the headings of a page (outside code blocks)."""
    text = open(path, encoding="utf-8").read()
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    seen, out = {}, set()
    for h in re.findall(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, re.M):
        s = re.sub(r"[^\w\- ]", "", h.lower().replace("`", "")).replace(" ", "-")
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else "%s-%d" % (s, n))
    return out


def check_links(root):
    bad = []
    for page in pages(root):
        text = open(page, encoding="utf-8").read()
        text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"^[a-z]+:", target):
                continue  # http(s), mailto
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(page), path)) if path else page
            where = os.path.relpath(page, root)
            if not os.path.exists(dest):
                bad.append("%s: link %s: no such file" % (where, target))
            elif anchor and dest.endswith(".md") and anchor not in slugs(dest):
                bad.append("%s: link %s: no heading with that anchor" % (where, target))
    return bad


def check_markers(root):
    bad = []
    for page in pages(root):
        for info, _, line in fenced_blocks(page):
            if info.split(" ")[0] == "sh" and not (info == "sh run" or re.match(r"^sh norun: \S", info)):
                bad.append("%s:%d: a sh block must be `sh run` or `sh norun: REASON`, got `%s`"
                           % (os.path.relpath(page, root), line, info))
        # A merge left unresolved: its markers would render as text.
        for n, text in enumerate(open(page, encoding="utf-8").read().split("\n"), 1):
            if re.match(r"^(<{7} |>{7} |={7}$)", text):
                bad.append("%s:%d: a merge conflict marker" % (os.path.relpath(page, root), n))
    return bad


def keys(toml_text):
    out, section = set(), ""
    for line in toml_text.split("\n"):
        m = re.match(r"^\[+([^\]]+)\]+", line)
        if m:
            section = m.group(1)
        m = re.match(r"^#?\s*([a-z_0-9]+)\s*=", line)
        if m:
            out.add(section + "." + m.group(1))
    return out


def check_config_keys(root, gtrain):
    page = os.path.join(root, "docs", "configuration.md")
    text = open(page, encoding="utf-8").read()
    m = re.search(r"^## Every key\n.*?^```toml\n(.*?)^```\s*$", text, re.M | re.S)
    if not m:
        return ["docs/configuration.md: no `## Every key` section with a ```toml block"]
    want = subprocess.run([gtrain, "config", "reference"], capture_output=True, text=True, check=True).stdout
    if m.group(1) == want:
        return []
    doc, structs = keys(m.group(1)), keys(want)
    bad = ["docs/configuration.md: key %s is in the config structs but not in the docs" % k
           for k in sorted(structs - doc)]
    bad += ["docs/configuration.md: key %s is in the docs but not in the config structs" % k
            for k in sorted(doc - structs)]
    return bad or ["docs/configuration.md: `## Every key` differs from `gtrain config reference` "
                   "(text, not keys): paste its output again"]


def subcommands(help_text):
    if "Subcommands:" not in help_text:
        return []
    return re.findall(r"^  ([a-z][a-z-]+)\s", help_text.split("Subcommands:")[-1], re.M)


def check_help(root, gtrain):
    """Every command's --help, and every subcommand's (config show, ckpt export, ...), ends with a
    docs page that exists."""
    out = subprocess.run([gtrain, "--help"], capture_output=True, text=True).stdout
    commands = [[c] for c in subcommands(out)]
    bad = [] if commands else ["gtrain --help lists no subcommands"]
    while commands:
        c = commands.pop(0)
        h = subprocess.run([gtrain] + c + ["--help"], capture_output=True, text=True).stdout
        commands += [c + [sub] for sub in subcommands(h)]
        m = re.search(r"Docs: (docs/[a-z-]+\.md)", h)
        if not m:
            bad.append("gtrain %s --help names no docs page" % " ".join(c))
        elif not os.path.exists(os.path.join(root, m.group(1))):
            bad.append("gtrain %s --help names %s, which does not exist" % (" ".join(c), m.group(1)))
    return bad


def run_blocks(root, gtrain):
    bad = []
    bin_dir = os.path.dirname(os.path.abspath(gtrain))
    # The environment a reader has: none of gtrain's own GTRAIN_* settings (a block that needs one sets
    # it where the reader sees it); only what root needs for mpirun and one BLAS thread a rank.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GTRAIN_")}
    env.update(OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    for page in pages(root):
        blocks = [(b, line) for info, b, line in fenced_blocks(page) if info == "sh run"]
        if not blocks:
            continue
        work = tempfile.mkdtemp(prefix="gtrain-docs-")
        try:
            shutil.copytree(os.path.join(root, "examples"), os.path.join(work, "examples"))
            shutil.copytree(os.path.join(root, "configs"), os.path.join(work, "configs"))
            os.mkdir(os.path.join(work, "build"))
            for b in ("gtrain", "gtrain-worker"):
                os.symlink(os.path.join(bin_dir, b), os.path.join(work, "build", b))
            for body, line in blocks:
                where = "%s:%d" % (os.path.relpath(page, root), line)
                t0 = time.time()
                try:
                    p = subprocess.run(["bash", "-euo", "pipefail", "-c", body], cwd=work, env=env, text=True,
                                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
                except subprocess.TimeoutExpired:
                    bad.append("%s: timed out after 300 s" % where)
                    continue
                missing = [e.strip() for e in re.findall(r"^\s*# expect: (.*)$", body, re.M)
                           if e.strip() not in p.stdout]
                print("%s: exit %d in %.1f s%s" % (where, p.returncode, time.time() - t0,
                                                   ", missing: %s" % missing if missing else ""))
                if p.returncode != 0 or missing:
                    bad.append("%s: exit %d, expected output missing %s; output:\n%s"
                               % (where, p.returncode, missing, p.stdout[-3000:]))
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=["static", "run"])
    ap.add_argument("--root", required=True)
    ap.add_argument("--gtrain", required=True)
    a = ap.parse_args()
    if a.mode == "static":
        bad = check_links(a.root) + check_markers(a.root) + check_config_keys(a.root, a.gtrain) + \
            check_help(a.root, a.gtrain)
    else:
        bad = run_blocks(a.root, a.gtrain)
    for b in bad:
        print("docs_check: FAIL: " + b)
    if not bad:
        print("docs_check: OK (%s)" % a.mode)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
