// regex.h: a Hugging Face pattern (Oniguruma syntax) compiled with PCRE2 and its JIT, and the
// matches found as the onig crate's find_iter finds them.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gtrain::text {

class Regex {
 public:
  // `pattern` in Oniguruma's Ruby syntax (as tokenizer.json writes it); `where` names it in errors.
  // A pattern PCRE2 cannot take, or one using a class whose meaning differs between the two engines
  // without a translation (\W or \D inside a bracket), is a ConfigError.
  Regex(const std::string& pattern, const std::string& where);
  // A literal string, matched as is.
  static Regex literal(std::string_view text, const std::string& where);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // The non-overlapping matches in `s` as [begin, end) byte offsets, leftmost first; an empty
  // match right after the previous match is skipped. `s` must be valid UTF-8.
  void find_all(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The PCRE2 form of an Oniguruma (Ruby syntax) pattern: \s, \d, \w, \h and their negations spelled
// as the Unicode classes Oniguruma gives them. Exposed for tests.
std::string onig_to_pcre2(const std::string& pattern, const std::string& where);

}  // namespace gtrain::text
