// llama.cpp: the Llama 3 / Qwen decoder.
#include "runtime/models/llama.h"

#include <cmath>

#include "runtime/common/torch_compat.h"
#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/models/fused_ops.h"
#include "runtime/models/keyed_dropout.h"
#include "runtime/models/token_layout.h"

namespace gtrain {

RmsNormImpl::RmsNormImpl(int64_t dim, double eps_) : eps(eps_) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RmsNormImpl::forward(const torch::Tensor& x) {
  if (fused_op_applies(FusedOp::norm, x)) return forward_add(x, torch::Tensor()).out;
  auto h = x.to(torch::kFloat);
  h = h * torch::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return copy_to_tp(weight, group) * h.to(x.scalar_type());
}

AddNormResult RmsNormImpl::forward_add(const torch::Tensor& x, const torch::Tensor& h) {
  const auto w = copy_to_tp(weight, group);
  return fused_add_norm(x, h, w, torch::Tensor(), eps, /*rms=*/true, fused_norm_out_type(x, w));
}

torch::Tensor rotary_inverse_frequencies(const ModelConfig& c) {
  const int64_t dim = c.llama_head_dim();
  auto exponent = torch::arange(0, dim, 2, torch::kLong).to(torch::kFloat) / static_cast<double>(dim);
  auto inv = 1.0 / torch::pow(c.rope_theta, exponent);
  if (c.rope_scaling != "llama3") return inv;
  // transformers' _compute_llama3_parameters, operation for operation.
  const double old_len = static_cast<double>(c.rope_original_max_positions);
  const double low_wavelen = old_len / c.rope_low_freq_factor, high_wavelen = old_len / c.rope_high_freq_factor;
  auto wavelen = 2.0 * M_PI / inv;
  auto scaled = torch::where(wavelen > low_wavelen, inv / c.rope_factor, inv);
  auto smooth = (old_len / wavelen - c.rope_low_freq_factor) / (c.rope_high_freq_factor - c.rope_low_freq_factor);
  auto smoothed = (1 - smooth) * scaled / c.rope_factor + smooth * scaled;
  auto medium = (wavelen < high_wavelen).logical_not().logical_and((wavelen > low_wavelen).logical_not());
  return torch::where(medium, smoothed, scaled);
}

namespace {

// x [B, H, T, D] rotated: x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1].
torch::Tensor apply_rotary(const torch::Tensor& x, const RotaryTables& rope) {
  const int64_t half = x.size(-1) / 2;
  auto rotated = torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  auto cos = rope.cos.to(x.scalar_type()), sin = rope.sin.to(x.scalar_type());
  return x * cos + rotated * sin;
}

}  // namespace

LlamaAttentionImpl::LlamaAttentionImpl(const ModelConfig& c, uint64_t site_)
    : n_head(c.n_head),
      n_kv(c.llama_kv_heads()),
      head_dim(c.llama_head_dim()),
      group_size(c.n_head / c.llama_kv_heads()),
      dropout(c.dropout),
      site(site_) {
  q_proj = register_module("q_proj", ColumnParallelLinear(c.n_embd, n_head * head_dim, c.qkv_bias));
  k_proj = register_module("k_proj", ColumnParallelLinear(c.n_embd, n_kv * head_dim, c.qkv_bias));
  v_proj = register_module("v_proj", ColumnParallelLinear(c.n_embd, n_kv * head_dim, c.qkv_bias));
  o_proj = register_module("o_proj", RowParallelLinear(n_head * head_dim, c.n_embd, false));
  if (c.qk_norm) {
    q_norm = register_module("q_norm", RmsNorm(head_dim, c.norm_eps));
    k_norm = register_module("k_norm", RmsNorm(head_dim, c.norm_eps));
  }
}

torch::Tensor LlamaAttentionImpl::forward(const torch::Tensor& x, const RotaryTables& rope, KvCache* cache,
                                          int64_t block) {
  const int64_t B = x.size(0), T = x.size(1);
  auto in = copy_to_tp(x, q_proj->group);  // one all-reduce of the input's gradient for q, k and v
  auto q = q_proj->forward_copied(in).view({B, T, n_head, head_dim});
  auto k = k_proj->forward_copied(in).view({B, T, n_kv, head_dim});
  auto v = v_proj->forward_copied(in).view({B, T, n_kv, head_dim}).transpose(1, 2);
  if (q_norm) q = q_norm->forward(q), k = k_norm->forward(k);
  if (fused_op_applies(FusedOp::rope, q) && fused_rope_fits(q, rope.cos, rope.sin) &&
      k.scalar_type() == q.scalar_type()) {
    q = fused_rope(q, rope.cos, rope.sin).transpose(1, 2);  // [B, T, H, D] in, [B, H, T, D] out
    k = fused_rope(k, rope.cos, rope.sin).transpose(1, 2);
  } else {
    q = apply_rotary(q.transpose(1, 2), rope);
    k = apply_rotary(k.transpose(1, 2), rope);
  }
  torch::Tensor y;
  if (cache) {
    y = cached_attention(block, q, k, v, *cache);
  } else {
    // Query head h (global) reads key/value head h / group_size. When this rank's query heads read
    // exactly its key/value heads, group_size each in order, the attention kernel shares them;
    // otherwise (replicated key/value heads under tp, or dropout) each query head gets its copy.
    const bool grouped = kv_offset * group_size == head_offset && n_head == n_kv * group_size;
    const bool dropping = dropout > 0 && is_training();
    const TokenLayout& layout = current_token_layout();
    if (!grouped || ((dropping || layout.packed()) && group_size > 1)) {
      std::vector<int64_t> heads(static_cast<size_t>(n_head));
      for (int64_t h = 0; h < n_head; ++h) heads[static_cast<size_t>(h)] = (head_offset + h) / group_size - kv_offset;
      auto idx = torch::tensor(heads, torch::kLong).to(x.device());
      k = k.index_select(1, idx);
      v = v.index_select(1, idx);
    }
    auto drop = [&](const torch::Tensor& p) { return keyed_dropout(p, dropout, site, /*train=*/true, head_offset); };
    if (layout.packed()) {  // rows of several documents: attention stays inside each
      y = compat::masked_attention(q, k, v, layout.mask(),
                                   dropping ? drop : std::function<torch::Tensor(const torch::Tensor&)>());
    } else if (dropping) {
      y = compat::math_causal_attention(q, k, v, drop);
    } else {
      y = compat::causal_gqa_attention(q, k, v);
    }
  }
  y = o_proj->forward(y.transpose(1, 2).contiguous().view({B, T, n_head * head_dim}));
  return keyed_dropout(y, dropout, site + 1, is_training());
}

LlamaMlpImpl::LlamaMlpImpl(int64_t n_embd, int64_t intermediate, double dropout_, uint64_t site_)
    : dropout(dropout_), site(site_) {
  gate_proj = register_module("gate_proj", ColumnParallelLinear(n_embd, intermediate, false));
  up_proj = register_module("up_proj", ColumnParallelLinear(n_embd, intermediate, false));
  down_proj = register_module("down_proj", RowParallelLinear(intermediate, n_embd, false));
}

torch::Tensor LlamaMlpImpl::forward(const torch::Tensor& x) {
  auto in = copy_to_tp(x, gate_proj->group);
  torch::Tensor h;
  if (fused_op_applies(FusedOp::swiglu, x)) {
    auto gate = gate_proj->forward_copied(in);
    auto up = up_proj->forward_copied(in);
    h = fused_op_applies(FusedOp::swiglu, gate) && up.scalar_type() == gate.scalar_type() ? fused_swiglu(gate, up)
                                                                                          : torch::silu(gate) * up;
  } else {
    h = torch::silu(gate_proj->forward_copied(in)) * up_proj->forward_copied(in);
  }
  return keyed_dropout(down_proj->forward(h), dropout, site, is_training());
}

LlamaBlockImpl::LlamaBlockImpl(const ModelConfig& c, int64_t layer) {
  const uint64_t site = 1 + 3 * static_cast<uint64_t>(layer);
  input_layernorm = register_module("input_layernorm", RmsNorm(c.n_embd, c.norm_eps));
  self_attn = register_module("self_attn", LlamaAttention(c, site));
  post_attention_layernorm = register_module("post_attention_layernorm", RmsNorm(c.n_embd, c.norm_eps));
  mlp = register_module("mlp", LlamaMlp(c.n_embd, c.llama_intermediate(), c.dropout, site + 2));
}

torch::Tensor LlamaBlockImpl::forward(const torch::Tensor& x, const RotaryTables& rope, KvCache* cache, int64_t block) {
  if (fused_op_applies(FusedOp::norm, x)) {
    // The residual add inside the second norm's kernel, which returns the sum and its norm.
    auto a = self_attn->forward(input_layernorm->forward(x), rope, cache, block);
    auto s = post_attention_layernorm->forward_add(x, a);
    return s.sum + mlp->forward(s.out);
  }
  auto h = x + self_attn->forward(input_layernorm->forward(x), rope, cache, block);
  return h + mlp->forward(post_attention_layernorm->forward(h));
}

Llama::Llama(const ModelConfig& c, const DataSpec& spec) : DecoderLm(c, spec, "llama") {
  if (c.head_dim == 0 && c.n_embd % c.n_head != 0) {
    throw ConfigError("model.n_head = " + std::to_string(c.n_head) +
                      " must divide model.n_embd = " + std::to_string(c.n_embd) + " unless model.head_dim is set");
  }
  if (c.n_head % c.llama_kv_heads() != 0) {
    throw ConfigError("model.n_kv_head = " + std::to_string(c.llama_kv_heads()) +
                      " must divide model.n_head = " + std::to_string(c.n_head));
  }
  if (c.llama_head_dim() % 2 != 0) {
    throw ConfigError("model.head_dim: rotary embeddings need an even head width, not " +
                      std::to_string(c.llama_head_dim()));
  }
  embed_tokens = register_module("embed_tokens", VocabParallelEmbedding(vocab_, c.n_embd));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.n_layer; ++i) layers->push_back(LlamaBlock(c, i));
  norm = register_module("norm", RmsNorm(c.n_embd, c.norm_eps));
  if (!c.tied_embeddings) {
    lm_head = register_module("lm_head", ColumnParallelLinear(c.n_embd, vocab_, false));
  }
  std::vector<std::shared_ptr<torch::nn::Module>> blocks;
  for (const auto& b : *layers) blocks.push_back(b);
  set_layers(embed_tokens, lm_head, std::move(blocks));
  inv_freq_ = rotary_inverse_frequencies(c);
  // transformers' initialisation: N(0, std) matrices and embeddings, zero biases, unit norms.
  torch::NoGradGuard ng;
  for (auto& kv : named_parameters()) {
    const std::string& name = kv.key();
    auto& p = kv.value();
    if (name.find("norm") != std::string::npos) {
      p.fill_(1.0);
    } else if (ends_with(name, "bias")) {
      p.zero_();
    } else {
      p.normal_(0.0, c.init_std);
    }
  }
}

