#!/usr/bin/env python3
"""check-sizes.py: lists C++ files over the line limit and functions over the body limit.

Usage: check-sizes.py [--max-file N] [--max-function N] [ROOT]

Scans launcher/, runtime/, strategies/ under ROOT (default: the repository). A function is a brace
block opened at namespace or class scope after a parameter list; its size is the lines from the
first line of its signature to its closing brace. Prints one line per offender, exits 1 when there
is any. clang-format's layout (one statement per line) is what the counts assume.
"""
import os
import re
import sys

LAYERS = ("launcher", "runtime", "strategies")


def strip_code(text):
    """The text with comments, string and character literals blanked (newlines kept)."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join("\n" if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            if not m:
                out.append(c)
                i += 1
                continue
            end = ")" + m.group(1) + '"'
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append("".join("\n" if ch == "\n" else " " for ch in text[i:j]))
            i = j
        elif c in "\"'":
            if c == "'" and i > 0 and text[i - 1].isalnum():  # digit separator 1'000
                out.append(" ")
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            j = min(j + 1, n)
            out.append(" " * (j - i))
            i = j
        elif c == "#" and (i == 0 or text[i - 1] == "\n"):
            j = i
            while True:  # a preprocessor line, with its continuations
                k = text.find("\n", j)
                k = n if k < 0 else k
                if k > 0 and text[k - 1] == "\\" and k < n:
                    j = k + 1
                    continue
                break
            out.append("".join("\n" if ch == "\n" else " " for ch in text[i:k]))
            i = k
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(text):
    """(name, first line, last line) of every function body at namespace or class scope."""
    code = strip_code(text)
    scopes = []  # 'ns', 'class', 'func', 'block'
    header_start = 0  # offset where the current declaration began
    found = []
    line_of = lambda off: code.count("\n", 0, off) + 1
    func_start = []
    for i, c in enumerate(code):
        if c in ";":
            if not scopes or scopes[-1] in ("ns", "class"):
                header_start = i + 1
        elif c == "{":
            kind = "block"
            if not scopes or scopes[-1] in ("ns", "class"):
                header = code[header_start:i].strip()
                words = header.split("(")[0]
                if re.match(r"^(inline\s+)?namespace\b", header) or header.startswith('extern'):
                    kind = "ns"
                elif re.search(r"\b(struct|class|union|enum)\b", words) and "(" not in header.split("=")[0][-1:]:
                    kind = "class" if "=" not in header else "block"
                elif "(" in header and not re.search(r"=\s*$", header) and not header.endswith("]"):
                    kind = "func"
                    m = re.search(r"([~\w:<>]+)\s*\(", header)
                    name = m.group(1) if m else header[:40]
                    first = header_start + (len(code[header_start:i]) - len(code[header_start:i].lstrip()))
                    func_start.append((name, line_of(first)))
            scopes.append(kind)
        elif c == "}":
            kind = scopes.pop() if scopes else "block"
            if kind == "func":
                name, first = func_start.pop()
                found.append((name, first, line_of(i)))
            if not scopes or scopes[-1] in ("ns", "class"):
                header_start = i + 1
    return found


def main(argv):
    max_file, max_function = 800, 100
    args = list(argv)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    while args:
        a = args.pop(0)
        if a == "--max-file":
            max_file = int(args.pop(0))
        elif a == "--max-function":
            max_function = int(args.pop(0))
        else:
            root = a
    offenders = []
    for layer in LAYERS:
        for dirpath, _, files in os.walk(os.path.join(root, layer)):
            for f in sorted(files):
                if not f.endswith((".cpp", ".h")):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                text = open(path, encoding="utf-8").read()
                lines = text.count("\n")
                if lines > max_file:
                    offenders.append(f"{rel}: {lines} lines (limit {max_file}): split it by concern")
                for name, first, last in functions(text):
                    size = last - first + 1
                    if size > max_function:
                        offenders.append(f"{rel}:{first}: {name}() is {size} lines (limit {max_function})")
    for o in offenders:
        print(o)
    if offenders:
        print(f"check-sizes: {len(offenders)} offender(s)")
        return 1
    print(f"check-sizes: every file <= {max_file} lines, every function <= {max_function} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
