// encoder.h: Encoder, what gtrain prepare needs of a tokenizer (ids of a text, vocabulary, EOS,
// hash), so the pipeline runs with the Hugging Face tokenizer (tokenizer.h) or with bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gtrain::text {

class Tokenizer;

struct Encoder {
  // Appends the ids of a document's text to `out`; called from several threads at once.
  std::function<void(std::string_view text, std::vector<uint32_t>& out)> encode;
  size_t vocab_size = 0;                       // ids are below it
  std::optional<uint32_t> eos;                 // appended after each document with --append-eos
  std::string hash;                            // identifies the tokenizer (the cache key includes it)
  std::string path;                            // what was read ("bytes" for the byte encoder)
  std::string describe;                        // for the console
  std::shared_ptr<const Tokenizer> tokenizer;  // the Hugging Face tokenizer (null for bytes): chat templates
};

// Each byte its own id (0-255) and EOS 256: a vocabulary of 257.
Encoder byte_encoder();

// `path` "bytes": byte_encoder(); else the Hugging Face tokenizer.json (or the model folder holding
// it) at `path`, encoding with its post-processor's BOS / EOS. A ConfigError naming the file for
// one it cannot read.
Encoder load_encoder(const std::string& path);

}  // namespace gtrain::text
