#!/usr/bin/env python3
"""browser_check.py: a self-contained HTML report opened in a real headless browser (Chromium) renders.

Chromium (headless, no sandbox, a fresh profile) loads HTML_FILE twice: once to write a screenshot of
the window (--screenshot), once to print the DOM after the scripts ran (--dump-dom). The page must log
no console error and throw no uncaught exception (Chromium's log prints console messages of every level
alike, so the DOM pass loads a copy of the page with a small prelude in front that tags each console call
with its level; an untagged page message is the browser's own: an uncaught exception, a blocked request,
and counts as an error too; a resource that fails to load counts as well). The DOM must hold exactly N
elements matching the selector ('tag.class' or 'tag'), and the screenshot, decoded here (8-bit RGB/RGBA
PNG, zlib and the five PNG filters), must not be blank: at least 20 distinct colours, and at least 2% of
its pixels other than the most common (background) colour. Standard library only; no pip packages.

Usage: browser_check.py HTML_FILE --charts N --screenshot OUT.png [--selector 'svg.chart'] [--width 1400] [--height 3000]
"""
import argparse
import collections
import html.parser
import os
import pathlib
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zlib

PRELUDE = b"""<base data-browser-check href="%s"><script data-browser-check>(function () {
  var c = window.console, log = c.log.bind(c), T = "[browser_check] ";
  function fmt(args) {
    return Array.prototype.map.call(args, function (a) {
      if (a instanceof Error) return String(a.stack || a);
      if (a !== null && typeof a === "object") { try { return JSON.stringify(a); } catch (e) {} }
      return String(a);
    }).join(" ");
  }
  Object.keys(c).concat(["error", "assert"]).forEach(function (k) {
    if (typeof c[k] !== "function") return;
    c[k] = k === "assert"
      ? function (ok) {
          if (!ok) log(T + "error: console.assert: Assertion failed: " + fmt(Array.prototype.slice.call(arguments, 1)));
        }
      : function () { log(T + (k === "error" ? "error" : "ok") + ": console." + k + ": " + fmt(arguments)); };
  });
  window.addEventListener("error", function (ev) {  /* capture: resources that fail to load */
    var t = ev.target;
    if (t && t !== window && t.tagName)
      log(T + "error: failed to load <" + t.tagName.toLowerCase() + "> " + (t.src || t.href || t.getAttribute("href") || ""));
  }, true);
})();</script>"""

TAG = "[browser_check] "
# [pid:tid:MMDD/hhmmss.micros:INFO:CONSOLE:12] "message", source: file:///x.html (12)   (older: CONSOLE(12))
CONSOLE_START = re.compile(r'^\[[^\]\s]*:[A-Z0-9_]+:CONSOLE(?::\d+|\(\d+\))\] "(.*)$')
CONSOLE_END = re.compile(r'^(.*)", source: (.*) \((\d+)\)$')
NOISE = re.compile(r"dbus|Floss|vaapi|sandbox_linux|idle_linux|gpu|unexpected operator|GLES|viz|Fontconfig")


def fail(reason):
    print(f"browser_check: FAIL: {reason}")
    sys.exit(1)


def find_chromium():
    exe = shutil.which("chromium")
    if exe is None and os.access("/usr/bin/chromium", os.X_OK):
        exe = "/usr/bin/chromium"
    return exe


def chromium(exe, headless, args, url, timeout):
    """One headless run in a fresh profile: (returncode, stdout, stderr, seconds); None on timeout."""
    with tempfile.TemporaryDirectory(prefix="browser_check_profile_", ignore_cleanup_errors=True) as profile:
        cmd = [exe, headless, "--no-sandbox", "--disable-gpu", "--no-first-run", "--no-default-browser-check",
               "--disable-extensions", "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio",
               "--force-device-scale-factor=1", f"--user-data-dir={profile}",
               "--enable-logging=stderr", "--v=0", *args, url]
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             start_new_session=True)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)  # the launcher script, the browser and its children
            p.communicate()
            return None
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL)  # leftovers of our own run (zygotes, crashpad)
            except ProcessLookupError:
                pass
        return p.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), time.monotonic() - t0


def why(stderr):
    lines = [l.strip() for l in stderr.splitlines() if l.strip() and not NOISE.search(l)]
    return " | ".join(lines[-3:]) or "no message"


def console_messages(stderr):
    """Page console messages in Chromium's stderr log (a message may span lines)."""
    msgs, cur = [], None
    for line in stderr.splitlines():
        m = CONSOLE_START.match(line)
        if m:
            if cur is not None:
                msgs.append("\n".join(cur))
            cur = [m.group(1)]
        elif cur is not None:
            cur.append(line)
        else:
            continue
        end = CONSOLE_END.match(cur[-1])
        if end:
            cur[-1] = end.group(1)
            msgs.append("\n".join(cur))
            cur = None
    if cur is not None:
        msgs.append("\n".join(cur))
    return msgs


