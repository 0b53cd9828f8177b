// decoder_lm.h: DecoderLm, what the decoder-only language models (gpt, llama) share: token ids in,
// an ordered list of blocks that pipeline parallel splits and recompute replays, a final norm, and
// an output layer tied to the vocabulary-parallel embedding or its own column-parallel head, with
// the fused output-layer loss and the vocabulary-parallel cross-entropy under tensor parallel.
#pragma once

#include <optional>

#include "runtime/models/model.h"
#include "runtime/models/parallel_layers.h"
#include "runtime/models/recompute.h"

namespace gtrain {

class Distillation;

// Keys and values a block's attention has seen, for generation one token at a time: [B, heads,
// tokens so far, head width] each, grown by every call (undefined before the first).
struct KvCache {
  std::vector<torch::Tensor> keys, values;  // one per block
  int64_t length = 0;                       // tokens already in the cache
};

// Causal attention of q [B, H, T, D] at positions cache.length.. over the cached keys and values of
// block `block` and k, v [B, KV, T, D] (appended to the cache); each of the KV heads serves H / KV
// query heads in turn.
torch::Tensor cached_attention(int64_t block, const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               KvCache& cache);

class DecoderLm : public Model {
 public:
  torch::Tensor forward(const torch::Tensor& idx) override;  // [B, T] int64 -> [B, T, vocab]
  std::vector<std::shared_ptr<torch::nn::Module>> blocks() override;
  // The summed loss of the targets the token layout trains (runtime/models/token_layout.h; all of
  // them for plain windows) divided by model.seq_len: a full row of text weighs one sample, and the
  // trainer's divisor (model.seq_len / the trained targets of the global batch) makes the step's
  // loss the mean over the global batch's trained targets, however rows are padded or split.
  torch::Tensor loss_sum(const torch::Tensor& output, const torch::Tensor& target) override;
  torch::Tensor correct(const torch::Tensor& output, const torch::Tensor& target) override;
  // With fused loss on (and tp = 1): the output layer and cross-entropy in row blocks
  // (runtime/models/fused_loss.h), the same loss without whole logits.
  torch::Tensor train_loss_sum(const torch::Tensor& idx, const torch::Tensor& target) override;
  torch::Tensor pipeline_head_loss_sum(const torch::Tensor& x, const torch::Tensor& target) override;
  // With distillation: the combined loss (runtime/models/distillation.h) of the whole logits.
  torch::Tensor train_loss_of(const torch::Tensor& output, const torch::Tensor& input,
                              const torch::Tensor& target) override;
  torch::Tensor pipeline_embed(const torch::Tensor& idx) override;
  torch::Tensor pipeline_block(int64_t i, const torch::Tensor& x) override;
  torch::Tensor pipeline_head(const torch::Tensor& x) override;  // logits: [B, T, vocab / tp]
  std::vector<int64_t> pipeline_activation_shape(const torch::Tensor& idx) override;
  void set_recompute(bool on) override { recompute_ = on; }
  void set_fused_loss(bool on) { fused_loss_ = on; }
  // Distillation from a frozen teacher or its cache (an online teacher without pipeline parallel):
  // the training loss then takes the whole logits (no fused loss; under tp every rank of the group
  // gathers them and computes the same loss, keeping its slice's gradient) and adds the teacher's
  // term; nullptr = cross-entropy alone.
  void set_distillation(std::shared_ptr<Distillation> d) { distill_ = std::move(d); }
  const TpGroup& tp_group() const { return tp_; }  // the group shard_tensor_parallel split it over
  // An online teacher's input on the pipeline's last stage (which never embeds the ids).
  void set_loss_input(const torch::Tensor& input) override;

  // Logits [B, T, vocab] of `idx`, the T tokens that follow the cache's, attending to the cache,
  // which then holds them too (generation; one device, no tensor or pipeline parallel, no grad).
  torch::Tensor decode(const torch::Tensor& idx, KvCache& cache);

  const ModelConfig& config() const { return config_; }
  int64_t vocab() const { return vocab_; }

 protected:
  // Checks the data and the vocabulary for model `kind` ("gpt", "llama").
  DecoderLm(const ModelConfig& config, const DataSpec& spec, const std::string& kind);

  // The subclass's layers: block i on x ([B, T, C] -> [B, T, C]); with `cache`, at positions
  // cache->length.. and extending cache entry i.
  virtual torch::Tensor block_forward(int64_t i, const torch::Tensor& x, KvCache* cache) = 0;
  virtual torch::Tensor final_norm(const torch::Tensor& x) = 0;
  // Token (and position) embeddings of tokens at positions offset.. (before the first block).
  virtual torch::Tensor embed(const torch::Tensor& idx, int64_t offset) = 0;

  // Called by the subclass's constructor once its modules are registered: the embedding (also the
  // tied output layer), the untied head (nullptr when tied) and the blocks in order.
  void set_layers(VocabParallelEmbedding embedding, ColumnParallelLinear head,
                  std::vector<std::shared_ptr<torch::nn::Module>> blocks);
  // Tensor parallel over `tp`: the subclass first checks its own factors (heads), then calls this.
  void shard_decoder(std::shared_ptr<Communicator> tp);
  void check_input_length(int64_t tokens) const;

  ModelConfig config_;
  int64_t vocab_ = 0;
  TpGroup tp_;

 private:
  torch::Tensor trunk(const torch::Tensor& idx);  // embedding and every block: [B, T, C]
  const torch::Tensor& output_weight() const;

  std::string kind_;
  bool recompute_ = false;
  bool fused_loss_ = false;
  std::shared_ptr<Distillation> distill_;
  // The ids pipeline_embed last embedded, or set_loss_input gave: an online teacher's input where
  // the loss sees only the last block's output (ZeRO-3's gathered forward, the pipeline's last stage).
  torch::Tensor distill_ids_;
  VocabParallelEmbedding embedding_{nullptr};
  ColumnParallelLinear head_{nullptr};
  std::vector<std::shared_ptr<torch::nn::Module>> blocks_;
  std::vector<BlockFunction> block_fns_;  // one per block, for recompute (stable addresses)
};

}  // namespace gtrain