const RotaryTables& Llama::rotary(int64_t tokens, int64_t offset, const torch::Device& device) {
  if (tokens != rope_tokens_ || offset != rope_offset_ || rope_.cos.device() != device) {
    // transformers' LlamaRotaryEmbedding in fp32: positions x frequencies, each repeated for both halves.
    auto pos = torch::arange(offset, offset + tokens, torch::kLong).to(torch::kFloat);
    auto freqs = pos.unsqueeze(1) * inv_freq_.unsqueeze(0);
    auto emb = torch::cat({freqs, freqs}, -1);
    rope_ = {emb.cos().to(device), emb.sin().to(device)};
    rope_tokens_ = tokens, rope_offset_ = offset;
  }
  return rope_;
}

RotaryTables Llama::rotary_at(const torch::Tensor& positions) const {
  auto freqs = positions.to(torch::kFloat).unsqueeze(-1) * inv_freq_.to(positions.device()).unsqueeze(0);
  auto emb = torch::cat({freqs, freqs}, -1).unsqueeze(1);  // [B, 1, T, head_dim]
  return {emb.cos(), emb.sin()};
}

torch::Tensor Llama::embed(const torch::Tensor& idx, int64_t offset) {
  (void)offset;  // positions enter through the rotary tables
  return keyed_dropout(embed_tokens->forward(idx), config_.dropout, /*site=*/0, is_training());
}

