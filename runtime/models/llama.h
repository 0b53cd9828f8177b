// llama.h: the Llama 3 / Qwen2 / Qwen3 decoder ("llama"): token embedding, pre-norm blocks of
// RMSNorm, grouped-query causal attention with rotary position embeddings (Hugging Face's
// rotate-half convention, optional llama3 frequency scaling, optional per-head q/k RMSNorm and
// q/k/v biases) and a SwiGLU MLP, a final RMSNorm, and a tied or untied output layer. Parameter
// names are Hugging Face's without the "model." prefix, so a checkpoint maps by name alone.
//
// Tensor parallel: q, k, v, gate and up are column-parallel (whole heads per rank), o and down
// row-parallel, the embedding vocabulary-parallel; key/value heads are split when tp divides them
// and otherwise replicated on every rank, which then takes the ones its query heads read.
#pragma once

#include "runtime/models/decoder_lm.h"
#include "runtime/models/fused_ops.h"

namespace gtrain {

// y = w * x / sqrt(mean(x^2) + eps) over the last dimension, in fp32 whatever x's type (as
// transformers' LlamaRMSNorm). With `group` set, w's gradient is partial on each rank and summed
// over it (the per-head q/k norms under tensor parallel).
class RmsNormImpl : public torch::nn::Module {
 public:
  RmsNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  // {x + h, norm(x + h)} by the fused CUDA kernel (fused_ops.h; h may be undefined): only where
  // fused_op_applies(FusedOp::norm, x).
  AddNormResult forward_add(const torch::Tensor& x, const torch::Tensor& h);
  torch::Tensor weight;
  double eps;
  TpGroup group;
};
TORCH_MODULE(RmsNorm);

// Rotary tables for T positions from an offset: cos and sin [T, head_dim].
struct RotaryTables {
  torch::Tensor cos, sin;
};

// The inverse frequencies [head_dim / 2] (fp32) of config's rope_theta and rope_scaling, computed
// as transformers computes them.
torch::Tensor rotary_inverse_frequencies(const ModelConfig& config);

class LlamaAttentionImpl : public torch::nn::Module {
 public:
  LlamaAttentionImpl(const ModelConfig& c, uint64_t site);
  torch::Tensor forward(const torch::Tensor& x, const RotaryTables& rope, KvCache* cache, int64_t block);

  ColumnParallelLinear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr};
  RowParallelLinear o_proj{nullptr};
  RmsNorm q_norm{nullptr}, k_norm{nullptr};  // qk_norm only
  int64_t n_head;                            // query heads on this rank
  int64_t n_kv;                              // key/value heads this rank computes (all of them when replicated)
  int64_t head_dim;
  int64_t group_size;       // query heads per key/value head (all ranks)
  int64_t head_offset = 0;  // global index of this rank's first query head
  int64_t kv_offset = 0;    // global index of this rank's first key/value head
  double dropout;
  uint64_t site;  // dropout sites: site (attention probabilities) and site + 1 (output)
};
TORCH_MODULE(LlamaAttention);

class LlamaMlpImpl : public torch::nn::Module {
 public:
  LlamaMlpImpl(int64_t n_embd, int64_t intermediate, double dropout, uint64_t site);
  torch::Tensor forward(const torch::Tensor& x);
  ColumnParallelLinear gate_proj{nullptr}, up_proj{nullptr};
  RowParallelLinear down_proj{nullptr};
  double dropout;
  uint64_t site;
};
TORCH_MODULE(LlamaMlp);

class LlamaBlockImpl : public torch::nn::Module {
 public:
  // Block `layer` (0-based) owns dropout sites 1 + 3 * layer .. 3 + 3 * layer (0 is the embedding's).
  LlamaBlockImpl(const ModelConfig& c, int64_t layer);
  torch::Tensor forward(const torch::Tensor& x, const RotaryTables& rope, KvCache* cache, int64_t block);
  RmsNorm input_layernorm{nullptr};
  LlamaAttention self_attn{nullptr};
  RmsNorm post_attention_layernorm{nullptr};
  LlamaMlp mlp{nullptr};
};
TORCH_MODULE(LlamaBlock);

class Llama : public DecoderLm {
 public:
  Llama(const ModelConfig& config, const DataSpec& spec);
  ModelStats stats(const DataSpec& spec) const override;
  // Splits query heads (tp must divide them), key/value heads (or replicates them), the MLP width
  // and the vocabulary over `tp`.
  void shard_tensor_parallel(std::shared_ptr<Communicator> tp) override;
  std::vector<std::string> pipeline_outer_parameters(bool head) override;

  VocabParallelEmbedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RmsNorm norm{nullptr};
  ColumnParallelLinear lm_head{nullptr};  // only when embeddings are not tied

 protected:
  torch::Tensor block_forward(int64_t i, const torch::Tensor& x, KvCache* cache) override;
  torch::Tensor final_norm(const torch::Tensor& x) override { return norm->forward(x); }
  torch::Tensor embed(const torch::Tensor& idx, int64_t offset) override;

 private:
  const RotaryTables& rotary(int64_t tokens, int64_t offset, const torch::Device& device);
  // The tables of packed rows: [B, 1, T, head_dim] for positions [B, T] (token_layout.h).
  RotaryTables rotary_at(const torch::Tensor& positions) const;

  torch::Tensor inv_freq_;  // [head_dim / 2], fp32, CPU
  RotaryTables rope_;       // the last tables built, reused while tokens, offset and device agree
  int64_t rope_tokens_ = -1, rope_offset_ = -1;
};

}  // namespace gtrain
