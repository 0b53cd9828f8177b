"""families.py: the tokenizer.json files the differential tests compare gtrain with Hugging Face on.

Genuine files (/work/shared/tokenizers or $GTRAIN_TOKENIZERS: gpt2, llama3, qwen3, tinyllama) are
used in place after their sha256 is checked against that folder's SOURCES.md. The others are built
here with the `tokenizers` library, deterministically, into a folder the caller gives: a small BPE
is trained (by a deterministic trainer here, on a fixed text) and the exact configuration of the family is then set, so that
every component gtrain supports (docs of `gtrain tokenize`) is computed on some file:

  mistral       BPE byte_fallback + unk + fuse_unk, Metaspace(prepend_scheme first, split false), no
                normalizer, Metaspace decoder, TemplateProcessing "<s> $A", [INST] control tokens
  mistral_seq   as mistral but Metaspace(always, split true), some byte tokens missing (byte fallback
                falls back to <unk>), decoder Replace/ByteFallback/Fuse/Strip
  unk_fuse      BPE without byte fallback (unknown characters -> fused <unk>), Metaspace(never),
                post-processor Sequence[TemplateProcessing "<s> $A </s>"]
  smollm        Digits(individual_digits) + ByteLevel, ByteLevel post-processor and decoder
  gpt2_prefix   the genuine GPT-2 file with ByteLevel add_prefix_space true
  normsplit     NFKC, Replace (string and regex), Lowercase, Strip; Split removed / merged_with_
                previous / merged_with_next / contiguous / isolated; ByteLevel(use_regex false);
                ignore_merges; added tokens with lstrip, rstrip, single_word, normalized true/false
  nfd_invert    Prepend, NFD, Replace(regex), Strip(left); Split with invert; Metaspace(always);
                byte fallback; decoder Replace/ByteFallback/Fuse/Strip
  suffix        NFKD, Lowercase, Digits; BPE continuing_subword_prefix "##", end_of_word_suffix
                "</w>", unk; decoder Replace/Replace/Strip; post-processor "[CLS] $A [SEP]"
"""
import hashlib
import json
import os
import re

GENUINE = ("gpt2", "llama3", "qwen3", "tinyllama")
BUILT = ("mistral", "mistral_seq", "unk_fuse", "smollm", "gpt2_prefix", "normsplit", "nfd_invert", "suffix")
ALL = GENUINE + BUILT


def genuine_dir():
    return os.environ.get("GTRAIN_TOKENIZERS", "/work/shared/tokenizers")


def check_genuine(family):
    """The genuine tokenizer.json's path after checking its sha256 against SOURCES.md."""
    d = genuine_dir()
    path = os.path.join(d, family, "tokenizer.json")
    sources = os.path.join(d, "SOURCES.md")
    if not os.path.exists(path) or not os.path.exists(sources):
        raise FileNotFoundError(f"{path} (or {sources}) is missing: set GTRAIN_TOKENIZERS")
    want = None
    for line in open(sources, encoding="utf-8"):
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 4 and cells[1] == family and cells[2] == "tokenizer.json":
            want = cells[4].strip("`")
    if want is None:
        raise ValueError(f"{sources} names no sha256 for {family}/tokenizer.json")
    got = hashlib.sha256(open(path, "rb").read()).hexdigest()
    if got != want:
        raise ValueError(f"{path}: sha256 {got}, SOURCES.md says {want}")
    return path


def training_text():
    """A fixed text to train the small BPEs on: part of the generated corpus (another seed) and
    three licenses, where present."""
    import corpus
    kinds = ("prose", "cjk", "rtl", "digits", "emoji", "combining", "special_strings", "whitespace")
    texts = [t for _, t in corpus.unicode_documents(seed=7, kinds=kinds)]
    for name in ("GPL-3", "Apache-2.0", "MPL-2.0"):
        p = os.path.join("/usr/share/common-licenses", name)
        if os.path.exists(p):
            texts.append(open(p, encoding="utf-8").read())
    return texts


