// parallel_layers.h: Megatron-style tensor-parallel layers (ColumnParallelLinear,
// RowParallelLinear, VocabParallelEmbedding), the vocabulary-parallel cross-entropy, and the
// autograd functions that move data between the ranks of a tensor-parallel group:
//   copy_to_tp     (f): identity forward, all-reduce of the gradient in backward;
//   reduce_from_tp (g): all-reduce forward, identity backward.
// A column-parallel layer starts with f, a row-parallel one ends with g, so an attention or MLP
// block costs one all-reduce forward and one backward.
//
// Every layer is built whole (initialised exactly as torch::nn::Linear / Embedding, from the same
// random stream on every rank) and shard() then keeps this rank's slice: tp = N starts from the
// parameters of tp = 1, and without shard() the layers compute exactly what the torch layers do.
#pragma once

#include <torch/torch.h>

#include <map>
#include <memory>
#include <string>

#include "runtime/comm/communicator.h"
#include "runtime/models/model.h"

namespace gtrain {

// The tensor-parallel group a layer is split over (no communicator: not split).
struct TpGroup {
  std::shared_ptr<Communicator> comm;
  int64_t size() const { return comm ? comm->size() : 1; }
  int64_t rank() const { return comm ? comm->rank() : 0; }
};

torch::Tensor copy_to_tp(const torch::Tensor& x, const TpGroup& g);
// Sums `x` over the group in place (no copy): `x` must be a fresh contiguous tensor that nothing
// saved for backward, such as a matmul's output.
torch::Tensor reduce_from_tp(const torch::Tensor& x, const TpGroup& g);
// Concatenates the ranks' last dimensions (no gradient; evaluation only).
torch::Tensor gather_last_dim_tp(const torch::Tensor& x, const TpGroup& g);
// The same with a gradient: backward keeps this rank's slice of the incoming gradient (every rank
// then computes the same function of the whole tensor, e.g. distillation's loss over the whole
// vocabulary from vocabulary-parallel logits).
torch::Tensor gather_from_tp(const torch::Tensor& x, const TpGroup& g);
// Per-row cross-entropy of logits split by vocabulary: `logits` [N, V/tp] holds columns
// [vocab_start, vocab_start + V/tp); `target` [N] holds global ids. Returns [N], same on every rank.
torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& target,
                                           int64_t vocab_start, const TpGroup& g);

// A low-rank adapter (LoRA, [adapter] kind = "lora") on a parallel linear layer: y = x W^T + b +
// scaling * B A dropout(x), A [rank, in] and B [out, rank] trained in fp32, W and b frozen. It is split
// with the layer it sits on: on a column-parallel layer B's rows go with W's (A whole, its gradient
// summed over the group, since each rank's output rows give part of it); on a row-parallel layer A's
// columns go with W's, and the rank-wide product joins the partial output before its all-reduce (B
// whole, its gradient summed over the group). Parameters "<layer>.lora_A" and "<layer>.lora_B".
struct LoraOptions {
  int64_t rank = 8;       // r
  double scaling = 2.0;   // alpha / r
  double dropout = 0.0;   // on the adapter's input, training only (keyed: the same mask on any layout)
  bool gaussian = false;  // A ~ N(0, 1 / r) instead of kaiming-uniform (bound 1 / sqrt(in)); B starts at 0
  uint64_t site = 0;      // keyed dropout site
};

// A layer whose parameters tensor parallel splits.
class TensorParallelLayer {
 public:
  virtual ~TensorParallelLayer() = default;
  // Keeps this rank's slice of the whole parameters.
  virtual void shard(const TpGroup& g) = 0;
  // Placement of the split parameters, keyed "<prefix>.<name>".
  virtual void add_placements(const std::string& prefix, std::map<std::string, TensorPlacement>& out) const = 0;
};