def console_errors(msgs, tagged):
    """tagged: the run loaded the page behind PRELUDE, so every untagged message is the browser's own."""
    errors = []
    for m in msgs:
        if m.startswith(TAG):
            if m.startswith(TAG + "error: "):
                errors.append(m[len(TAG) + 7:])
        elif tagged or m.startswith("Uncaught"):
            errors.append(m)
    return errors


def instrumented_copy(html_path, tmp):
    """A copy of the page with PRELUDE first in <head>; <base> keeps relative links pointing beside the original."""
    data = html_path.read_bytes()
    prelude = PRELUDE % (html_path.parent.as_uri().rstrip("/") + "/").encode()
    for pat in (rb"<head(?:\s[^>]*)?>", rb"<html(?:\s[^>]*)?>", rb"<!doctype[^>]*>"):
        m = re.search(pat, data, re.IGNORECASE)
        if m:
            data = data[:m.end()] + prelude + data[m.end():]
            break
    else:
        data = prelude + data
    copy = pathlib.Path(tmp) / html_path.name
    copy.write_bytes(data)
    return copy


class Counter(html.parser.HTMLParser):
    def __init__(self, tag, cls):
        super().__init__(convert_charrefs=True)
        self.tag, self.cls, self.count = tag, cls, 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if "data-browser-check" in attrs:
            return
        if self.tag and tag != self.tag:
            return
        if self.cls and self.cls not in (attrs.get("class") or "").split():
            return
        self.count += 1


def count_matches(dom, selector):
    m = re.fullmatch(r"([A-Za-z][\w-]*)?(?:\.([\w-]+))?", selector.strip())
    if not m or not (m.group(1) or m.group(2)):
        fail(f"selector {selector!r}: only 'tag.class', 'tag' or '.class'")
    p = Counter((m.group(1) or "").lower(), m.group(2))
    p.feed(dom)
    p.close()
    return p.count


def read_png(path):
    """(width, height, bytes per pixel, rows) of an 8-bit, non-interlaced grey/RGB/grey+alpha/RGBA PNG."""
    data = pathlib.Path(path).read_bytes()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG file")
    pos, idat, ihdr = 8, [], None
    while pos + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
    if ihdr is None:
        raise ValueError("no IHDR chunk")
    w, h, depth, colour, _, _, interlace = ihdr
    bpp = {0: 1, 2: 3, 4: 2, 6: 4}.get(colour)
    if depth != 8 or bpp is None or interlace:
        raise ValueError(f"unsupported PNG: bit depth {depth}, colour type {colour}, interlace {interlace}")
    raw = zlib.decompress(b"".join(idat))
    stride = w * bpp
    if len(raw) < h * (stride + 1):
        raise ValueError(f"PNG data short: {len(raw)} bytes for {w}x{h}")
    lo, hi = int.from_bytes(b"\x7f" * stride, "big"), int.from_bytes(b"\x80" * stride, "big")
    rows, prev = [], bytes(stride)
    for y in range(h):
        i = y * (stride + 1)
        f, line = raw[i], raw[i + 1:i + 1 + stride]
        if f == 0:
            pass
        elif f in (1, 2) and not any(line):  # nothing added: Up is the row above, Sub stays zeros
            line = prev if f == 2 else line
        elif f == 2:  # bytewise a+b mod 256 in one big-int step: low 7 bits add, top bit xors
            a, b = int.from_bytes(line, "big"), int.from_bytes(prev, "big")
            line = (((a & lo) + (b & lo)) ^ ((a ^ b) & hi)).to_bytes(stride, "big")
        else:
            line = bytearray(line)
            if f == 1:
                for x in range(bpp, stride):
                    line[x] = (line[x] + line[x - bpp]) & 255
            elif f == 3:
                for x in range(bpp):
                    line[x] = (line[x] + (prev[x] >> 1)) & 255
                for x in range(bpp, stride):
                    line[x] = (line[x] + ((line[x - bpp] + prev[x]) >> 1)) & 255
            elif f == 4:
                for x in range(bpp):
                    line[x] = (line[x] + prev[x]) & 255
                for x in range(bpp, stride):
                    a, b, c = line[x - bpp], prev[x], prev[x - bpp]
                    pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                    line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
            else:
                raise ValueError(f"row {y}: unknown filter type {f}")
            line = bytes(line)
        rows.append(line)
        prev = line
    return w, h, bpp, rows


