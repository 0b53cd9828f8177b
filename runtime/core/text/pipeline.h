// pipeline.h: the steps of a tokenizer.json before the model: the normalizer and the
// pre-tokenizer, built from their JSON and applied to pieces of text as Hugging Face applies them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/core/text/regex.h"

namespace gtrain::text {

// A piece of text on its way to the model. at_origin: it starts at the input's first character
// (Metaspace's prepend_scheme "first" prepends only there).
struct Piece {
  std::string text;
  bool at_origin = false;
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  // Normalizes `s` in place; clears *at_origin when characters before the first kept one go.
  virtual void apply(std::string& s, bool* at_origin) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits (and may rewrite) each piece; empty pieces are dropped.
  virtual void apply(std::vector<Piece>& pieces) const = 0;
};

// From tokenizer.json's "normalizer" / "pre_tokenizer" (null = none: a null pointer). A type gtrain
// does not compute exactly is a ConfigError naming `where`, the component and what is supported.
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& j, const std::string& where);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& j, const std::string& where);

// A pattern object of tokenizer.json: {"String": s} (matched literally) or {"Regex": r}.
Regex make_pattern(const nlohmann::json& p, const std::string& where);

// GPT-2's byte-to-character map: the printable character standing for each byte, and back.
const std::string& byte_char(unsigned char b);  // UTF-8 of the character
int char_byte(char32_t c);                      // -1 when c stands for no byte

}  // namespace gtrain::text