torch::Tensor Llama::block_forward(int64_t i, const torch::Tensor& x, KvCache* cache) {
  const int64_t offset = cache ? cache->length : 0;
  const TokenLayout& layout = current_token_layout();
  if (layout.packed() && !cache) return layers[i]->as<LlamaBlock>()->forward(x, rotary_at(layout.positions), cache, i);
  return layers[i]->as<LlamaBlock>()->forward(x, rotary(x.size(1), offset, x.device()), cache, i);
}

std::vector<std::string> Llama::pipeline_outer_parameters(bool head) {
  if (!head) return {"embed_tokens.weight"};
  return {"norm.weight", config_.tied_embeddings ? "embed_tokens.weight" : "lm_head.weight"};
}

void Llama::shard_tensor_parallel(std::shared_ptr<Communicator> tp) {
  const int64_t n = tp ? tp->size() : 1;
  if (n == 1) return;
  const int64_t H = config_.n_head, KV = config_.llama_kv_heads();
  if (H % n != 0) {
    throw ConfigError("tp = " + std::to_string(n) + " must divide model.n_head = " + std::to_string(H));
  }
  const int64_t I = config_.llama_intermediate();
  if (I % n != 0) {
    throw ConfigError("tp = " + std::to_string(n) +
                      " must divide the MLP width (model.intermediate_size = " + std::to_string(I) + ")");
  }
  const bool split_kv = KV % n == 0;
  for (const auto& b : *layers) {
    auto& attn = *b->as<LlamaBlock>()->self_attn;
    attn.k_proj->replicate = attn.v_proj->replicate = !split_kv;
  }
  shard_decoder(std::move(tp));
  for (const auto& b : *layers) {
    auto& attn = *b->as<LlamaBlock>()->self_attn;
    attn.n_head = H / n;
    attn.head_offset = tp_.rank() * attn.n_head;
    attn.n_kv = split_kv ? KV / n : KV;
    attn.kv_offset = split_kv ? tp_.rank() * attn.n_kv : 0;
    if (attn.q_norm) attn.q_norm->group = attn.k_norm->group = tp_;
  }
}

ModelStats Llama::stats(const DataSpec& spec) const {
  (void)spec;
  ModelStats s = llama_stats(config_, vocab_);
  s.params = num_parameters();  // equal to the formula; counted so a change to the module shows
  return s;
}

}  // namespace gtrain
