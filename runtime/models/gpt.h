// gpt.h: decoder-only transformer ("gpt"): token + position embeddings, pre-LN blocks of causal
// self-attention and GELU MLP, final LayerNorm, output head tied to the token embedding.
//
// Built from the tensor-parallel layers (runtime/models/parallel_layers.h): the fused QKV
// projection is column-parallel with rows [q heads | k heads | v heads] split per part (each rank
// keeps whole heads), attention-out and MLP-down are row-parallel, the token embedding (tied to the
// output) is vocabulary-parallel. Unsharded (tp = 1) it computes exactly the plain model. The
// blocks are an ordered list that pipeline parallel splits into stages.
#pragma once

#include "runtime/models/model.h"
#include "runtime/models/parallel_layers.h"
#include "runtime/models/recompute.h"

namespace gtrain {

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  CausalSelfAttentionImpl(int64_t n_embd, int64_t n_head, double dropout, uint64_t site);
  torch::Tensor forward(const torch::Tensor& x);  // [B, T, C] -> [B, T, C]

  ColumnParallelLinear qkv{nullptr};  // C -> 3C, rows [q heads | k heads | v heads]
  RowParallelLinear proj{nullptr};    // C -> C
  int64_t n_head;                     // heads on this rank (all of them / tp)
  int64_t head_offset = 0;            // global index of this rank's first head
  double dropout;
  uint64_t site;  // dropout sites: site (attention probabilities) and site + 1 (output)
};
TORCH_MODULE(CausalSelfAttention);

class GptMlpImpl : public torch::nn::Module {
 public:
  GptMlpImpl(int64_t n_embd, double dropout, uint64_t site);
  torch::Tensor forward(const torch::Tensor& x);
  ColumnParallelLinear fc{nullptr};  // C -> 4C
  RowParallelLinear proj{nullptr};   // 4C -> C
  double dropout;
  uint64_t site;  // dropout site of the output
};
TORCH_MODULE(GptMlp);

class GptBlockImpl : public torch::nn::Module {
 public:
  // Block `layer` (0-based) owns dropout sites 1 + 3 * layer .. 3 + 3 * layer (0 is the embedding's).
  GptBlockImpl(int64_t n_embd, int64_t n_head, double dropout, int64_t layer);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  CausalSelfAttention attn{nullptr};
  GptMlp mlp{nullptr};
};
TORCH_MODULE(GptBlock);

class Gpt : public Model {
 public:
  Gpt(const ModelConfig& config, const DataSpec& spec);
  torch::Tensor forward(const torch::Tensor& idx) override;  // [B, T] int64 -> [B, T, vocab]
  ModelStats stats(const DataSpec& spec) const override;
  std::vector<std::shared_ptr<torch::nn::Module>> blocks() override;
  torch::Tensor loss_sum(const torch::Tensor& output, const torch::Tensor& target) override;
  torch::Tensor correct(const torch::Tensor& output, const torch::Tensor& target) override;
  // With fused loss on (and tp = 1): the output layer and cross-entropy in row blocks
  // (runtime/models/fused_loss.h), the same loss without whole logits.
  torch::Tensor train_loss_sum(const torch::Tensor& idx, const torch::Tensor& target) override;
  torch::Tensor pipeline_head_loss_sum(const torch::Tensor& x, const torch::Tensor& target) override;
  void set_fused_loss(bool on) { fused_loss_ = on; }

  // Splits heads, MLP width and vocabulary over `tp` (ConfigError naming the factor that tp does not divide).
  void shard_tensor_parallel(std::shared_ptr<Communicator> tp) override;
  torch::Tensor pipeline_embed(const torch::Tensor& idx) override;
  torch::Tensor pipeline_block(int64_t i, const torch::Tensor& x) override;
  torch::Tensor pipeline_head(const torch::Tensor& x) override;  // logits: [B, T, vocab / tp]
  std::vector<int64_t> pipeline_activation_shape(const torch::Tensor& idx) override;
  std::vector<std::string> pipeline_outer_parameters(bool head) override;
  // Recompute each block's activations during backward instead of keeping them.
  void set_recompute(bool on) override { recompute_ = on; }

  const ModelConfig& config() const { return config_; }
  int64_t vocab() const { return vocab_; }

  VocabParallelEmbedding wte{nullptr};
  torch::nn::Embedding wpe{nullptr};
  torch::nn::ModuleList h{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};
  ColumnParallelLinear lm_head{nullptr};  // only when embeddings are not tied

 private:
  torch::Tensor trunk(const torch::Tensor& idx);  // embedding and every block: [B, T, C]

  ModelConfig config_;
  int64_t vocab_;
  TpGroup tp_;
  bool recompute_ = false;
  bool fused_loss_ = false;
  std::vector<BlockFunction> block_fns_;  // one per block, for recompute (stable addresses)
};

}  // namespace gtrain
