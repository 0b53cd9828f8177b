// gpt.h: decoder-only transformer ("gpt"): token + position embeddings, pre-LN blocks of causal
// self-attention and GELU MLP, final LayerNorm, output head tied to the token embedding.
//
// Built from the tensor-parallel layers (runtime/models/parallel_layers.h): the fused QKV
// projection is column-parallel with rows [q heads | k heads | v heads] split per part (each rank
// keeps whole heads), attention-out and MLP-down are row-parallel, the token embedding (tied to the
// output) is vocabulary-parallel. Unsharded (tp = 1) it computes exactly the plain model. The
// blocks are an ordered list that pipeline parallel splits into stages.
#pragma once

#include "runtime/models/decoder_lm.h"

namespace gtrain {

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  CausalSelfAttentionImpl(int64_t n_embd, int64_t n_head, double dropout, uint64_t site);
  // [B, T, C] -> [B, T, C]; with `cache`, the tokens after the cached ones (block `block`'s entry).
  torch::Tensor forward(const torch::Tensor& x, KvCache* cache = nullptr, int64_t block = 0);

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
  torch::Tensor forward(const torch::Tensor& x, KvCache* cache = nullptr, int64_t block = 0);
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  CausalSelfAttention attn{nullptr};
  GptMlp mlp{nullptr};
};
TORCH_MODULE(GptBlock);

class Gpt : public DecoderLm {
 public:
  Gpt(const ModelConfig& config, const DataSpec& spec);
  ModelStats stats(const DataSpec& spec) const override;
  // Splits heads, MLP width and vocabulary over `tp` (ConfigError naming the factor that tp does not divide).
  void shard_tensor_parallel(std::shared_ptr<Communicator> tp) override;
  std::vector<std::string> pipeline_outer_parameters(bool head) override;

  VocabParallelEmbedding wte{nullptr};
  torch::nn::Embedding wpe{nullptr};
  torch::nn::ModuleList h{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};
  ColumnParallelLinear lm_head{nullptr};  // only when embeddings are not tied

 protected:
  torch::Tensor block_forward(int64_t i, const torch::Tensor& x, KvCache* cache) override;
  torch::Tensor final_norm(const torch::Tensor& x) override;
  torch::Tensor embed(const torch::Tensor& idx, int64_t offset) override;
};

}  // namespace gtrain
