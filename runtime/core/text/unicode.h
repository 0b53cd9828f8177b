// unicode.h: the UTF-8 and Unicode rules the tokenizer shares: decoding and validating UTF-8, the
// replacement of invalid sequences as Rust's from_utf8_lossy does, normalization forms and
// lower-casing as Hugging Face's tokenizers compute them (utf8proc's tables), character classes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace gtrain::text {

// The code point at s[i] and its length in bytes; s must be valid UTF-8 at i.
inline char32_t decode_at(std::string_view s, size_t i, size_t* len) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return *len = 1, b;
  if (b < 0xE0) return *len = 2, ((b & 0x1F) << 6) | (static_cast<unsigned char>(s[i + 1]) & 0x3F);
  if (b < 0xF0) {
    *len = 3;
    return ((b & 0x0F) << 12) | ((static_cast<unsigned char>(s[i + 1]) & 0x3F) << 6) |
           (static_cast<unsigned char>(s[i + 2]) & 0x3F);
  }
  *len = 4;
  return ((b & 0x07) << 18) | ((static_cast<unsigned char>(s[i + 1]) & 0x3F) << 12) |
         ((static_cast<unsigned char>(s[i + 2]) & 0x3F) << 6) | (static_cast<unsigned char>(s[i + 3]) & 0x3F);
}
// The length of the UTF-8 character starting with byte b (1 for a continuation byte).
inline size_t utf8_len(unsigned char b) {
  return b < 0xC0 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
}
void append_utf8(std::string& out, char32_t c);

// Length of the longest valid UTF-8 prefix of `s`, and whether all of it is valid.
size_t valid_utf8_prefix(std::string_view s);
// `bytes` with each maximal invalid subpart replaced by U+FFFD (Rust's String::from_utf8_lossy).
std::string utf8_lossy(std::string_view bytes);

enum class NormalForm { nfc, nfd, nfkc, nfkd };
// `s` in that normal form (utf8proc; ASCII is returned as is).
std::string normalize(std::string_view s, NormalForm form);
// Every character lower-cased as Rust's char::to_lowercase (full mappings, no context).
std::string lowercase(std::string_view s);

bool is_white_space(char32_t c);  // the White_Space property (Rust char::is_whitespace)
bool is_numeric(char32_t c);      // general category Nd, Nl or No (Rust char::is_numeric)
// Rust regex's \w: Alphabetic, Mark, Decimal_Number, Connector_Punctuation, Join_Control.
bool is_word_char(char32_t c);

}  // namespace gtrain::text
