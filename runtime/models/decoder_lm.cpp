// decoder_lm.cpp: the decoder-only language model's trunk, head, losses and cached decoding.
#include "runtime/models/decoder_lm.h"

#include <cmath>
#include <limits>

#include "runtime/core/errors.h"
#include "runtime/models/distillation.h"
#include "runtime/models/fused_loss.h"
#include "runtime/models/token_layout.h"

namespace gtrain {

DecoderLm::DecoderLm(const ModelConfig& c, const DataSpec& spec, const std::string& kind) : config_(c), kind_(kind) {
  if (!spec.tokens) {
    throw ConfigError("model.name = \"" + kind +
                      "\" needs token data (data.kind = \"tokens\", \"text_bytes\" or \"synthetic\")");
  }
  vocab_ = c.vocab > 0 ? c.vocab : spec.vocab;
  if (vocab_ < spec.vocab) {
    throw ConfigError("model.vocab = " + std::to_string(c.vocab) + " is smaller than the data's vocabulary (" +
                      std::to_string(spec.vocab) + ")");
  }
}

void DecoderLm::set_layers(VocabParallelEmbedding embedding, ColumnParallelLinear head,
                           std::vector<std::shared_ptr<torch::nn::Module>> blocks) {
  embedding_ = std::move(embedding);
  head_ = std::move(head);
  blocks_ = std::move(blocks);
  block_fns_.clear();
  for (int64_t i = 0; i < static_cast<int64_t>(blocks_.size()); ++i) {
    block_fns_.push_back([this, i](const torch::Tensor& in) { return block_forward(i, in, nullptr); });
  }
}

void DecoderLm::check_input_length(int64_t tokens) const {
  if (tokens > config_.seq_len) {
    throw ConfigError(kind_ + ": input of " + std::to_string(tokens) +
                      " tokens exceeds model.seq_len = " + std::to_string(config_.seq_len));
  }
}

torch::Tensor DecoderLm::forward(const torch::Tensor& idx) {
  return pipeline_head(trunk(idx));
}

torch::Tensor DecoderLm::trunk(const torch::Tensor& idx) {
  auto x = pipeline_embed(idx);
  for (int64_t i = 0; i < static_cast<int64_t>(blocks_.size()); ++i) x = pipeline_block(i, x);
  return x;
}

torch::Tensor DecoderLm::pipeline_embed(const torch::Tensor& idx) {
  set_loss_input(idx);
  check_input_length(idx.size(1));
  return embed(idx, 0);
}

void DecoderLm::set_loss_input(const torch::Tensor& input) {
  if (distill_ && !distill_->cached()) distill_ids_ = input;
}

torch::Tensor DecoderLm::pipeline_block(int64_t i, const torch::Tensor& x) {
  if (recompute_ && is_training() && torch::GradMode::is_enabled()) {
    return recompute_in_backward(block_fns_[i], x);
  }
  return block_forward(i, x, nullptr);
}

const torch::Tensor& DecoderLm::output_weight() const {
  return config_.tied_embeddings ? embedding_->weight : head_->weight;
}

torch::Tensor DecoderLm::pipeline_head(const torch::Tensor& x_in) {
  auto x = final_norm(x_in);
  return config_.tied_embeddings ? embedding_->logits(x) : head_->forward(x);
}

std::vector<int64_t> DecoderLm::pipeline_activation_shape(const torch::Tensor& idx) {
  return {idx.size(0), idx.size(1), config_.n_embd};
}

torch::Tensor DecoderLm::loss_sum(const torch::Tensor& output, const torch::Tensor& target) {
  // The targets the layout trains (all of them for plain token windows); ignored ones left out
  // before the vocabulary-parallel cross-entropy, which has no ignore index.
  auto [logits, t] = trained_rows(output, target);
  const double per_row = static_cast<double>(config_.seq_len);
  if (tp_.size() == 1) {
    namespace F = torch::nn::functional;
    return F::cross_entropy(logits.to(torch::kFloat), t, F::CrossEntropyFuncOptions().reduction(torch::kSum)) / per_row;
  }
  return vocab_parallel_cross_entropy(logits, t, embedding_->vocab_start(), tp_).sum() / per_row;
}

torch::Tensor DecoderLm::train_loss_sum(const torch::Tensor& idx, const torch::Tensor& target) {
  if (distill_) return train_loss_of(forward(idx), idx, target);
  return pipeline_head_loss_sum(trunk(idx), target);
}

torch::Tensor DecoderLm::train_loss_of(const torch::Tensor& output, const torch::Tensor& input,
                                       const torch::Tensor& target) {
  if (!distill_) return loss_sum(output, target);
  auto [logits, t] = trained_rows(output, target);
  return distill_->loss_sum(gather_from_tp(logits, tp_), t, input, target) / static_cast<double>(config_.seq_len);
}

torch::Tensor DecoderLm::pipeline_head_loss_sum(const torch::Tensor& x_in, const torch::Tensor& target) {
  // The engines that reach the loss from the last block's output (ZeRO-3, the pipeline's last
  // stage) add the teacher's term here: a cached teacher needs only the rows' shape and the
  // layout's samples, an online one the ids this rank embedded (ZeRO-3) or was given (the pipeline).
  if (distill_ && distill_->cached()) return train_loss_of(pipeline_head(x_in), x_in, target);
  if (distill_) {
    GT_CHECK(distill_ids_.defined() && distill_ids_.size(0) == x_in.size(0) && distill_ids_.size(1) == x_in.size(1),
             "distillation: the teacher's input ids are not on this rank");
    return train_loss_of(pipeline_head(x_in), distill_ids_, target);
  }
  if (!fused_loss_ || tp_.size() > 1 || !torch::GradMode::is_enabled()) return loss_sum(pipeline_head(x_in), target);
  // Only the trained rows reach the output layer: a prompt's tokens cost no logits.
  auto [x, t] = trained_rows(final_norm(x_in), target);
  return linear_cross_entropy_sum(x, output_weight(), t) / static_cast<double>(config_.seq_len);
}

torch::Tensor DecoderLm::correct(const torch::Tensor& output, const torch::Tensor& target) {
  return Model::correct(gather_last_dim_tp(output, tp_), target);
}

void DecoderLm::shard_decoder(std::shared_ptr<Communicator> tp) {
  const int64_t n = tp ? tp->size() : 1;
  if (vocab_ % n != 0) {
    throw ConfigError("tp = " + std::to_string(n) + " must divide the vocabulary (model.vocab = " +
                      std::to_string(vocab_) + "); set model.vocab to a multiple of " + std::to_string(n));
  }
  tp_.comm = std::move(tp);
  shard_parallel_layers(*this, tp_);
}

std::vector<std::shared_ptr<torch::nn::Module>> DecoderLm::blocks() {
  return blocks_;
}

torch::Tensor cached_attention(int64_t block, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               KvCache& cache) {
  auto& ks = cache.keys.at(block);
  auto& vs = cache.values.at(block);
  ks = ks.defined() ? torch::cat({ks, k}, 2) : k;
  vs = vs.defined() ? torch::cat({vs, v}, 2) : v;
  const int64_t H = q.size(1), T = q.size(2), D = q.size(3), S = ks.size(2), rep = H / ks.size(1);
  auto keys = rep > 1 ? ks.repeat_interleave(rep, 1) : ks;
  auto values = rep > 1 ? vs.repeat_interleave(rep, 1) : vs;
  auto scores = torch::matmul(q, keys.transpose(-2, -1)) / std::sqrt(static_cast<double>(D));
  // Query t sits at position S - T + t and sees keys 0 .. S - T + t.
  auto qpos = torch::arange(S - T, S, torch::TensorOptions().dtype(torch::kLong).device(q.device())).unsqueeze(1);
  auto kpos = torch::arange(S, torch::TensorOptions().dtype(torch::kLong).device(q.device())).unsqueeze(0);
  scores = scores.masked_fill(kpos > qpos, -std::numeric_limits<double>::infinity());
  return torch::matmul(torch::softmax(scores, -1), values);
}

torch::Tensor DecoderLm::decode(const torch::Tensor& idx, KvCache& cache) {
  GT_CHECK(tp_.size() == 1, "decoding runs on one device (tp = 1)");
  torch::NoGradGuard ng;
  const int64_t T = idx.size(1);
  check_input_length(cache.length + T);
  if (cache.keys.empty()) cache.keys.resize(blocks_.size()), cache.values.resize(blocks_.size());
  auto x = embed(idx, cache.length);
  for (int64_t i = 0; i < static_cast<int64_t>(blocks_.size()); ++i) x = block_forward(i, x, &cache);
  cache.length += T;
  return pipeline_head(x);
}

}  // namespace gtrain