// Shards every TensorParallelLayer inside `m`; returns how many there were.
int64_t shard_parallel_layers(torch::nn::Module& m, const TpGroup& g);
// Placements of every split parameter inside `m` (empty when nothing is split).
std::map<std::string, TensorPlacement> parallel_layer_placements(torch::nn::Module& m);

// y = x W^T + b with W's rows (output features) split: output [.., out/tp]. `fused_parts` equal
// row blocks (q | k | v) are split separately, so each rank keeps whole heads of every part.
class ColumnParallelLinearImpl : public torch::nn::Module, public TensorParallelLayer {
 public:
  ColumnParallelLinearImpl(int64_t in, int64_t out, bool bias, int64_t fused_parts = 1);
  torch::Tensor forward(const torch::Tensor& x);
  // The layer on an input that already went through copy_to_tp (layers reading one input share one
  // all-reduce of its gradient).
  torch::Tensor forward_copied(const torch::Tensor& x);
  // forward() less the bias, and the bias as forward() adds it (undefined without one): for an
  // activation that adds the bias itself (fused_bias_gelu).
  torch::Tensor forward_unbiased(const torch::Tensor& x);
  torch::Tensor bias_as_added(const torch::Tensor& x);
  void shard(const TpGroup& g) override;
  void add_placements(const std::string& prefix, std::map<std::string, TensorPlacement>& out) const override;
  int64_t local_out() const { return weight.size(0); }
  // Adds a LoRA adapter (before shard()); draws A from the global generator.
  void add_lora(const LoraOptions& o);

  torch::Tensor weight, bias;
  torch::Tensor lora_A, lora_B;  // undefined without an adapter
  LoraOptions lora;
  int64_t in_features, out_features, fused_parts;
  // Set before shard(): every rank keeps the whole layer (grouped-query attention's key and value
  // heads when tp does not divide them), and its gradients, partial on each rank, are summed.
  bool replicate = false;
  TpGroup group;

 private:
  torch::Tensor forward_impl(const torch::Tensor& x, bool with_bias);
};
TORCH_MODULE(ColumnParallelLinear);

// y = x W^T + b with W's columns (input features) split: input [.., in/tp] (a column-parallel
// layer's output), partial products all-reduced, bias added once after the reduction.
class RowParallelLinearImpl : public torch::nn::Module, public TensorParallelLayer {
 public:
  RowParallelLinearImpl(int64_t in, int64_t out, bool bias);
  torch::Tensor forward(const torch::Tensor& x);
  void shard(const TpGroup& g) override;
  void add_placements(const std::string& prefix, std::map<std::string, TensorPlacement>& out) const override;
  // Adds a LoRA adapter (before shard()); draws A from the global generator.
  void add_lora(const LoraOptions& o);

  torch::Tensor weight, bias;
  torch::Tensor lora_A, lora_B;  // undefined without an adapter
  LoraOptions lora;
  int64_t in_features, out_features;
  TpGroup group;
};
TORCH_MODULE(RowParallelLinear);

// Embedding with the vocabulary (rows) split: each rank looks up the ids it holds, zeros for the
// rest, and the all-reduce assembles the rows. Also the tied output layer: logits(x) gives this
// rank's vocabulary columns [.., vocab/tp].
class VocabParallelEmbeddingImpl : public torch::nn::Module, public TensorParallelLayer {
 public:
  VocabParallelEmbeddingImpl(int64_t vocab, int64_t dim);
  torch::Tensor forward(const torch::Tensor& ids);
  torch::Tensor logits(const torch::Tensor& x);
  void shard(const TpGroup& g) override;
  void add_placements(const std::string& prefix, std::map<std::string, TensorPlacement>& out) const override;
  int64_t vocab_start() const { return group.rank() * (vocab / group.size()); }

  torch::Tensor weight;
  int64_t vocab, dim;
  TpGroup group;
};
TORCH_MODULE(VocabParallelEmbedding);

}  // namespace gtrain
