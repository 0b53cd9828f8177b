"""corpus.py: the texts the tokenizer differential tests encode (tests/tokenizer/tokdiff.py).

Two sources, both deterministic for a machine:
- system documents: every text file under /usr/share/doc and /usr/share/common-licenses (plain and
  .gz), decoded as UTF-8; files that are not valid UTF-8 or hold NUL bytes are skipped, files with
  the same bytes are read once. Each file is one text (a document), and its first 16 KB is also cut
  into chunks (paragraphs, single lines, fixed slices at odd offsets) so that text starts and ends
  fall everywhere.
- a generated Unicode corpus from a fixed seed: code points sampled from every 16-aligned range
  holding assigned characters (so every block of Python's unicodedata), combining marks, emoji with
  ZWJ and skin tones, CJK, RTL, digit runs of every length and script, whitespace runs of every kind,
  control characters, long words, empty lines, and special-token strings with near misses.

`sample(kb, seed)` draws a few hundred KB from both for the CI tests; `full()` yields everything.
Texts are Python str holding only Unicode scalar values (no surrogates): valid UTF-8 when encoded.
"""
import gzip
import hashlib
import os
import random
import unicodedata

DOC_ROOTS = ("/usr/share/doc", "/usr/share/common-licenses")
CHUNKED_PREFIX = 16 * 1024  # chunks are cut from the first 16 KB of each file

WHITESPACE = ["\u0020", "\t", "\n", "\r\n", "\r", "\v", "\f", "\u0085", "\u00a0", "\u1680"] + \
    [chr(c) for c in range(0x2000, 0x200B)] + ["\u2028", "\u2029", "\u202f", "\u205f", "\u3000",
                                               "\u180e", "\u200b", "\ufeff", "\u200c", "\u200d"]

SPECIAL_STRINGS = ["<|endoftext|>", "<s>", "</s>", "<unk>", "<pad>", "<|im_start|>", "<|im_end|>",
                   "<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>",
                   "<|end_header_id|>", "<|reserved_special_token_5|>", "<think>", "</think>",
                   "<tool_call>", "<|fim_prefix|>", "[MASK]", "<sep>", "<0x41>", "<0x0A>", "▁",
                   "hello world", "foo", "école", "ÉCOLE", "<repo_name>", "<|vision_start|>"]
NEAR_MISSES = ["<|endoftext|", "|endoftext|>", "<|endoftext||>", "<| endoftext|>", "<|ENDOFTEXT|>",
               "<<s>>", "<s >", "< s>", "<s", "s>", "</s", "<|im_start", "<|IM_START|>", "<|im_start|",
               "<|eot_id|", "<|reserved_special_token_|>", "<thinking>", "[mask]", "[MASK", "<sep",
               "hello  world", "Hello World", "helloworld", "foobar", "xfoo", "foo_", "ecole", "Ecole",
               "<0x4>", "<0xZZ>", "<|", "|>", "<>", "▁▁"]


# ---------------------------------------------------------------- system documents

def doc_files():
    """The candidate files, sorted (paths; symlinks to files already listed are dropped)."""
    seen, out = set(), []
    for root in DOC_ROOTS:
        for d, dirs, files in os.walk(root):
            dirs.sort()
            for f in sorted(files):
                p = os.path.join(d, f)
                if not os.path.isfile(p):
                    continue
                r = os.path.realpath(p)
                if r in seen:
                    continue
                seen.add(r)
                out.append(p)
    return out


def read_text(path):
    """The file's text, or None when it is not UTF-8 text (or a broken .gz)."""
    try:
        with open(path, "rb") as f:
            b = f.read()
        if path.endswith(".gz"):
            b = gzip.decompress(b)
        s = b.decode("utf-8")
    except (OSError, EOFError, ValueError, gzip.BadGzipFile):
        return None
    if "\0" in s:
        return None
    return s


def chunks(text, rng):
    """Pieces of the first CHUNKED_PREFIX characters: paragraphs, lines, odd slices."""
    head = text[:CHUNKED_PREFIX]
    out = [p for p in head.split("\n\n") if p][:40]
    lines = head.split("\n")
    out += [lines[i] for i in sorted(rng.sample(range(len(lines)), min(8, len(lines))))]
    for _ in range(4):
        if len(head) < 2:
            break
        a = rng.randrange(len(head))
        out.append(head[a:a + rng.choice([1, 2, 3, 7, 31, 200, 1000])])
    return out