def train(texts, pre_tokenizer, n_merges, alphabet_size=1000, initial=(), prefix="", suffix="",
          normalizer=None):
    """vocab, merges of a BPE trained on `texts` split by `pre_tokenizer`: a small trainer of its
    own, deterministic (the `tokenizers` trainer breaks ties by hash-map order), with the same
    conventions as `tokenizers` (continuing_subword_prefix on non-first units, end_of_word_suffix on
    the last; a merge's token is a + b without b's prefix). The alphabet: `initial` and the
    `alphabet_size` most frequent characters; words with other characters, or over 16, are left out."""
    from collections import Counter, defaultdict
    counts = Counter()
    for t in texts:
        t = normalizer.normalize_str(t) if normalizer else t
        counts.update(w for w, _ in pre_tokenizer.pre_tokenize_str(t))
    chars = Counter()
    for w, c in counts.items():
        for ch in w:
            chars[ch] += c
    alphabet = set(initial) | {ch for ch, _ in sorted(chars.items(), key=lambda kv: (-kv[1], kv[0]))[:alphabet_size]}
    vocab = {}
    for ch in sorted(alphabet):
        vocab.setdefault(ch, len(vocab))
    words, wc = [], []
    for w, c in sorted(counts.items()):
        if not w or len(w) > 16 or any(ch not in alphabet for ch in w):
            continue
        units = [(prefix if i else "") + ch + (suffix if i == len(w) - 1 else "") for i, ch in enumerate(w)]
        for u in units:
            vocab.setdefault(u, len(vocab))
        words.append(units)
        wc.append(c)
    import heapq
    pairs, where = Counter(), defaultdict(set)
    for i, u in enumerate(words):
        for x, y in zip(u, u[1:]):
            pairs[(x, y)] += wc[i]
            where[(x, y)].add(i)
    heap = [(-c, p) for p, c in pairs.items()]  # stale entries are skipped when popped
    heapq.heapify(heap)
    merges = []
    while len(merges) < n_merges and heap:
        c, (a, b) = heapq.heappop(heap)
        if pairs.get((a, b), 0) != -c or c == 0:
            continue
        new = a + (b[len(prefix):] if prefix and b.startswith(prefix) else b)
        merges.append((a, b))
        vocab.setdefault(new, len(vocab))
        changed = set()
        for i in where.pop((a, b)):
            u = words[i]
            for x, y in zip(u, u[1:]):
                pairs[(x, y)] -= wc[i]
                changed.add((x, y))
            out, j = [], 0
            while j < len(u):
                if j + 1 < len(u) and u[j] == a and u[j + 1] == b:
                    out.append(new)
                    j += 2
                else:
                    out.append(u[j])
                    j += 1
            words[i] = out
            for x, y in zip(out, out[1:]):
                pairs[(x, y)] += wc[i]
                where[(x, y)].add(i)
                changed.add((x, y))
        for p in changed:
            if pairs[p] > 0:
                heapq.heappush(heap, (-pairs[p], p))
            else:
                del pairs[p]
    return vocab, merges


def with_front(front, vocab):
    """A vocabulary with the `front` tokens first (ids 0..), then `vocab`'s tokens in id order."""
    out = {t: i for i, t in enumerate(front)}
    for t, _ in sorted(vocab.items(), key=lambda kv: kv[1]):
        if t not in out:
            out[t] = len(out)
    return out


BYTES = [f"<0x{b:02X}>" for b in range(256)]


