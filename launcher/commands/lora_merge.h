// lora_merge.h: a LoRA run's checkpoint read as the whole model it trained: each base tensor from the
// Hugging Face directory it adapted, with alpha / rank x B A added to every adapted weight (what
// `ckpt export --format hf --merge` writes and `gtrain sample` generates with).
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>

namespace gtrain {

class CheckpointReader;
class HfCheckpointReader;

struct MergedLora {
  std::string base;                            // the base directory (checked against the recorded hash)
  std::shared_ptr<HfCheckpointReader> reader;  // the base, opened
  int64_t adapters = 0;                        // adapted weights
  // A parameter (gtrain's name) of the merged model, float32.
  std::function<torch::Tensor(const std::string&)> read;
};

// Throws ConfigError when the checkpoint is not a LoRA run's, its base is not a Hugging Face
// directory (the model's own initialisation: no file holds it), or the base changed since (hash).
MergedLora open_merged_lora(const std::shared_ptr<CheckpointReader>& ck);

}  // namespace gtrain
