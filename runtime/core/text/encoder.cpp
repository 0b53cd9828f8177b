// encoder.cpp: the byte encoder, and the one place gtrain prepare uses the Hugging Face tokenizer.
#include "runtime/core/text/encoder.h"

#include <memory>

#include "runtime/core/errors.h"
#include "runtime/core/text/tokenizer.h"

namespace gtrain::text {

Encoder byte_encoder() {
  Encoder e;
  e.encode = [](std::string_view text, std::vector<uint32_t>& out) {
    for (unsigned char c : text) out.push_back(c);
  };
  e.vocab_size = 257;
  e.eos = 256;
  e.hash = "bytes-1";
  e.path = "bytes";
  e.describe = "bytes (each byte an id, EOS 256)";
  return e;
}

Encoder load_encoder(const std::string& path) {
  if (path == "bytes") return byte_encoder();
  auto tok = std::make_shared<const Tokenizer>(Tokenizer::load(path));
  Encoder e;
  // The post-processor's BOS / EOS, as Hugging Face's encode(text) adds them to each document.
  e.encode = [tok](std::string_view text, std::vector<uint32_t>& out) { tok->encode_into(text, true, out); };
  e.vocab_size = tok->vocab_size();
  e.eos = tok->eos_id();
  e.hash = tok->hash();
  e.path = tok->path();
  e.describe = tok->describe();
  e.tokenizer = tok;
  return e;
}

}  // namespace gtrain::text
