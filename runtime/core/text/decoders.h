// decoders.h: the steps of a tokenizer.json after the model: the post-processor (BOS / EOS around
// the ids) and the decoder (tokens back to text), as Hugging Face computes them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace gtrain::text {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // One step of the chain: tokens in, tokens out (tokenizers' decode_chain).
  virtual void apply(std::vector<std::string>& tokens) const = 0;
};

// The ids the post-processor puts before and after a single sequence (TemplateProcessing's
// special tokens; ByteLevel adds none).
struct PostProcessor {
  std::vector<uint32_t> before, after;
};

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j, const std::string& where);
PostProcessor make_post_processor(const nlohmann::json& j, const std::string& where);

}  // namespace gtrain::text