def system_documents(files=None, with_chunks=True):
    """Yields (source, text) for the system documents (each unique file, then its chunks)."""
    seen = set()
    for p in files if files is not None else doc_files():
        s = read_text(p)
        if s is None:
            continue
        h = hashlib.sha1(s.encode("utf-8")).digest()
        if h in seen:
            continue
        seen.add(h)
        yield p, s
        if with_chunks:
            rng = random.Random(p)
            for c in chunks(s, rng):
                yield p + "#chunk", c


# ---------------------------------------------------------------- the generated Unicode corpus

def usable(c):
    cat = unicodedata.category(chr(c))
    return cat not in ("Cn", "Cs")


def block_samples(rng):
    """A text per 256 code points: sampled characters of every 16-aligned assigned range."""
    out = []
    for base in range(0, 0x110000, 256):
        words = []
        for lo in range(base, base + 256, 16):
            cps = [c for c in range(lo, lo + 16) if usable(c)]
            if not cps:
                continue
            pick = rng.sample(cps, min(len(cps), 6))
            words.append("".join(chr(c) for c in pick))
            words.append(chr(rng.choice(cps)) + rng.choice(["a", " ", "1", ".", "", "é"]))
        if words:
            seps = [" ", "", "\n", " x ", "  ", "-"]
            out.append("".join(w + rng.choice(seps) for w in words))
    # Code points Python's Unicode 14 calls unassigned (newer versions may assign them): a few each.
    unassigned = [c for c in range(0x0370, 0x32000, 7)
                  if unicodedata.category(chr(c)) == "Cn" and not 0xD800 <= c <= 0xDFFF]
    pick = rng.sample(unassigned, min(3000, len(unassigned)))
    for i in range(0, len(pick), 60):
        out.append(" ".join(chr(c) + chr(pick[(i + 1) % len(pick)]) for c in pick[i:i + 60]))
    return out


def combining(rng):
    marks = [c for c in range(0x0300, 0x2000) if unicodedata.category(chr(c)) in ("Mn", "Mc", "Me")]
    marks += [c for c in range(0x20D0, 0x2100) if unicodedata.category(chr(c)) in ("Mn", "Me")]
    marks += [c for c in range(0xFE20, 0xFE30)]
    bases = "aeiouAEIOUnNcCsSzZ ạ1ᄀ가아ㄱ日ع א"
    out = ["e\u0301", "A\u030a", "a\u0323\u0302", "a\u0302\u0323", "\u0301start", "q\u0307\u0323",
           "\u1100\u1161\u11a8", "\u1100\u1161", "\uac00\u11a8", "ﬁ ﬀ ﬃ Ⅻ ① ㎏ ½ ℌ ℡", "Å Å Å", "ṩ ṩ",
           "\u0958\u0959 \u093f", "\u0f73\u0f75\u0f81", "ǅ ǈ ǋ ǲ", "ß ẞ İ ı ς Σ ΐ ΰ", "İstanbul ǰ ŉ"]
    for _ in range(600):
        s = ""
        for _ in range(rng.randint(1, 6)):
            s += rng.choice(bases) + "".join(chr(rng.choice(marks)) for _ in range(rng.randint(0, 4)))
        out.append(s)
    # Hangul jamo sequences (NFC composes, NFD decomposes) and precomposed syllables.
    for _ in range(200):
        out.append("".join(chr(0x1100 + rng.randrange(19)) + chr(0x1161 + rng.randrange(21)) +
                           (chr(0x11A8 + rng.randrange(27)) if rng.random() < .5 else "")
                           for _ in range(rng.randint(1, 5))) +
                   " " + "".join(chr(0xAC00 + rng.randrange(11172)) for _ in range(rng.randint(1, 8))))
    return out


