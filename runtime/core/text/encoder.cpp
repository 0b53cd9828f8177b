// encoder.cpp: the byte encoder, and the one place gtrain prepare uses the Hugging Face tokenizer.
#include "runtime/core/text/encoder.h"

#include "runtime/core/errors.h"

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
  throw ConfigError("--tokenizer " + path + ": this gtrain reads no tokenizer.json yet",
                    "use --tokenizer bytes (each byte an id)");
}

}  // namespace gtrain::text
