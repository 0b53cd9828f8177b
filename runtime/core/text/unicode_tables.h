// unicode_tables.h: the characters on which the Unicode versions of Hugging Face's tokenizers and
// of gtrain's libraries (utf8proc, PCRE2) disagree, so that gtrain computes what tokenizers does.
#pragma once

#include <string>

namespace gtrain::text {

// tokenizers' normalizers (Unicode 9.0) leave this character as it is: no decomposition, combining
// class 0; utf8proc (15.0) does not.
bool normalization_inert(char32_t c);
// Rust's char::is_numeric (Unicode 17.0) says numeric where utf8proc does not know the character.
bool numeric_added(char32_t c);
// Rust's char::to_lowercase of c where utf8proc has none (0 = no such mapping).
char32_t lower_added(char32_t c);
// The ranges ("\x{A}-\x{B}...", for a bracket) of characters in general category `category` ("L",
// "Nd", ...) in Unicode 16.0 (Oniguruma's tables in tokenizers) that PCRE2 10.42 leaves unassigned.
std::string category_additions(const std::string& category);

}  // namespace gtrain::text