def emoji(rng):
    people = [0x1F468, 0x1F469, 0x1F466, 0x1F467, 0x1F9D1, 0x1F476]
    tones = list(range(0x1F3FB, 0x1F400))
    things = [0x1F4BB, 0x1F52C, 0x1F680, 0x2764, 0x1F525, 0x1F3A8, 0x1F373, 0x2695, 0x1F9AF]
    singles = [c for c in list(range(0x1F300, 0x1FAFF)) + list(range(0x2600, 0x27C0)) if usable(c)]
    out = ["👨‍👩‍👧‍👦", "👩🏽‍💻", "🏳️‍🌈", "🏴‍☠️", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "1️⃣ #️⃣ *️⃣", "❤️ ❤︎ ❤", "🇺🇸🇫🇷🇯🇵 🇦", "👍🏿👍🏻", "🧑‍🤝‍🧑",
           "😀" * 50, "a😀b", "😀\u0301"]
    for _ in range(800):
        parts = []
        for _ in range(rng.randint(1, 4)):
            e = chr(rng.choice(people)) + (chr(rng.choice(tones)) if rng.random() < .6 else "")
            if rng.random() < .7:
                e += "\u200d" + chr(rng.choice(things)) + ("\ufe0f" if rng.random() < .3 else "")
            parts.append(e)
        sep = rng.choice(["", " ", "\u200d", "x", "\n"])
        text = sep.join(parts) + " " + "".join(chr(rng.choice(singles)) for _ in range(rng.randint(0, 6)))
        flags = "".join(chr(0x1F1E6 + rng.randrange(26)) for _ in range(rng.choice([0, 2, 3, 4])))
        out.append(rng.choice(["I love ", "", "ok", "«"]) + text + flags)
    return out


def cjk(rng):
    ranges = [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x3040, 0x309F), (0x30A0, 0x30FF),
              (0xAC00, 0xD7A3), (0xFF00, 0xFFEF), (0x3000, 0x303F), (0x31F0, 0x31FF), (0xF900, 0xFAFF),
              (0x2F800, 0x2FA1F), (0x3100, 0x312F)]
    out = ["日本語のテキストです。東京は晴れ。", "中文文本，包括标点符号！", "한국어 텍스트입니다.",
           "ＦＵＬＬＷＩＤＴＨ　ｔｅｘｔ　１２３", "ｶﾀｶﾅ ﾊﾟﾋﾟﾌﾟ", "漢字かなカナabc123漢字"]
    for _ in range(1500):
        lo, hi = rng.choice(ranges)
        s = "".join(chr(c) for c in (rng.randint(lo, hi) for _ in range(rng.randint(1, 40))) if usable(c))
        out.append(s + rng.choice(["", "。", " ", "abc", "123", "\n", "、"]) + s[: rng.randint(0, 5)])
    return out


def rtl(rng):
    arabic = [c for c in range(0x0600, 0x0700) if usable(c)] + [c for c in range(0xFB50, 0xFDFF) if usable(c)] + \
        [c for c in range(0xFE70, 0xFEFF) if usable(c)]
    hebrew = [c for c in range(0x0590, 0x0600) if usable(c)] + [c for c in range(0xFB1D, 0xFB50) if usable(c)]
    out = ["مرحبا بالعالم! هذا نص عربي.", "שָׁלוֹם עוֹלָם", "النص ١٢٣ و 456", "\u202eabc\u202c \u200fא\u200e",
           "עברית English עברית", "ﷺ ﷽ ﻻ"]
    for _ in range(1000):
        pool = arabic if rng.random() < .6 else hebrew
        words = ["".join(chr(rng.choice(pool)) for _ in range(rng.randint(1, 9))) for _ in range(rng.randint(1, 8))]
        if rng.random() < .3:
            words.insert(rng.randrange(len(words) + 1), rng.choice(["abc", "123", "٣٤٥", "۱۲", "\u200f", "\u061c"]))
        out.append(rng.choice([" ", "  ", "\u200f ", "،"]).join(words))
    return out


def digits(rng):
    zeros = [c for c in range(0x110000) if unicodedata.category(chr(c)) == "Nd" and unicodedata.digit(chr(c)) == 0]
    other_numbers = [c for c in range(0x2100) if unicodedata.category(chr(c)) in ("No", "Nl")]
    out = []
    for z in zeros:
        for n in list(range(1, 13)) + [16, 17, 31, 64, 100]:
            run = "".join(chr(z + rng.randrange(10)) for _ in range(n))
            out.append(rng.choice(["", "x", " ", "$", "v"]) + run + rng.choice(["", "a", " ", ".5", ",000", "%"]))
    for n in range(1, 41):
        out.append("".join(str(rng.randrange(10)) for _ in range(n)))
        out.append("abc" + "7" * n + "def " + "1" * n + " " + "".join(str(rng.randrange(10)) for _ in range(n)))
    out += ["1,234,567.89", "3.14159265358979", "0x7fffffff", "1e-10", "2024-12-06 16:40:00", "+49 (0)30 1234",
            "²³¹ ⁴⁵ ₁₂ ½ ¾ Ⅻ ⅻ ① ⑳ ㊿", "１２３４５", "v1.2.3-rc4", "10^9", "1st 2nd 3rd 4th", "007 0 00 000 0000"]
    out += ["".join(chr(rng.choice(other_numbers)) for _ in range(rng.randint(1, 12))) for _ in range(100)]
    return out


