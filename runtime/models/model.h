// model.h: the Model interface every trainable network implements, and what it tells the planner.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "runtime/models/model_config.h"

namespace gtrain {

// What a dataset tells a model about its samples.
struct DataSpec {
  std::vector<int64_t> input_shape;  // one sample's input: {1, 28, 28}, {features} or {seq_len}
  int64_t num_classes = 0;           // classification: number of classes
  int64_t vocab = 0;                 // token data: vocabulary size
  bool tokens = false;               // inputs are token ids and targets the next tokens
  int64_t tokens_per_sample() const { return tokens ? input_shape.at(0) : 0; }
};

// Sizes the planner and the metrics need.
struct ModelStats {
  int64_t params = 0;                       // trainable parameters
  double flops_per_sample = 0;              // forward + backward
  double activation_bytes_per_sample = 0;   // fp32 activations kept for backward, no recompute
  double recompute_bytes_per_sample = 0;    // activations kept with per-block recompute
  int64_t blocks = 0;                       // blocks a pipeline can split (0 = not splittable)
};

class Model : public torch::nn::Module {
 public:
  // Output for a batch: logits [B, classes] or [B, T, vocab].
  virtual torch::Tensor forward(const torch::Tensor& input) = 0;

  // Sum over the batch of each sample's loss (token losses averaged within a sample). The trainer
  // divides by the global batch, so the gradient is the same however the batch is split.
  virtual torch::Tensor loss_sum(const torch::Tensor& output, const torch::Tensor& target);

  // Correct predictions in the batch (tokens for token models), for accuracy.
  virtual torch::Tensor correct(const torch::Tensor& output, const torch::Tensor& target);

  // Default: 6 x params FLOPs per token/sample, activations estimated from parameter count.
  virtual ModelStats stats(const DataSpec& spec) const;

  // Ordered blocks for pipeline parallelism (empty: the model cannot be split by blocks).
  virtual std::vector<std::shared_ptr<torch::nn::Module>> blocks() { return {}; }

  int64_t num_parameters() const;
};

}  // namespace gtrain
