// model.h: the Model interface every trainable network implements, and what it tells the planner.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/config/model_config.h"
#include "runtime/core/model_stats.h"

namespace gtrain {

class Communicator;

// Where a parameter held by this rank lies in the full (unsharded) tensor of the same name: the
// local tensor, flattened, is the concatenation of its regions, each flattened row-major. A fused
// QKV weight split by tensor parallel is three regions (this rank's heads of q, of k, of v).
struct TensorRegion {
  std::vector<int64_t> offsets;
  std::vector<int64_t> shape;
};
struct TensorPlacement {
  std::vector<int64_t> global_shape;
  std::vector<TensorRegion> regions;
};

class Model : public torch::nn::Module {
 public:
  // Output for a batch: logits [B, classes] or [B, T, vocab].
  virtual torch::Tensor forward(const torch::Tensor& input) = 0;

  // Sum over the batch of each sample's loss (token losses averaged within a sample). The trainer
  // divides by the global batch, so the gradient is the same however the batch is split.
  virtual torch::Tensor loss_sum(const torch::Tensor& output, const torch::Tensor& target);

  // The training loss of a batch, loss_sum(forward(input), target) unless a model fuses its output
  // layer with the loss (gpt with set_fused_loss).
  virtual torch::Tensor train_loss_sum(const torch::Tensor& input, const torch::Tensor& target) {
    return loss_sum(forward(input), target);
  }

  // The training loss of `output` = forward(input) as train_loss_sum computes it: loss_sum, plus the
  // terms that need the input too (distillation's teacher runs on it). For probes of the training
  // loss outside a step; evaluation uses loss_sum.
  virtual torch::Tensor train_loss_of(const torch::Tensor& output, const torch::Tensor& input,
                                      const torch::Tensor& target) {
    (void)input;
    return loss_sum(output, target);
  }

  // Correct predictions in the batch (tokens for token models), for accuracy.
  virtual torch::Tensor correct(const torch::Tensor& output, const torch::Tensor& target);

  // Default: 6 x params FLOPs per token/sample, activations estimated from parameter count.
  virtual ModelStats stats(const DataSpec& spec) const;

  // Ordered blocks for pipeline parallelism (empty: the model cannot be split by blocks).
  virtual std::vector<std::shared_ptr<torch::nn::Module>> blocks() { return {}; }

  int64_t num_parameters() const;

  // Tensor parallel, for models built from the parallel layers (runtime/models/parallel_layers.h):
  // keeps this rank's slice of every parallel layer's full weights. Default: ConfigError.
  virtual void shard_tensor_parallel(std::shared_ptr<Communicator> tp);
  // Placement of the parameters that are slices of a larger tensor (absent: held whole).
  virtual std::map<std::string, TensorPlacement> parameter_placements();

  // Pipeline parallel, for models with blocks(): forward(input) == pipeline_head(block_{n-1}(...
  // block_0(pipeline_embed(input)))), where block i is pipeline_block(i, x).
  virtual torch::Tensor pipeline_embed(const torch::Tensor& input);
  virtual torch::Tensor pipeline_block(int64_t i, const torch::Tensor& x);
  virtual torch::Tensor pipeline_head(const torch::Tensor& x);
  // The last stage's training loss: loss_sum(pipeline_head(x), target) unless the model fuses its
  // output layer with the loss (gpt with set_fused_loss).
  virtual torch::Tensor pipeline_head_loss_sum(const torch::Tensor& x, const torch::Tensor& target) {
    return loss_sum(pipeline_head(x), target);
  }
  // The micro-batch's input as the data gave it, handed to the pipeline's last stage before its
  // loss, which may need it without having embedded it (distillation's online teacher). Default: unused.
  virtual void set_loss_input(const torch::Tensor& input) { (void)input; }
  // Shape of what a block takes and returns for a batch of `input`.
  virtual std::vector<int64_t> pipeline_activation_shape(const torch::Tensor& input);
  // Names of the parameters outside the blocks used by pipeline_embed (head = false) or by
  // pipeline_head (head = true); a tied weight is in both.
  virtual std::vector<std::string> pipeline_outer_parameters(bool head);
  // Recompute each block's activations in backward (runtime/models/recompute.h). Default: ConfigError.
  virtual void set_recompute(bool on);
};

}  // namespace gtrain
