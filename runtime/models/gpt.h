// gpt.h: decoder-only transformer ("gpt"): token + position embeddings, pre-LN blocks of causal
// self-attention and GELU MLP, final LayerNorm, output head tied to the token embedding.
//
// Laid out for later splitting: attention keeps the fused QKV projection head-major per q/k/v
// (tensor parallel splits heads), and the blocks are an ordered list (pipeline parallel splits them).
#pragma once

#include "runtime/models/model.h"

namespace gtrain {

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  CausalSelfAttentionImpl(int64_t n_embd, int64_t n_head, double dropout);
  torch::Tensor forward(const torch::Tensor& x);  // [B, T, C] -> [B, T, C]

  torch::nn::Linear qkv{nullptr};   // C -> 3C, rows [q heads | k heads | v heads]
  torch::nn::Linear proj{nullptr};  // C -> C
  int64_t n_head;
  double dropout;
};
TORCH_MODULE(CausalSelfAttention);

class GptMlpImpl : public torch::nn::Module {
 public:
  GptMlpImpl(int64_t n_embd, double dropout);
  torch::Tensor forward(const torch::Tensor& x);
  torch::nn::Linear fc{nullptr};    // C -> 4C
  torch::nn::Linear proj{nullptr};  // 4C -> C
  double dropout;
};
TORCH_MODULE(GptMlp);

class GptBlockImpl : public torch::nn::Module {
 public:
  GptBlockImpl(int64_t n_embd, int64_t n_head, double dropout);
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

  const ModelConfig& config() const { return config_; }
  int64_t vocab() const { return vocab_; }

  torch::nn::Embedding wte{nullptr}, wpe{nullptr};
  torch::nn::ModuleList h{nullptr};
  torch::nn::LayerNorm ln_f{nullptr};
  torch::nn::Linear lm_head{nullptr};  // only when embeddings are not tied

 private:
  ModelConfig config_;
  int64_t vocab_;
};

}  // namespace gtrain