def colour_stats(bpp, rows):
    """(distinct colours, pixels, pixels of the most common colour)."""
    counts = collections.Counter()
    for row, n in collections.Counter(rows).items():  # a page repeats rows: count each distinct one once
        for colour, k in collections.Counter(struct.iter_unpack(f"{bpp}s", row)).items():
            counts[colour] += k * n
    total = sum(counts.values())
    return len(counts), total, (counts.most_common(1)[0][1] if counts else 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("html")
    ap.add_argument("--charts", type=int, required=True, help="elements matching --selector the DOM must hold")
    ap.add_argument("--screenshot", required=True, help="PNG to write")
    ap.add_argument("--selector", default="svg.chart", help="'tag.class' or 'tag' (default svg.chart)")
    ap.add_argument("--width", type=int, default=1400)
    ap.add_argument("--height", type=int, default=3000)
    ap.add_argument("--min-colours", type=int, default=20)
    ap.add_argument("--min-ink", type=float, default=0.02, help="least share of non-background pixels")
    ap.add_argument("--budget-ms", type=int, default=5000, help="virtual time the page gets to settle")
    ap.add_argument("--timeout", type=float, default=90, help="seconds per chromium run")
    ap.add_argument("-v", "--verbose", action="store_true", help="print each run's timing and console lines")
    opt = ap.parse_args()

    page = pathlib.Path(opt.html).resolve()
    if not page.is_file():
        fail(f"{opt.html}: no such file")
    exe = find_chromium()
    if exe is None:
        fail("chromium not found (scripts/install-deps.sh installs it)")
    shot = pathlib.Path(opt.screenshot).resolve()
    shot.parent.mkdir(parents=True, exist_ok=True)
    if shot.exists():
        shot.unlink()  # a stale screenshot must not pass
    common = [f"--window-size={opt.width},{opt.height}", f"--virtual-time-budget={opt.budget_ms}"]
    say = print if opt.verbose else (lambda *a: None)

    # Pass 1: the screenshot of the page itself. --headless=new first; older builds only know --headless.
    for headless in ("--headless=new", "--headless"):
        r = chromium(exe, headless, common + [f"--screenshot={shot}"], page.as_uri(), opt.timeout)
        if r is None:
            fail(f"chromium timed out after {opt.timeout:g} s (screenshot pass, {headless})")
        rc, _, err, secs = r
        say(f"browser_check: screenshot pass {headless}: rc {rc}, {secs:.1f} s")
        if rc == 0 and shot.is_file() and shot.stat().st_size > 0:
            break
    else:
        fail(f"chromium wrote no screenshot (rc {rc}): {why(err)}")
    msgs = console_messages(err)
    errors = console_errors(msgs, tagged=False)

    # Pass 2: the DOM after load, of a copy with PRELUDE, which tags console calls with their level.
    with tempfile.TemporaryDirectory(prefix="browser_check_") as tmp:
        copy = instrumented_copy(page, tmp)
        r = chromium(exe, headless, common + ["--dump-dom"], copy.as_uri(), opt.timeout)
    if r is None:
        fail(f"chromium timed out after {opt.timeout:g} s (DOM pass, {headless})")
    rc, dom, err, secs = r
    say(f"browser_check: DOM pass {headless}: rc {rc}, {secs:.1f} s, {len(dom)} characters of DOM")
    if rc != 0 or "<html" not in dom.lower():
        fail(f"chromium printed no DOM (rc {rc}): {why(err)}")
    msgs2 = console_messages(err)
    for m in msgs + msgs2:
        say(f"browser_check: console: {m!r}")
    errors += [e for e in console_errors(msgs2, tagged=True) if e not in errors]

    problems = []
    if errors:
        shown = " | ".join(e.replace("\n", "\\n")[:200] for e in errors[:5])
        shown += " | ..." * (len(errors) > 5)
        problems.append(f"{len(errors)} console error{'s' * (len(errors) != 1)}: {shown}")
    n = count_matches(dom, opt.selector)
    if n != opt.charts:
        problems.append(f"{n} elements match {opt.selector!r}, want {opt.charts}")
    try:
        w, h, bpp, rows = read_png(shot)
    except (ValueError, zlib.error, struct.error) as e:
        fail("; ".join(problems + [f"{shot}: {e}"]))
    colours, total, background = colour_stats(bpp, rows)
    ink = 1 - background / total if total else 0.0
    say(f"browser_check: screenshot {w}x{h}, {colours} colours, {ink:.1%} non-background")
    if colours < opt.min_colours or ink < opt.min_ink:
        problems.append(f"screenshot blank: {w}x{h}, {colours} colours (want >= {opt.min_colours}), "
                        f"{ink:.2%} non-background pixels (want >= {opt.min_ink:.0%})")
    if problems:
        fail("; ".join(problems))
    print(f"browser_check: OK: {n} charts, {w}x{h} screenshot, {colours} colours, no console errors "
          f"-> {opt.screenshot}")


if __name__ == "__main__":
    main()