def whitespace(rng):
    out = []
    for w in WHITESPACE:
        for n in (1, 2, 3, 4, 5, 8, 16, 17):
            out += [w * n, "a" + w * n + "b", w * n + "word", "word" + w * n, "x" + w * n + " y", "1" + w * n + "2"]
    for _ in range(800):
        out.append("".join(rng.choice(WHITESPACE) * rng.randint(1, 4) + rng.choice(["a", "bc", "Z", "", "1", "日", "é", "'s"])
                           for _ in range(rng.randint(1, 10))))
    out += ["    def f(x):\n\treturn x  \n", "\t\tindented\n  \n\t \n", "line\r\nline\r\n\r\n", "a \n b \n\n c  ",
            " leading", "  two leading", "trailing ", "\n\nstarts with newlines", "ends with newlines\n\n\n"]
    return out


def controls(rng):
    cc = [c for c in range(0x20)] + [0x7F] + list(range(0x80, 0xA0)) + [0x200E, 0x200F, 0x202A, 0x202B, 0x202C,
                                                                     0x202D, 0x202E, 0x2066, 0x2067, 0x2068,
                                                                     0x2069, 0xFFF9, 0xFFFA, 0xFFFB, 0xFFFC,
                                                                     0xFFFD, 0xFFFE, 0xFFFF, 0xE000, 0xF8FF,
                                                                     0xF0000, 0x10FFFD, 0x10FFFF, 0xE0001, 0xE0041]
    out = ["".join(chr(c) for c in cc)]
    for c in cc:
        out += [chr(c), "a" + chr(c) + "b", chr(c) * 3 + " x", "word " + chr(c)]
    for _ in range(300):
        out.append("".join(rng.choice([chr(rng.choice(cc)), "a", " ", "é", "1", "\n"]) for _ in range(rng.randint(1, 20))))
    return out


def long_words(rng):
    letters = "abcdefghijklmnopqrstuvwxyz"
    out = ["a" * 1000, "ab" * 2000, "".join(rng.choice(letters) for _ in range(5000)), "1" * 3000, " " * 3000,
           "\n" * 500, "日本" * 1000, "😀" * 500, "é" * 1000, "e\u0301" * 500, "_" * 2000, "-=" * 1000,
           "".join(rng.choice(letters + letters.upper() + "0123456789+/") for _ in range(6000)) + "==",
           "https://example.com/" + "/".join("seg%d" % i for i in range(300)) + "?q=" + "x" * 200,
           "Supercalifragilisticexpialidocious " * 50, "Donaudampfschifffahrtsgesellschaftskapitän",
           "pneumonoultramicroscopicsilicovolcanoconiosis", "\t" * 700, "\u3000" * 800, "\u00a0" * 900]
    for _ in range(60):
        out.append("".join(rng.choice(letters + "'.-") for _ in range(rng.randint(100, 3000))))
    return out


def empty_lines(rng):
    return ["", "\n", "\n\n", "\n\n\n", " \n", "\r\n", "\n \n \n", "", " ", "  ", "a\n\nb", "\n\n\nword\n\n\n"]


def special_strings(rng):
    out = []
    tokens = SPECIAL_STRINGS + NEAR_MISSES
    for t in tokens:
        out += [t, " " + t, t + " ", "  " + t + "  ", "a" + t + "b", "word " + t + " word", t + t, t + "\n" + t,
                "\n" + t + "\n", t.upper(), t.lower(), "x " + t + ".", t[:-1], t[1:]]
    for _ in range(600):
        out.append("".join(rng.choice(tokens + [" ", "  ", "\n", "a", "The ", "日", "1", "é", "\t"])
                           for _ in range(rng.randint(1, 12))))
    out += ["<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nHi<|eot_id|>",
            "<s>[INST] What? [/INST] This.</s>", "text<|endoftext|>more text<|endoftext|>"]
    return out


