// model_stats.h: what a model tells the planner and the metrics (ModelStats), what a dataset
// tells a model (DataSpec), and the GPT size formulas: plain structs, no torch, so the planner
// and the plan command can size a 13B model without building it.
#pragma once

#include <cstdint>
#include <vector>

namespace gtrain {

// What a dataset tells a model about its samples.
struct DataSpec {
  std::vector<int64_t> input_shape;  // one sample's input: {1, 28, 28}, {features} or {seq_len}
  int64_t num_classes = 0;           // classification: number of classes
  int64_t vocab = 0;                 // token data: vocabulary size
  bool tokens = false;               // inputs are token ids and targets the next tokens
  int64_t tokens_per_sample() const { return tokens ? input_shape.at(0) : 0; }
};

// Sizes the planner and the metrics need.
struct ModelStats {
  int64_t params = 0;                      // trainable parameters
  double flops_per_sample = 0;             // forward + backward
  double activation_bytes_per_sample = 0;  // fp32 activations kept for backward, no recompute
  double recompute_bytes_per_sample = 0;   // activations kept with per-block recompute
  int64_t blocks = 0;                      // blocks a pipeline can split (0 = not splittable)
  int64_t params_per_block = 0;            // parameters in one block (0 = unknown)
  // Transformer shape, for tensor/pipeline sizing (0 = not a transformer).
  int64_t heads = 0;     // attention heads (tensor parallel splits these)
  int64_t hidden = 0;    // model width (n_embd)
  int64_t seq_len = 0;   // tokens per sample
  int64_t vocab = 0;     // vocabulary size (output layer width)
  double dropout = 0.0;  // attention dropout (decides the attention kernel)
  // How many [H, T, T] score-sized tensors backward keeps per block: 1 for LibTorch 1.13's explicit
  // softmax (its output; the scores before it are freed), 2.25 with dropout, which always takes the
  // explicit softmax (softmax output, dropped output, byte mask), 0 for SDPA's flash and
  // memory-efficient kernels (a [H, T] log-sum-exp; the rest is recomputed). gpt_stats assumes the
  // explicit softmax; the planner sets it for this build (attention_score_tensors()).
  double attention_score_tensors = 1.0;
  // Llama-family shape (0 / false: gpt's, C / heads wide heads, a 4C GELU MLP).
  int64_t kv_heads = 0;      // key/value heads (grouped-query attention)
  int64_t head_dim = 0;      // width of one head
  int64_t intermediate = 0;  // MLP width
  bool gated_mlp = false;    // SwiGLU: gate and up projections, their product kept for backward
  bool rotary = false;       // rotary position embeddings: the rotated q and k are kept too
  bool supports_tp = false;  // the model can be split by tensor parallel
  bool supports_pp = false;  // the model can be split into pipeline stages

  bool is_transformer() const { return heads > 0 && hidden > 0 && seq_len > 0; }
};

// A GPT's stats from its shape alone (parameters, FLOPs, activations), without building it;
// `positions` rows of the position table (0 = seq_len).
ModelStats gpt_stats(int64_t n_layer, int64_t n_head, int64_t n_embd, int64_t seq_len, int64_t vocab,
                     bool tied_embeddings, double dropout = 0.0, int64_t positions = 0);

struct ModelConfig;

// A llama's stats (runtime/models/llama.h) from its config and vocabulary, without building it.
ModelStats llama_stats(const ModelConfig& config, int64_t vocab);

// The stats of a built-in decoder (gpt, llama) from its config; false for other models.
bool decoder_stats(const ModelConfig& config, int64_t vocab, ModelStats* out);

// How many [H, T, T] tensors this build's causal attention (runtime/common/torch_compat.h) keeps per
// block for backward: LibTorch 1.13's explicit softmax always keeps some; 2.x (SDPA,
// GTRAIN_TORCH_SDPA) only with dropout, whose layout-independent masks (runtime/models/
// keyed_dropout.h) need the explicit softmax on every device.
double attention_score_tensors(double dropout);

// The most fp32 logits one block of gpt's fused output layer + loss (runtime/models/fused_loss.h)
// holds: 64 MiB on CPU; 512 MiB on a GPU, where every block also reads and writes the whole fp32
// weight gradient [V, C] once (385 MB for GPT-2), so that GPT-2 124M at batch 16 takes 7 blocks,
// not 49, and that traffic stays a fraction of a millisecond.
double fused_loss_block_bytes(bool gpu);

// Rows a block for `rows` rows of `vocab` logits within fused_loss_block_bytes(gpu), balanced over
// the fewest blocks that fit, so that the last block is not a sliver.
int64_t fused_loss_block_rows(int64_t rows, int64_t vocab, bool gpu);

// Activation elements (not bytes) one sample keeps for backward on one rank of a tensor-parallel
// group of `tp`, for one transformer block: about 4TC replicated (LayerNorm inputs and outputs) +
// (12TC + kHT^2)/tp (q, k, v, attention output, MLP input/output, k = attention_score_tensors
// softmax-sized tensors; HT for the flash kernels' log-sum-exp when k = 0).
double transformer_block_activation_elements(const ModelStats& s, int64_t tp);

// Activation elements outside the blocks: final norm input/output and the logits with their
// log-softmax (2TC + 2TV/tp).
double transformer_outer_activation_elements(const ModelStats& s, int64_t tp);

}  // namespace gtrain
