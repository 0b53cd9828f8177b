// tokenizer.h: a Hugging Face tokenizer.json (BPE with ByteLevel, or Metaspace / byte fallback),
// loaded and computed exactly as the `tokenizers` library does: encode text to ids, decode ids to
// text. Torch-free; what it cannot compute exactly is refused at load, naming the component.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gtrain::text {

struct TokenizerImpl;

class Tokenizer {
 public:
  // `path`: a tokenizer.json, or a model directory holding one (its tokenizer_config.json, when
  // present, names the BOS / EOS tokens). ConfigError naming the file and the component for
  // anything unsupported (another model type, an unknown normalizer, pre-tokenizer, decoder or
  // post-processor, BPE dropout).
  static Tokenizer load(const std::string& path);

  // The ids of `text` (valid UTF-8: the caller checks, see utf8_error). add_special: the
  // post-processor's BOS / EOS, as Hugging Face's encode(add_special_tokens=True). Added and
  // special tokens written in the text are recognised, as Hugging Face does by default.
  std::vector<uint32_t> encode(std::string_view text, bool add_special = true) const;
  // Appends to `out` (no allocation when it has room): the fast path of gtrain prepare.
  void encode_into(std::string_view text, bool add_special, std::vector<uint32_t>& out) const;
  // The text of `ids`; skip_special drops special tokens, as decode(skip_special_tokens=True).
  // An id outside the vocabulary is a ConfigError naming it.
  std::string decode(const std::vector<uint32_t>& ids, bool skip_special = false) const;

  size_t vocab_size() const;               // the largest id + 1 (model vocabulary and added tokens)
  std::optional<uint32_t> bos_id() const;  // tokenizer_config.json's bos_token, else the post-processor's
  std::optional<uint32_t> eos_id() const;  // tokenizer_config.json's eos_token (else "<|endoftext|>", "</s>")
  std::optional<uint32_t> token_id(std::string_view token) const;  // a vocabulary or added token's id
  std::string token(uint32_t id) const;                            // the vocabulary string of an id ("" when none)
  const std::string& hash() const;  // hex FNV-1a 64 of tokenizer.json's bytes (and the config's)
  const std::string& path() const;  // the tokenizer.json read
  std::string describe() const;     // "BPE byte-level, 50257 ids, NFC, Split(...) ..." for logs

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

 private:
  explicit Tokenizer(std::unique_ptr<TokenizerImpl> impl);
  std::unique_ptr<TokenizerImpl> impl_;
};

// The byte offset of the first invalid UTF-8 sequence in `text`, or nullopt when it is valid.
// gtrain refuses invalid UTF-8 (Hugging Face's Python API cannot be given it): the caller names
// the file, line and this offset.
std::optional<size_t> utf8_error(std::string_view text);

}  // namespace gtrain::text