def build(family, outdir, texts=None):
    """Writes outdir/<family>/tokenizer.json and returns its path (genuine: the checked path)."""
    if family in GENUINE:
        return check_genuine(family)
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    texts = texts if texts is not None else training_text()
    path = os.path.join(outdir, family, "tokenizer.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    ms = pre_tokenizers.Metaspace
    bl_alphabet = pre_tokenizers.ByteLevel.alphabet()

    if family == "gpt2_prefix":
        j = json.load(open(check_genuine("gpt2"), encoding="utf-8"))
        j["pre_tokenizer"]["add_prefix_space"] = True
        Tokenizer.from_str(json.dumps(j))  # loads
        with open(path, "w", encoding="utf-8") as f:
            json.dump(j, f, ensure_ascii=False)
        return path

    if family in ("mistral", "mistral_seq", "unk_fuse", "nfd_invert"):
        pre = {"mistral": ms("▁", "first", False), "mistral_seq": ms("▁", "always", True),
               "unk_fuse": ms("▁", "never", True), "nfd_invert": ms("▁", "always", True)}[family]
        vocab, merges = train(texts, ms("▁", "always", True), 2500, 300 if family != "unk_fuse" else 90)
        front = ["<unk>", "<s>", "</s>"]
        if family != "unk_fuse":
            front += [b for b in BYTES if not (family == "mistral_seq" and 0xF0 <= int(b[3:5], 16) <= 0xF4)]
        vocab = with_front(front, vocab)
        tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", fuse_unk=True, byte_fallback=family != "unk_fuse"))
        tok.pre_tokenizer = pre
        specials = [AddedToken(t, special=True, normalized=False) for t in front[:3]]
        if family == "mistral":
            tok.decoder = decoders.Metaspace("▁", "first", False)
            specials += [AddedToken(t, special=True, normalized=False) for t in ("[INST]", "[/INST]")]
            tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                               special_tokens=[("<s>", 1)])
        elif family == "unk_fuse":
            tok.decoder = decoders.Metaspace("▁", "never", True)
            tok.post_processor = processors.Sequence([processors.TemplateProcessing(
                single="<s> $A </s>", pair="<s> $A </s> $B:1 </s>:1", special_tokens=[("<s>", 1), ("</s>", 2)])])
        else:
            tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                             decoders.Strip(" ", 1, 0)])
            tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                               special_tokens=[("<s>", 1)])
        if family == "nfd_invert":
            tok.normalizer = normalizers.Sequence([
                normalizers.Prepend("▁"), normalizers.NFD(), normalizers.Replace(Regex("\\p{Mn}"), ""),
                normalizers.Replace(Regex(" {2,}"), " "), normalizers.Strip(left=True, right=False)])
            tok.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex("\\p{L}+"), "contiguous", invert=True),
                pre_tokenizers.Split(Regex("'"), "merged_with_next", invert=True),
                pre_tokenizers.Split(Regex("[\\p{P}\\p{S}]"), "isolated", invert=False),
                ms("▁", "always", True)])
        tok.add_special_tokens(specials)
        if family == "mistral_seq":
            tok.add_tokens([AddedToken("<0x41>", normalized=False)])
    elif family == "smollm":
        pre = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                       pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
        vocab, merges = train(texts, pre, 2000, 0, bl_alphabet)
        front = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<repo_name>", "<reponame>", "<file_sep>"]
        vocab = with_front(front, vocab)
        tok = Tokenizer(models.BPE(vocab, merges))
        tok.pre_tokenizer = pre
        tok.post_processor = processors.ByteLevel(trim_offsets=False)
        tok.decoder = decoders.ByteLevel()
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in front])
    elif family == "normsplit":
        norm = normalizers.Sequence([
            normalizers.NFKC(), normalizers.Replace("``", '"'), normalizers.Replace(Regex("[ \\t]+"), " "),
            normalizers.Lowercase(), normalizers.Strip(left=True, right=True)])
        pre = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex("\\s+"), "removed"),
            pre_tokenizers.Split(Regex("\\p{N}"), "merged_with_previous"),
            pre_tokenizers.Split("-", "merged_with_next"),
            pre_tokenizers.Split("_", "contiguous"),
            pre_tokenizers.Split(Regex("[.,;:!?](?!\\p{P})"), "isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        vocab, merges = train(texts, pre, 2000, 0, bl_alphabet, normalizer=norm)
        vocab = with_front(["<s>", "</s>"], vocab)
        tok = Tokenizer(models.BPE(vocab, merges, ignore_merges=True))
        tok.normalizer = norm
        tok.pre_tokenizer = pre
        tok.decoder = decoders.ByteLevel()
        tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> $B:1 </s>:1",
                                                           special_tokens=[("<s>", 0), ("</s>", 1)])
        tok.add_special_tokens([AddedToken("<s>", special=True, normalized=False),
                                AddedToken("</s>", special=True, normalized=False),
                                AddedToken("[MASK]", special=True, lstrip=True, normalized=False),
                                AddedToken("<sep>", special=True, rstrip=True, normalized=False),
                                AddedToken("<|endoftext|>", special=True, lstrip=True, rstrip=True, normalized=False)])
        tok.add_tokens([AddedToken("hello world", normalized=True),
                        AddedToken("foo", single_word=True, normalized=True),
                        AddedToken("école", normalized=True),
                        AddedToken("Ab", normalized=False),
                        AddedToken("<both>", lstrip=True, rstrip=True, single_word=True, normalized=False),
                        AddedToken("the", normalized=True)])
    elif family == "suffix":
        norm = normalizers.Sequence([normalizers.NFKD(), normalizers.Lowercase()])
        pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex("\\s+"), "removed"),
                                       pre_tokenizers.Digits(individual_digits=False),
                                       pre_tokenizers.Split(Regex("[^\\w\\s]+"), "isolated")])
        vocab, merges = train(texts, pre, 2500, 400, prefix="##", suffix="</w>", normalizer=norm)
        vocab = with_front(["[UNK]", "[CLS]", "[SEP]"], vocab)
        tok = Tokenizer(models.BPE(vocab, merges, unk_token="[UNK]", continuing_subword_prefix="##",
                                   end_of_word_suffix="</w>"))
        tok.normalizer = norm
        tok.pre_tokenizer = pre
        tok.decoder = decoders.Sequence([decoders.Replace("##", ""), decoders.Replace("</w>", " "),
                                         decoders.Strip(" ", 0, 1)])
        tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                                                           special_tokens=[("[CLS]", 1), ("[SEP]", 2)])
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("[UNK]", "[CLS]", "[SEP]")])
    else:
        raise ValueError(f"unknown tokenizer family {family!r} (known: {', '.join(ALL)})")
    tok.save(path, pretty=False)
    return path