def prose(rng):
    out = ["I'm, you're, he's, we've, they'll, I'd, don't, DON'T, I'M, We'LL, it’s, rock ’n’ roll",
           "it'ſ, it'\u212a, I'\u0130, he'\u017fS, we'\ufb06, 'ǅ 'Ǆ 'ǆ, 'ΣΑΣ 'ς, 'ᲀ, x'LL x'Ll x'lL, 'VE 'Re 'rE 'D",
           "The quick brown fox jumps over the lazy dog.", "Ça va? Größe, naïve café, Øre, Æsir, ĳ, ŉ",
           "Привет, мир! Ёлка.", "Γειά σου Κόσμε! ΣΊΣΥΦΟΣ", "नमस्ते दुनिया", "สวัสดีชาวโลก", "ሰላም ልዑል", "გამარჯობა",
           "Xin chào thế giới", "Tiếng Việt có dấu: ắằẳẵặ", "mañana año pingüino", "Ḽơᶉëᶆ ȋṕšᶙṁ ḍỡḽǭᵳ",
           "if (x != y && a <= b) { return x->y; } // comment", "SELECT * FROM t WHERE id='1';",
           "$ echo \"hello\" | sed 's/h/j/g' > out.txt 2>&1", "<html><body class=\"x\">&amp;&lt;</body></html>"]
    words = ("the of and to in is was for on that with as by at from it an be this which or are have not "
             "Time Zone Unicode data model token text File Apple HTTP JSON xml GPU-aware co-operate").split()
    for _ in range(500):
        s = " ".join(rng.choice(words) for _ in range(rng.randint(3, 30)))
        out.append(s[0].upper() + s[1:] + rng.choice([".", "!", "?", "...", ",", ""]) +
                   rng.choice(["", "\n", " ", "'s", "'S", "n't", "'ll"]))
    return out


GENERATORS = [block_samples, combining, emoji, cjk, rtl, digits, whitespace, controls, long_words,
              empty_lines, special_strings, prose]


def unicode_documents(seed=49, kinds=None):
    """Yields (source, text) for the generated corpus (same texts for the same seed); `kinds`: only
    these generators (names without the module)."""
    for gen in GENERATORS:
        if kinds is not None and gen.__name__ not in kinds:
            continue
        rng = random.Random(f"{seed}:{gen.__name__}")
        for i, t in enumerate(gen(rng)):
            yield f"gen:{gen.__name__}:{i}", t


# ---------------------------------------------------------------- what the tests take

def full(seed=49):
    """The whole corpus: the generated texts, then every system document and its chunks."""
    yield from unicode_documents(seed)
    yield from system_documents()


def sample(kb, seed=49):
    """About `kb` KB: half generated (a stratified draw, the special strings always), half
    system documents (slices of files drawn with the seed). Deterministic for a machine."""
    rng = random.Random(seed)
    budget = kb * 1024 // 2
    gen = list(unicode_documents(seed))
    by_kind = {}
    for src, t in gen:
        by_kind.setdefault(src.split(":")[1], []).append((src, t))
    out = list(by_kind.pop("special_strings")) + list(by_kind.pop("empty_lines"))
    used = sum(len(t.encode()) for _, t in out)
    per_kind = max(1, (budget - used) // max(1, len(by_kind)))
    for kind in sorted(by_kind):
        items = by_kind[kind][:]
        rng.shuffle(items)
        got = 0
        for src, t in items:
            n = len(t.encode())
            if got + n > per_kind and got > 0:
                continue
            out.append((src, t))
            got += n
    files = doc_files()
    rng.shuffle(files)
    got = 0
    for src, text in system_documents(files, with_chunks=False):
        if got >= budget:
            break
        a = rng.randrange(max(1, len(text) - 6000))
        piece = text[a:a + rng.choice([300, 1000, 3000, 6000])]
        out.append((src + "#slice", piece))
        got += len(piece.encode())
        for c in chunks(piece, rng)[:6]:
            out.append((src + "#chunk", c))
            got += len(c.encode())
    return out
