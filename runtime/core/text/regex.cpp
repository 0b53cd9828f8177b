// regex.cpp: PCRE2 (UTF, Unicode properties, JIT) behind the tokenizer's Split patterns, with the
// translation of Oniguruma's class escapes to the properties they stand for.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "runtime/core/text/regex.h"

#include <pcre2.h>

#include "runtime/core/errors.h"
#include "runtime/core/text/unicode.h"
#include "runtime/core/text/unicode_tables.h"

namespace gtrain::text {

struct Regex::Impl {
  pcre2_code* code = nullptr;
  bool jit = false;
  ~Impl() {
    if (code) pcre2_code_free(code);
  }
};

namespace {

bool is_category(const std::string& name) {
  static const char* kNames[] = {"L",  "Lu", "Ll", "Lt", "Lm", "Lo", "M",  "Mn", "Mc", "Me", "N",
                                 "Nd", "Nl", "No", "P",  "Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po",
                                 "S",  "Sm", "Sc", "Sk", "So", "Z",  "Zs", "Zl", "Zp", "Cf"};
  for (const char* n : kNames) {
    if (name == n) return true;
  }
  return false;
}

}  // namespace

std::string onig_to_pcre2(const std::string& p, const std::string& where) {
  // Oniguruma (Unicode) classes: \s White_Space, \d Nd, \w letters, marks, Nd and Pc, \h hex digit.
  static const char* kWord = "\\p{L}\\p{M}\\p{Nd}\\p{Pc}";
  std::string out;
  out.reserve(p.size() + 16);
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[++i];
      switch (e) {
        case 's':
          out += "\\p{White_Space}";
          break;
        case 'S':
          out += "\\P{White_Space}";
          break;
        case 'd':
          out += "\\p{Nd}";
          break;
        case 'D':
          out += "\\P{Nd}";
          break;
        case 'h':
          out += in_class ? "0-9a-fA-F" : "[0-9a-fA-F]";
          break;
        case 'H':
          if (in_class) throw ConfigError(where + ": \\H inside a bracket is not supported");
          out += "[^0-9a-fA-F]";
          break;
        case 'w':
          out += in_class ? kWord : std::string("[") + kWord + "]";
          break;
        case 'p': {
          // A general category: PCRE2's (Unicode 14) and what Unicode 15 and 16 added to it.
          const size_t close = p.find('}', i);
          const std::string name = i + 1 < p.size() && p[i + 1] == '{' && close != std::string::npos
                                       ? p.substr(i + 2, close - i - 2)
                                       : std::string();
          const std::string added = is_category(name) ? category_additions(name) : std::string();
          if (added.empty()) {
            out += "\\p";
            break;
          }
          const std::string cls = "\\p{" + name + "}" + added;
          out += in_class ? cls : "[" + cls + "]";
          i = close;
          break;
        }
        case 'W':
          if (in_class) throw ConfigError(where + ": \\W inside a bracket is not supported");
          out += std::string("[^") + kWord + "]";
          break;
        default:
          out += '\\';
          out += e;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (c == '[' && in_class && i + 1 < p.size() && p[i + 1] == ':') {  // a POSIX class [:alpha:]
      const size_t end = p.find(":]", i + 2);
      if (end != std::string::npos) {
        out.append(p, i, end + 2 - i);
        i = end + 1;
        continue;
      }
    }
    if (c == '[' && in_class)
      throw ConfigError(where + ": nested brackets (Oniguruma's set operations) are not supported");
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

Regex::Regex(const std::string& pattern, const std::string& where) : impl_(std::make_unique<Impl>()) {
  const std::string translated = onig_to_pcre2(pattern, where);
  int err = 0;
  PCRE2_SIZE offset = 0;
  // Oniguruma's Ruby syntax: ^ and $ always match at line ends.
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                              PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE | PCRE2_NO_UTF_CHECK, &err, &offset, nullptr);
  if (!impl_->code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof(msg));
    throw ConfigError(where + ": the pattern " + pattern + " does not compile (PCRE2 at offset " +
                      std::to_string(offset) + ": " + reinterpret_cast<const char*>(msg) + ")");
  }
  impl_->jit = pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE) == 0;
}

Regex Regex::literal(std::string_view text, const std::string& where) {
  std::string quoted;
  for (char c : text) {
    const bool meta = std::string_view("\\^$.|?*+()[]{}-/#").find(c) != std::string_view::npos;
    if (meta) quoted += '\\';
    quoted += c;
  }
  return Regex(quoted, where);
}

Regex::~Regex() = default;
Regex::Regex(Regex&&) noexcept = default;
Regex& Regex::operator=(Regex&&) noexcept = default;

void Regex::find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const {
  out.clear();
  if (s.empty()) return;
  // Per thread: the match data, and a JIT stack that grows to 64 MiB (the default 32 KiB can run
  // out on a long run of one character class); an engine error is an error, never a shorter split.
  struct MatchData {
    pcre2_match_data* md = pcre2_match_data_create(4, nullptr);
    pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, nullptr);
    pcre2_match_context* context = pcre2_match_context_create(nullptr);
    MatchData() { pcre2_jit_stack_assign(context, nullptr, stack); }
    ~MatchData() {
      pcre2_match_context_free(context);
      pcre2_jit_stack_free(stack);
      pcre2_match_data_free(md);
    }
  };
  thread_local MatchData data;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t pos = 0;
  bool have_last = false;
  size_t last_end = 0;
  while (pos <= s.size()) {
    const int rc = impl_->jit
                       ? pcre2_jit_match(impl_->code, subject, s.size(), pos, 0, data.md, data.context)
                       : pcre2_match(impl_->code, subject, s.size(), pos, PCRE2_NO_UTF_CHECK, data.md, data.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof(msg));
      throw Error("tokenizer pattern failed on a text of " + std::to_string(s.size()) +
                  " bytes: " + reinterpret_cast<const char*>(msg));
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.md);
    const size_t b = ov[0], e = ov[1];
    if (b == e && have_last && last_end == e) {
      // An empty match right after the previous one: step one character, as the onig crate does.
      if (e >= s.size()) break;
      pos = e + utf8_len(static_cast<unsigned char>(s[e]));
      continue;
    }
    out.emplace_back(b, e);
    have_last = true;
    last_end = e;
    if (b == e) {
      if (e >= s.size()) break;
      pos = e + utf8_len(static_cast<unsigned char>(s[e]));
    } else {
      pos = e;
    }
  }
}

}  // namespace gtrain::text
