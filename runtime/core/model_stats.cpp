// model_stats.cpp: gpt and llama sizes from their shapes (the formulas the models and the planner share).
#include "runtime/core/model_stats.h"

#include "runtime/core/config/model_config.h"

#include <algorithm>

namespace gtrain {

double transformer_block_activation_elements(const ModelStats& s, int64_t tp) {
  const double T = static_cast<double>(s.seq_len), C = static_cast<double>(s.hidden);
  const double H = static_cast<double>(s.heads), t = static_cast<double>(tp < 1 ? 1 : tp);
  // Per block (pre-norm): norm 1 input + output, norm 2 input + output stay whole on every rank
  // (4TC); q, k, v (3TC for gpt), attention output (TC), MLP hidden before and after GELU (8TC) are
  // split by tp, as are the attention's softmax-sized tensors (k HT^2), or the flash kernels'
  // log-sum-exp (HT). A llama keeps q of H heads, k and v of its KV heads, the rotated q and k, and
  // the SwiGLU's gate, up, activated gate and product (4TI).
  const double D = s.head_dim > 0 ? static_cast<double>(s.head_dim) : C / H;
  const double KV = s.kv_heads > 0 ? static_cast<double>(s.kv_heads) : H;
  const double I = s.intermediate > 0 ? static_cast<double>(s.intermediate) : 4.0 * C;
  const double qkv = T * D * (H + 2.0 * KV) + (s.rotary ? T * D * (H + KV) : 0.0);
  const double mlp = (s.gated_mlp ? 4.0 : 2.0) * T * I;
  const double k = s.attention_score_tensors;
  const double attention = k > 0 ? k * H * T * T : H * T;
  return 4.0 * T * C + (qkv + T * D * H + mlp + attention) / t;
}

double attention_score_tensors(double dropout) {
  if (dropout > 0.0) return 2.25;
#if defined(GTRAIN_TORCH_SDPA) && GTRAIN_TORCH_SDPA
  return 0.0;
#else
  return 1.0;
#endif
}

double fused_loss_block_bytes(bool gpu) {
  return (gpu ? 512.0 : 64.0) * 1024 * 1024;
}

int64_t fused_loss_block_rows(int64_t rows, int64_t vocab, bool gpu) {
  const double row_bytes = 4.0 * static_cast<double>(std::max<int64_t>(1, vocab));
  const int64_t most = std::max<int64_t>(1, static_cast<int64_t>(fused_loss_block_bytes(gpu) / row_bytes));
  rows = std::max<int64_t>(1, rows);
  const int64_t blocks = (rows + most - 1) / most;
  return (rows + blocks - 1) / blocks;
}

double transformer_outer_activation_elements(const ModelStats& s, int64_t tp) {
  const double T = static_cast<double>(s.seq_len), C = static_cast<double>(s.hidden);
  const double V = static_cast<double>(s.vocab), t = static_cast<double>(tp < 1 ? 1 : tp);
  return 2.0 * T * C + 2.0 * T * V / t;
}

namespace {

// What every decoder's stats share: its shape, both kinds of parallelism, and the activations its
// block formula (transformer_block_activation_elements) implies, fp32, with and without recompute.
void set_decoder_shape(ModelStats& s, int64_t layers, int64_t heads, int64_t hidden, int64_t seq_len, int64_t vocab) {
  s.blocks = layers;
  s.heads = heads;
  s.hidden = hidden;
  s.seq_len = seq_len;
  s.vocab = vocab;
  s.supports_tp = true;
  s.supports_pp = true;
}

void set_activation_bytes(ModelStats& s) {
  const double L = static_cast<double>(s.blocks), T = static_cast<double>(s.seq_len);
  const double block = transformer_block_activation_elements(s, 1);
  const double outer = transformer_outer_activation_elements(s, 1);
  s.activation_bytes_per_sample = 4.0 * (L * block + outer);
  // Per-block recompute keeps each block's input, plus one block's working set while it recomputes.
  s.recompute_bytes_per_sample = 4.0 * (L * T * static_cast<double>(s.hidden) + block + outer);
}

}  // namespace

ModelStats gpt_stats(int64_t n_layer, int64_t n_head, int64_t n_embd, int64_t seq_len, int64_t vocab,
                     bool tied_embeddings, double dropout, int64_t positions) {
  ModelStats s;
  s.dropout = dropout;
  const int64_t C = n_embd;
  // Per block: 2 LayerNorms (4C), qkv (3C^2 + 3C), attention proj (C^2 + C), fc (4C^2 + 4C), proj (4C^2 + C).
  s.params_per_block = 12 * C * C + 13 * C;
  s.params = vocab * C + (positions > 0 ? positions : seq_len) * C + n_layer * s.params_per_block + 2 * C +
             (tied_embeddings ? 0 : vocab * C);
  set_decoder_shape(s, n_layer, n_head, n_embd, seq_len, vocab);
  const double T = static_cast<double>(seq_len), Cd = static_cast<double>(C);
  const double L = static_cast<double>(n_layer), V = static_cast<double>(vocab);
  // Matmul FLOPs (fwd + bwd = 3x fwd): 24 C^2 per token per layer, attention 4 T C per layer, head 2 C V.
  const double fwd = T * (L * (24.0 * Cd * Cd + 4.0 * T * Cd) + 2.0 * Cd * V);
  s.flops_per_sample = 3.0 * fwd;
  set_activation_bytes(s);
  return s;
}

ModelStats llama_stats(const ModelConfig& c, int64_t vocab) {
  ModelStats s;
  s.dropout = c.dropout;
  const int64_t C = c.n_embd, H = c.n_head, KV = c.llama_kv_heads(), D = c.llama_head_dim();
  const int64_t I = c.llama_intermediate();
  // Per block: 2 RMSNorms (2C), q (C x HD), k and v (C x KV D each), o (HD x C), gate, up, down
  // (3 C I), q/k norms (2D) and q/k/v biases (HD + 2 KV D) when present.
  s.params_per_block = 2 * C + 2 * C * H * D + 2 * C * KV * D + 3 * C * I + (c.qk_norm ? 2 * D : 0) +
                       (c.qkv_bias ? H * D + 2 * KV * D : 0);
  s.params = vocab * C + c.n_layer * s.params_per_block + C + (c.tied_embeddings ? 0 : vocab * C);
  set_decoder_shape(s, c.n_layer, H, C, c.seq_len, vocab);
  s.kv_heads = KV;
  s.head_dim = D;
  s.intermediate = I;
  s.gated_mlp = true;
  s.rotary = true;
  const double T = static_cast<double>(c.seq_len), Cd = static_cast<double>(C), L = static_cast<double>(c.n_layer);
  const double Hd = static_cast<double>(H * D), KVd = static_cast<double>(KV * D), Id = static_cast<double>(I);
  // Matmul FLOPs per token and layer: q, k, v, o (2C(2HD + 2 KV D)), the MLP (6CI), attention
  // scores and their use (4 T HD); the output layer 2CV; fwd + bwd = 3x fwd.
  const double per_layer = 2.0 * Cd * (2.0 * Hd + 2.0 * KVd) + 6.0 * Cd * Id + 4.0 * T * Hd;
  s.flops_per_sample = 3.0 * T * (L * per_layer + 2.0 * Cd * static_cast<double>(vocab));
  set_activation_bytes(s);
  return s;
}

bool decoder_stats(const ModelConfig& c, int64_t vocab, ModelStats* out) {
  if (!c.plugin.empty()) return false;
  if (c.name == "gpt") {
    *out = gpt_stats(c.n_layer, c.n_head, c.n_embd, c.seq_len, vocab, c.tied_embeddings, c.dropout, c.max_positions);
    return true;
  }
  if (c.name == "llama") {
    *out = llama_stats(c, vocab);
    return true;
  }
  return false;
}

}  // namespace gtrain
