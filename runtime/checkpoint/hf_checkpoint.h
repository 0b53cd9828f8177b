// hf_checkpoint.h: Hugging Face checkpoints (config.json plus model.safetensors, or shards with
// model.safetensors.index.json) read into gtrain's parameter names and layouts, and written from them.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/hf_config.h"

namespace gtrain {

class SafetensorsReader;

// One parameter of a gpt or llama model under both names.
struct HfTensorName {
  std::string gtrain;          // gtrain's parameter name: "h.0.attn.qkv.weight"
  std::string hf;              // the Hugging Face name: "transformer.h.0.attn.c_attn.weight"
  std::vector<int64_t> shape;  // gtrain's shape ([out, in] for a linear layer)
  bool transpose = false;      // stored transposed, [in, out] (GPT-2's Conv1D layers)
  std::vector<int64_t> hf_shape() const;
};

// Every parameter of `m` (name "gpt" or "llama"), in gtrain's order. A tied model has no
// lm_head.weight (Hugging Face files may still hold one: the embedding's copy).
std::vector<HfTensorName> hf_tensor_names(const ModelConfig& m);

// Tensors Hugging Face files may hold that are buffers, not parameters (GPT-2's causal mask
// attn.bias and attn.masked_bias, rotary inv_freq): skipped on import.
bool is_hf_buffer(const std::string& hf_name);

// A Hugging Face model directory opened for reading: config.json read (read_hf_config), every shard's
// header checked, and every parameter the config implies found with its shape and a floating-point
// dtype, with no other tensor. Errors are one line naming the file and the tensor (ConfigError; a
// damaged shard's CheckpointError). Tensors are read one at a time.
class HfCheckpointReader {
 public:
  explicit HfCheckpointReader(const std::string& dir);
  const HfModelShape& shape() const { return shape_; }
  const std::vector<HfTensorName>& tensors() const { return names_; }
  // Which file holds a tensor (by gtrain name), and the dtype stored there.
  const std::string& file_of(const std::string& gtrain_name) const;
  torch::ScalarType stored_dtype(const std::string& gtrain_name) const;
  // The tensor in gtrain's name and layout, as float32.
  torch::Tensor read(const std::string& gtrain_name) const;
  int64_t ignored() const { return ignored_; }  // buffers, and a tied model's lm_head.weight, not read

 private:
  std::string dir_;
  HfModelShape shape_;
  std::vector<HfTensorName> names_;
  std::map<std::string, size_t> by_gtrain_;
  std::map<std::string, std::shared_ptr<SafetensorsReader>> shard_of_;  // by Hugging Face name
  int64_t ignored_ = 0;
};

struct HfExportResult {
  std::vector<std::string> files;  // the safetensors files written, in order
  int64_t tensors = 0;
  int64_t bytes = 0;  // of tensor data
};

// Writes `m`'s parameters as a Hugging Face directory `out_dir` loadable by transformers'
// AutoModelForCausalLM.from_pretrained: config.json, and model.safetensors, or shards of at most
// `max_shard_bytes` of tensor data each (model-0000K-of-0000N.safetensors) with
// model.safetensors.index.json. `read(gtrain_name)` gives each parameter in gtrain's layout, one at
// a time; it is cast to `dtype`. The directory is written as a sibling temporary one, read back
// against CRC-32C checksums, then renamed into place (an existing Hugging Face directory there is
// replaced). `metadata` goes into each safetensors header beside "format": "pt". Beside config.json
// goes generation_config.json: `generation_source` (the imported model's, {} for none) with the
// model's special tokens, when there is any.
HfExportResult write_hf_checkpoint(const std::string& out_dir, const ModelConfig& m, torch::ScalarType dtype,
                                   int64_t max_shard_bytes, const std::map<std::string, std::string>& metadata,
                                   const std::function<torch::Tensor(const std::string&)>& read,
                                   const nlohmann::json& generation_source = {});

}  // namespace gtrain
