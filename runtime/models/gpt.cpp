// gpt.cpp: the decoder-only transformer.
#include "runtime/models/gpt.h"

#include <cmath>

#include "runtime/common/torch_compat.h"
#include "runtime/core/errors.h"
#include "runtime/models/activations.h"
#include "runtime/models/fused_ops.h"
#include "runtime/models/keyed_dropout.h"
#include "runtime/models/token_layout.h"

namespace gtrain {

CausalSelfAttentionImpl::CausalSelfAttentionImpl(int64_t n_embd, int64_t n_head_, double dropout_, uint64_t site_)
    : n_head(n_head_), dropout(dropout_), site(site_) {
  qkv = register_module("qkv", ColumnParallelLinear(n_embd, 3 * n_embd, true, 3));
  proj = register_module("proj", RowParallelLinear(n_embd, n_embd, true));
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x, KvCache* cache, int64_t block) {
  const int64_t B = x.size(0), T = x.size(1), C3 = qkv->local_out();
  const int64_t C = C3 / 3, hd = C / n_head;  // this rank's heads and width
  auto parts = qkv->forward(x).split(C, -1);
  auto heads = [&](const torch::Tensor& t) { return t.view({B, T, n_head, hd}).transpose(1, 2); };
  torch::Tensor y;
  const TokenLayout& layout = current_token_layout();
  auto drop = [&](const torch::Tensor& p) { return keyed_dropout(p, dropout, site, /*train=*/true, head_offset); };
  const bool dropping = dropout > 0 && is_training();
  if (cache) {
    y = cached_attention(block, heads(parts[0]), heads(parts[1]), heads(parts[2]), *cache);
  } else if (layout.packed()) {  // rows of several documents: attention stays inside each
    y = compat::masked_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]), layout.mask(),
                                 dropping ? drop : std::function<torch::Tensor(const torch::Tensor&)>());
  } else if (dropping) {
    // The explicit softmax, so the probabilities get layout-independent masks (SDPA draws its own).
    y = compat::math_causal_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]), drop);
  } else {
    y = compat::causal_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]));
  }
  y = y.transpose(1, 2).contiguous().view({B, T, C});
  y = proj->forward(y);
  return keyed_dropout(y, dropout, site + 1, is_training());
}

GptMlpImpl::GptMlpImpl(int64_t n_embd, double dropout_, uint64_t site_) : dropout(dropout_), site(site_) {
  fc = register_module("fc", ColumnParallelLinear(n_embd, 4 * n_embd, true));
  proj = register_module("proj", RowParallelLinear(4 * n_embd, n_embd, true));
}

torch::Tensor GptMlpImpl::forward(const torch::Tensor& x) {
  if (fused_op_applies(FusedOp::gelu, x)) {  // the bias added by the GELU kernel (fused_ops.h)
    auto a = fused_bias_gelu(fc->forward_unbiased(x), fc->bias_as_added(x));
    return keyed_dropout(proj->forward(a), dropout, site, is_training());
  }
  return keyed_dropout(proj->forward(gelu_tanh(fc->forward(x))), dropout, site, is_training());
}

namespace {

// ln(x) by the fused kernel (no residual add).
torch::Tensor fused_layer_norm(const torch::nn::LayerNorm& ln, const torch::Tensor& x) {
  return fused_add_norm(x, torch::Tensor(), ln->weight, ln->bias, ln->options.eps(), /*rms=*/false,
                        fused_norm_out_type(x, ln->weight))
      .out;
}

}  // namespace

GptBlockImpl::GptBlockImpl(int64_t n_embd, int64_t n_head, double dropout, int64_t layer) {
  const uint64_t site = 1 + 3 * static_cast<uint64_t>(layer);
  ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({n_embd})));
  attn = register_module("attn", CausalSelfAttention(n_embd, n_head, dropout, site));
  ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({n_embd})));
  mlp = register_module("mlp", GptMlp(n_embd, dropout, site + 2));
}

torch::Tensor GptBlockImpl::forward(const torch::Tensor& x, KvCache* cache, int64_t block) {
  if (fused_op_applies(FusedOp::norm, x) && ln1->options.elementwise_affine()) {
    // The second residual add inside ln2's kernel, which returns the sum and its norm.
    auto a = attn->forward(fused_layer_norm(ln1, x), cache, block);
    auto s = fused_add_norm(x, a, ln2->weight, ln2->bias, ln2->options.eps(), /*rms=*/false,
                            fused_norm_out_type(x, ln2->weight));
    return s.sum + mlp->forward(s.out);
  }
  auto y = x + attn->forward(ln1->forward(x), cache, block);
  return y + mlp->forward(ln2->forward(y));
}

