// pipeline.cpp: normalizers (NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace, Strip, Sequence)
// and pre-tokenizers (ByteLevel, Split, Metaspace, Digits, Sequence), as Hugging Face computes them.
#include "runtime/core/text/pipeline.h"

#include <array>

#include <nlohmann/json.hpp>

#include "runtime/core/errors.h"
#include "runtime/core/text/regex.h"
#include "runtime/core/text/unicode.h"

namespace gtrain::text {
namespace {

constexpr const char* kNormalizers = "NFC, NFD, NFKC, NFKD, Lowercase, Prepend, Replace, Strip, Sequence";
constexpr const char* kPreTokenizers = "ByteLevel, Split, Metaspace, Digits, Sequence";
// GPT-2's byte-level split, as tokenizers' ByteLevel pre-tokenizer writes it.
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

std::string type_of(const nlohmann::json& j, const std::string& where, const char* what) {
  if (!j.is_object() || !j.contains("type")) throw ConfigError(where + ": " + what + " without a \"type\"");
  return j.at("type").get<std::string>();
}

}  // namespace

Regex make_pattern(const nlohmann::json& p, const std::string& where) {
  if (p.contains("String")) {
    const auto s = p.at("String").get<std::string>();
    if (s.empty()) throw ConfigError(where + ": an empty String pattern is not supported");
    return Regex::literal(s, where);
  }
  if (p.contains("Regex")) return Regex(p.at("Regex").get<std::string>(), where);
  throw ConfigError(where + ": pattern is neither {\"String\": ...} nor {\"Regex\": ...}");
}

namespace {

// ---- normalizers ----

struct UnicodeForm : Normalizer {
  NormalForm form;
  explicit UnicodeForm(NormalForm f) : form(f) {}
  void apply(std::string& s, bool*) const override { s = normalize(s, form); }
};

struct Lowercase : Normalizer {
  void apply(std::string& s, bool*) const override { s = lowercase(s); }
};

struct Prepend : Normalizer {
  std::string prefix;
  void apply(std::string& s, bool*) const override {
    if (!s.empty()) s.insert(0, prefix);
  }
};

struct Replace : Normalizer {
  Regex re;
  std::string content;
  Replace(Regex r, std::string c) : re(std::move(r)), content(std::move(c)) {}
  void apply(std::string& s, bool* at_origin) const override {
    thread_local std::vector<std::pair<size_t, size_t>> m;
    re.find_all(s, m);
    if (m.empty()) return;
    if (m.front().first == 0 && content.empty() && m.front().second > 0) *at_origin = false;
    std::string out;
    out.reserve(s.size());
    size_t prev = 0;
    for (const auto& [b, e] : m) {
      out.append(s, prev, b - prev);
      out += content;
      prev = e;
    }
    out.append(s, prev, std::string::npos);
    s.swap(out);
  }
};

struct Strip : Normalizer {
  bool left = true, right = true;
  void apply(std::string& s, bool* at_origin) const override {
    size_t b = 0, e = s.size();
    if (left) {
      while (b < e) {
        size_t len = 1;
        if (!is_white_space(decode_at(s, b, &len))) break;
        b += len;
      }
    }
    if (right) {
      while (e > b) {
        size_t start = e - 1;
        while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
        size_t len = 1;
        if (!is_white_space(decode_at(s, start, &len))) break;
        e = start;
      }
    }
    if (b > 0 && b < s.size()) *at_origin = false;
    s = s.substr(b, e - b);
  }
};

struct NormalizerSequence : Normalizer {
  std::vector<std::unique_ptr<Normalizer>> steps;
  void apply(std::string& s, bool* at_origin) const override {
    for (const auto& n : steps) n->apply(s, at_origin);
  }
};

// ---- pre-tokenizers ----

enum class Behavior { isolated, removed, merged_with_previous, merged_with_next, contiguous };

// Splits `s` at `matches` per the behavior (tokenizers' NormalizedString::split), appending the
// non-empty pieces; the first piece keeps `at_origin`.
void split_by(const std::string& s, const std::vector<std::pair<size_t, size_t>>& matches, bool invert,
              Behavior behavior, bool at_origin, std::vector<Piece>& out) {
  // (begin, end, is_match) covering s, as Pattern::find_matches gives them.
  struct Span {
    size_t b, e;
    bool match;
  };
  thread_local std::vector<Span> spans;
  spans.clear();
  size_t prev = 0;
  for (const auto& [b, e] : matches) {
    if (prev != b) spans.push_back({prev, b, invert});
    spans.push_back({b, e, !invert});
    prev = e;
  }
  if (prev != s.size()) spans.push_back({prev, s.size(), invert});
  thread_local std::vector<Span> kept;
  kept.clear();
  bool previous_match = false;
  switch (behavior) {
    case Behavior::isolated:
      for (auto sp : spans) kept.push_back({sp.b, sp.e, false});
      break;
    case Behavior::removed:
      for (auto sp : spans) kept.push_back(sp);
      break;
    case Behavior::contiguous:
      for (auto sp : spans) {
        if (sp.match == previous_match && !kept.empty())
          kept.back().e = sp.e;
        else
          kept.push_back({sp.b, sp.e, false});
        previous_match = sp.match;
      }
      break;
    case Behavior::merged_with_previous:
      for (auto sp : spans) {
        if (sp.match && !previous_match && !kept.empty())
          kept.back().e = sp.e;
        else
          kept.push_back({sp.b, sp.e, false});
        previous_match = sp.match;
      }
      break;
    case Behavior::merged_with_next:
      for (size_t k = spans.size(); k-- > 0;) {
        const Span sp = spans[k];
        if (sp.match && !previous_match && !kept.empty())
          kept.back().b = sp.b;
        else
          kept.push_back({sp.b, sp.e, false});
        previous_match = sp.match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
  }
  for (const Span& sp : kept) {
    if (sp.match || sp.e == sp.b) continue;  // removed, or empty
    out.push_back({s.substr(sp.b, sp.e - sp.b), at_origin && sp.b == 0});
  }
}

// Applies `split` (piece -> pieces) to every piece.
template <class F>
void split_each(std::vector<Piece>& pieces, F&& split) {
  thread_local std::vector<Piece> next;
  next.clear();
  for (Piece& p : pieces) split(p, next);
  pieces.swap(next);
}

struct ByteLevel : PreTokenizer {
  bool add_prefix_space = false;
  std::unique_ptr<Regex> re;  // GPT-2's split when use_regex
  void apply(std::vector<Piece>& pieces) const override {
    split_each(pieces, [&](Piece& p, std::vector<Piece>& out) {
      if (add_prefix_space && (p.text.empty() || p.text[0] != ' ')) p.text.insert(0, " ");
      if (!re) {
        if (!p.text.empty()) out.push_back(std::move(p));
        return;
      }
      thread_local std::vector<std::pair<size_t, size_t>> m;
      re->find_all(p.text, m);
      split_by(p.text, m, false, Behavior::isolated, p.at_origin, out);
    });
    for (Piece& p : pieces) {
      std::string mapped;
      mapped.reserve(p.text.size() * 2);
      for (unsigned char b : p.text) mapped += byte_char(b);
      p.text.swap(mapped);
    }
  }
};

struct Split : PreTokenizer {
  Regex re;
  Behavior behavior;
  bool invert;
  Split(Regex r, Behavior b, bool i) : re(std::move(r)), behavior(b), invert(i) {}
  void apply(std::vector<Piece>& pieces) const override {
    split_each(pieces, [&](Piece& p, std::vector<Piece>& out) {
      thread_local std::vector<std::pair<size_t, size_t>> m;
      re.find_all(p.text, m);
      split_by(p.text, m, invert, behavior, p.at_origin, out);
    });
  }
};

struct Metaspace : PreTokenizer {
  std::string replacement;  // UTF-8 of the replacement character
  enum class Scheme { always, first, never } scheme = Scheme::always;
  bool split = true;
  void apply(std::vector<Piece>& pieces) const override {
    split_each(pieces, [&](Piece& p, std::vector<Piece>& out) {
      std::string t;
      t.reserve(p.text.size() + 8);
      for (char c : p.text) c == ' ' ? t += replacement : t += c;
      const bool starts = t.compare(0, replacement.size(), replacement) == 0;
      if (!starts && (scheme == Scheme::always || (scheme == Scheme::first && p.at_origin))) t.insert(0, replacement);
      if (!split) {
        if (!t.empty()) out.push_back({std::move(t), p.at_origin});
        return;
      }
      thread_local std::vector<std::pair<size_t, size_t>> m;
      m.clear();
      for (size_t at = t.find(replacement); at != std::string::npos;
           at = t.find(replacement, at + replacement.size())) {
        m.emplace_back(at, at + replacement.size());
      }
      split_by(t, m, false, Behavior::merged_with_next, p.at_origin, out);
    });
  }
};

struct Digits : PreTokenizer {
  bool individual = false;
  void apply(std::vector<Piece>& pieces) const override {
    split_each(pieces, [&](Piece& p, std::vector<Piece>& out) {
      thread_local std::vector<std::pair<size_t, size_t>> m;
      m.clear();
      for (size_t i = 0; i < p.text.size();) {
        size_t len = 1;
        const char32_t c = decode_at(p.text, i, &len);
        if (is_numeric(c)) m.emplace_back(i, i + len);
        i += len;
      }
      split_by(p.text, m, false, individual ? Behavior::isolated : Behavior::contiguous, p.at_origin, out);
    });
  }
};

struct PreTokenizerSequence : PreTokenizer {
  std::vector<std::unique_ptr<PreTokenizer>> steps;
  void apply(std::vector<Piece>& pieces) const override {
    for (const auto& s : steps) s->apply(pieces);
  }
};

Behavior behavior_of(const std::string& name, const std::string& where) {
  if (name == "Isolated") return Behavior::isolated;
  if (name == "Removed") return Behavior::removed;
  if (name == "MergedWithPrevious") return Behavior::merged_with_previous;
  if (name == "MergedWithNext") return Behavior::merged_with_next;
  if (name == "Contiguous") return Behavior::contiguous;
  throw ConfigError(where + ": Split behavior \"" + name + "\" is unknown");
}

}  // namespace

const std::string& byte_char(unsigned char b) {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    int n = 0;
    for (int c = 0; c < 256; ++c) {
      const bool printable = (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
      std::string s;
      append_utf8(s, printable ? static_cast<char32_t>(c) : static_cast<char32_t>(256 + n++));
      t[c] = s;
    }
    return t;
  }();
  return table[b];
}

int char_byte(char32_t c) {
  static const std::array<int, 512> table = [] {
    std::array<int, 512> t;
    t.fill(-1);
    for (int b = 0; b < 256; ++b) {
      size_t len = 0;
      t[decode_at(byte_char(static_cast<unsigned char>(b)), 0, &len)] = b;
    }
    return t;
  }();
  return c < 512 ? table[c] : -1;
}

std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, where, "normalizer");
  const std::string at = where + ": normalizer " + type;
  if (type == "NFC") return std::make_unique<UnicodeForm>(NormalForm::nfc);
  if (type == "NFD") return std::make_unique<UnicodeForm>(NormalForm::nfd);
  if (type == "NFKC") return std::make_unique<UnicodeForm>(NormalForm::nfkc);
  if (type == "NFKD") return std::make_unique<UnicodeForm>(NormalForm::nfkd);
  if (type == "Lowercase") return std::make_unique<Lowercase>();
  if (type == "Prepend") {
    auto n = std::make_unique<Prepend>();
    n->prefix = j.at("prepend").get<std::string>();
    return n;
  }
  if (type == "Replace")
    return std::make_unique<Replace>(make_pattern(j.at("pattern"), at), j.at("content").get<std::string>());
  if (type == "Strip") {
    auto n = std::make_unique<Strip>();
    n->left = j.value("strip_left", true);
    n->right = j.value("strip_right", true);
    return n;
  }
  if (type == "Sequence") {
    auto n = std::make_unique<NormalizerSequence>();
    for (const auto& step : j.at("normalizers")) {
      if (auto s = make_normalizer(step, where)) n->steps.push_back(std::move(s));
    }
    return n;
  }
  throw ConfigError(where + ": normalizer \"" + type + "\" is not supported (gtrain computes " + kNormalizers + ")");
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, where, "pre_tokenizer");
  const std::string at = where + ": pre_tokenizer " + type;
  if (type == "ByteLevel") {
    auto p = std::make_unique<ByteLevel>();
    p->add_prefix_space = j.value("add_prefix_space", true);
    if (j.value("use_regex", true)) p->re = std::make_unique<Regex>(kGpt2Pattern, at);
    return p;
  }
  if (type == "Split") {
    return std::make_unique<Split>(make_pattern(j.at("pattern"), at),
                                   behavior_of(j.at("behavior").get<std::string>(), at), j.value("invert", false));
  }
  if (type == "Metaspace") {
    auto p = std::make_unique<Metaspace>();
    p->replacement = j.value("replacement", std::string("\xE2\x96\x81"));
    size_t len = 0;
    if (p->replacement.empty() || utf8_len(static_cast<unsigned char>(p->replacement[0])) != p->replacement.size()) {
      (void)len;
      throw ConfigError(at + ": replacement must be one character");
    }
    std::string scheme = j.value("prepend_scheme", std::string());
    if (scheme.empty()) scheme = j.value("add_prefix_space", true) ? "always" : "never";  // files before 0.14
    if (scheme == "always")
      p->scheme = Metaspace::Scheme::always;
    else if (scheme == "first")
      p->scheme = Metaspace::Scheme::first;
    else if (scheme == "never")
      p->scheme = Metaspace::Scheme::never;
    else
      throw ConfigError(at + ": prepend_scheme \"" + scheme + "\" is unknown (always, first, never)");
    p->split = j.value("split", true);
    return p;
  }
  if (type == "Digits") {
    auto p = std::make_unique<Digits>();
    p->individual = j.value("individual_digits", false);
    return p;
  }
  if (type == "Sequence") {
    auto p = std::make_unique<PreTokenizerSequence>();
    for (const auto& step : j.at("pretokenizers")) {
      if (auto s = make_pre_tokenizer(step, where)) p->steps.push_back(std::move(s));
    }
    return p;
  }
  throw ConfigError(where + ": pre_tokenizer \"" + type + "\" is not supported (gtrain computes " + kPreTokenizers +
                    ")");
}

}  // namespace gtrain::text
