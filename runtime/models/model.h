// model.h: the Model interface every trainable network implements, and what it tells the planner.
#pragma once

#include <torch/torch.h>

#include <vector>

#include "runtime/models/model_config.h"
#include "runtime/models/model_stats.h"

namespace gtrain {

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