Gpt::Gpt(const ModelConfig& c, const DataSpec& spec) : DecoderLm(c, spec, "gpt") {
  if (c.n_embd % c.n_head != 0) {
    throw ConfigError("model.n_head = " + std::to_string(c.n_head) +
                      " must divide model.n_embd = " + std::to_string(c.n_embd));
  }
  if (c.max_positions > 0 && c.seq_len > c.max_positions) {
    throw ConfigError("model.seq_len = " + std::to_string(c.seq_len) + " exceeds model.max_positions = " +
                          std::to_string(c.max_positions) + ", the rows of gpt's position table",
                      "set model.seq_len to at most " + std::to_string(c.max_positions));
  }
  wte = register_module("wte", VocabParallelEmbedding(vocab_, c.n_embd));
  // A shorter seq_len trains the table's first rows; the rest are kept for export (GPT-2's 1024).
  wpe = register_module("wpe", torch::nn::Embedding(c.context_length(), c.n_embd));
  h = register_module("h", torch::nn::ModuleList());
  for (int64_t i = 0; i < c.n_layer; ++i) h->push_back(GptBlock(c.n_embd, c.n_head, c.dropout, i));
  ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.n_embd})));
  if (!c.tied_embeddings) {
    lm_head = register_module("lm_head", ColumnParallelLinear(c.n_embd, vocab_, false));
  }
  std::vector<std::shared_ptr<torch::nn::Module>> blocks;
  for (const auto& b : *h) blocks.push_back(b);
  set_layers(wte, lm_head, std::move(blocks));
  // GPT-2 initialisation: N(0, std) weights, zero biases, residual projections scaled by depth.
  torch::NoGradGuard ng;
  const double resid_std = c.init_std / std::sqrt(2.0 * static_cast<double>(c.n_layer));
  for (auto& kv : named_parameters()) {
    const std::string& name = kv.key();
    auto& p = kv.value();
    if (name.find("ln") != std::string::npos) {
      if (name.size() >= 6 && name.compare(name.size() - 6, 6, "weight") == 0)
        p.fill_(1.0);
      else
        p.zero_();
    } else if (name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0) {
      p.zero_();
    } else if (name.find("proj.weight") != std::string::npos) {
      p.normal_(0.0, resid_std);
    } else {
      p.normal_(0.0, c.init_std);
    }
  }
}

torch::Tensor Gpt::embed(const torch::Tensor& idx, int64_t offset) {
  const int64_t T = idx.size(1);
  // Packed rows: each document's tokens at positions 0, 1, ... (token_layout.h).
  const TokenLayout& layout = current_token_layout();
  auto pos = layout.packed() && offset == 0
                 ? layout.positions
                 : torch::arange(offset, offset + T, torch::TensorOptions().dtype(torch::kLong).device(idx.device()));
  auto x = wte->forward(idx) + wpe->forward(pos);
  return keyed_dropout(x, config_.dropout, /*site=*/0, is_training());
}

torch::Tensor Gpt::final_norm(const torch::Tensor& x) {
  if (fused_op_applies(FusedOp::norm, x)) return fused_layer_norm(ln_f, x);
  return ln_f->forward(x);
}

torch::Tensor Gpt::block_forward(int64_t i, const torch::Tensor& x, KvCache* cache) {
  return h[i]->as<GptBlock>()->forward(x, cache, i);
}

std::vector<std::string> Gpt::pipeline_outer_parameters(bool head) {
  if (!head) return {"wte.weight", "wpe.weight"};
  return {"ln_f.weight", "ln_f.bias", config_.tied_embeddings ? "wte.weight" : "lm_head.weight"};
}

void Gpt::shard_tensor_parallel(std::shared_ptr<Communicator> tp) {
  const int64_t n = tp ? tp->size() : 1;
  if (n == 1) return;
  if (config_.n_head % n != 0) {
    throw ConfigError("tp = " + std::to_string(n) + " must divide model.n_head = " + std::to_string(config_.n_head));
  }
  shard_decoder(std::move(tp));
  for (const auto& b : *h) {
    auto& attn = *b->as<GptBlock>()->attn;
    attn.n_head = config_.n_head / n;
    attn.head_offset = tp_.rank() * attn.n_head;
  }
}

ModelStats Gpt::stats(const DataSpec& spec) const {
  ModelStats s = gpt_stats(config_.n_layer, config_.n_head, config_.n_embd, config_.seq_len, vocab_,
                           config_.tied_embeddings, config_.dropout, config_.max_positions);
  s.params = num_parameters();  // equal to the formula; counted so a change to the module shows
  return s;
}

}  // namespace gtrain
