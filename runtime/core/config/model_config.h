// model_config.h: the [model] section: which registered model to build and its shape.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/config/schema.h"

namespace gtrain {

struct ModelConfig {
  std::string name = "mlp";                  // registered model: mlp, cnn, gpt, llama, hf, or a plugin's
  std::string preset;                        // a published shape (model_presets.h); explicit keys override it
  std::string plugin;                        // shared library that registers more models ("" = none)
  std::vector<int64_t> hidden = {256};       // mlp: hidden layer widths
  std::vector<int64_t> channels = {32, 64};  // cnn: channels of each conv block
  int64_t n_layer = 4;                       // gpt, llama: transformer blocks
  int64_t n_head = 4;                        // gpt, llama: attention heads (tensor parallel splits these)
  int64_t n_embd = 128;                      // gpt, llama: model width
  int64_t seq_len = 128;                     // gpt, llama: context length (tokens per sample)
  int64_t vocab = 0;                         // gpt, llama: vocabulary size (0 = from the data)
  bool tied_embeddings = true;               // gpt, llama: output head shares the token embedding
  double dropout = 0.0;                      // dropout probability (mlp, cnn, gpt)
  double init_std = 0.02;                    // gpt: std of the normal weight init
  // llama (Llama 3, Qwen2, Qwen3 decoders): the keys below; n_layer, n_head, n_embd, seq_len, vocab,
  // tied_embeddings, dropout and init_std as for gpt.
  int64_t n_kv_head = 0;                       // key/value heads (grouped-query attention); 0 = n_head
  int64_t head_dim = 0;                        // width of one head; 0 = n_embd / n_head
  int64_t intermediate_size = 0;               // SwiGLU MLP width; 0 = 8/3 n_embd rounded up to a multiple of 256
  double norm_eps = 1e-5;                      // RMSNorm epsilon
  double rope_theta = 10000.0;                 // rotary embedding base
  std::string rope_scaling = "none";           // "none" or "llama3" (Llama 3.1+ frequency scaling)
  double rope_factor = 8.0;                    // llama3 scaling: factor
  double rope_low_freq_factor = 1.0;           // llama3 scaling: low_freq_factor
  double rope_high_freq_factor = 4.0;          // llama3 scaling: high_freq_factor
  int64_t rope_original_max_positions = 8192;  // llama3 scaling: original_max_position_embeddings
  bool qk_norm = false;                        // RMSNorm over each head of q and k (Qwen3)
  bool qkv_bias = false;                       // biases on the q, k, v projections (Qwen2)
  // gpt, llama: what generation and a Hugging Face export need (import carries them through).
  int64_t max_positions = 0;          // longest context: gpt's position-table rows, llama's exported; 0 = seq_len
  int64_t bos_token_id = -1;          // beginning-of-sequence token (-1 = none)
  std::vector<int64_t> eos_token_id;  // end-of-sequence tokens: generation stops at any (empty = none)
  int64_t pad_token_id = -1;          // padding token (-1 = none)

  // The context the model was made for: max_positions, or seq_len when it is 0.
  int64_t context_length() const { return max_positions > 0 ? max_positions : seq_len; }

  // The resolved attention head width and MLP width of a llama (0 keys replaced by their rule).
  int64_t llama_head_dim() const { return head_dim > 0 ? head_dim : n_embd / n_head; }
  int64_t llama_kv_heads() const { return n_kv_head > 0 ? n_kv_head : n_head; }
  int64_t llama_intermediate() const {
    if (intermediate_size > 0) return intermediate_size;
    const int64_t h = (8 * n_embd + 2) / 3;
    return (h + 255) / 256 * 256;
  }

  template <class V>
  void visit(V& v) {
    v("name", name,
      "Registered model to build: \"mlp\", \"cnn\", \"gpt\", \"llama\", \"hf\" (the shape of the Hugging Face "
      "directory in checkpoint.init_from), or a name a plugin registers.");
    v("preset", preset,
      "A published shape to start from (llama-3.2-1b, llama-3.2-3b, llama-3.1-8b, qwen3-0.6b, qwen3-1.7b, qwen3-8b, "
      "llama-tiny, qwen3-tiny); keys set here override it. \"\" = none.");
    v("plugin", plugin, "Path to a shared library that registers more models (\"\" = none).");
    v("hidden", hidden, "mlp: widths of the hidden layers.");
    v("channels", channels, "cnn: output channels of each conv block (conv, ReLU, 2x2 max-pool).");
    v("n_layer", n_layer, "gpt, llama: number of transformer blocks (pipeline parallel splits these).",
      cfg::at_least(1));
    v("n_head", n_head, "gpt, llama: attention heads (tensor parallel splits these); gpt: must divide n_embd.",
      cfg::at_least(1));
    v("n_embd", n_embd, "gpt, llama: model width.", cfg::at_least(1));
    v("seq_len", seq_len, "gpt, llama: context length in tokens; each sample is seq_len + 1 tokens.", cfg::at_least(1));
    v("vocab", vocab, "gpt, llama: vocabulary size; 0 takes it from the data (256 for text_bytes).", cfg::at_least(0));
    v("tied_embeddings", tied_embeddings, "gpt, llama: the output projection shares the token embedding weights.");
    v("dropout", dropout,
      "Dropout probability; masks follow (seed, sample, layer), so any layout drops the same units.",
      cfg::range(0.0, 0.9));
    v("init_std", init_std, "gpt, llama: standard deviation of the normal weight initialisation.",
      cfg::greater_than(0.0));
    v("n_kv_head", n_kv_head, "llama: key/value heads (grouped-query attention), dividing n_head; 0 = n_head.",
      cfg::at_least(0));
    v("head_dim", head_dim, "llama: width of one attention head; 0 = n_embd / n_head.", cfg::at_least(0));
    v("intermediate_size", intermediate_size,
      "llama: width of the SwiGLU MLP; 0 = 8/3 x n_embd rounded up to a multiple of 256.", cfg::at_least(0));
    v("norm_eps", norm_eps, "llama: RMSNorm epsilon.", cfg::greater_than(0.0));
    v("rope_theta", rope_theta, "llama: base of the rotary position embedding's frequencies.", cfg::greater_than(0.0));
    v("rope_scaling", rope_scaling, "llama: \"none\", or \"llama3\" (Llama 3.1+'s frequency scaling, rope_* keys).",
      cfg::one_of({"none", "llama3"}));
    v("rope_factor", rope_factor, "llama3 rope scaling: factor.", cfg::greater_than(0.0));
    v("rope_low_freq_factor", rope_low_freq_factor, "llama3 rope scaling: low_freq_factor.", cfg::greater_than(0.0));
    v("rope_high_freq_factor", rope_high_freq_factor, "llama3 rope scaling: high_freq_factor.", cfg::greater_than(0.0));
    v("rope_original_max_positions", rope_original_max_positions,
      "llama3 rope scaling: original_max_position_embeddings.", cfg::at_least(1));
    v("qk_norm", qk_norm, "llama: RMSNorm over each head of q and k before the rotation (Qwen3).");
    v("qkv_bias", qkv_bias, "llama: biases on the q, k and v projections (Qwen2).");
    v("max_positions", max_positions,
      "gpt, llama: the longest context (gpt: rows of the position table, of which a shorter seq_len uses the "
      "first; llama: max_position_embeddings when exported); 0 = seq_len. A Hugging Face import sets it.",
      cfg::at_least(0));
    v("bos_token_id", bos_token_id, "gpt, llama: beginning-of-sequence token id, for export (-1 = none).",
      cfg::at_least(-1));
    v("eos_token_id", eos_token_id,
      "gpt, llama: end-of-sequence token ids: gtrain sample stops at any, exports carry them ([] = none).");
    v("pad_token_id", pad_token_id, "gpt, llama: padding token id, for export (-1 = none).", cfg::at_least(-1));
  }
};

// Whether [model] key `key` shapes the parameters of model `name`, so that a resume must keep it:
// `name`, and the keys a built-in model reads (mlp: hidden; cnn: channels; gpt: n_layer, n_head,
// n_embd, seq_len, vocab, tied_embeddings); for a plugin's model every key but plugin, dropout and
// init_std. dropout changes the trajectory only, init_std only the weights before step 0.
inline bool is_llama_only_key(const std::string& key) {
  return key == "n_kv_head" || key == "head_dim" || key == "intermediate_size" || key == "norm_eps" ||
         key.rfind("rope_", 0) == 0 || key == "qk_norm" || key == "qkv_bias";
}

// The special tokens: facts for generation and export, not for the parameters or the trajectory.
inline bool is_token_id_key(const std::string& key) {
  return key == "bos_token_id" || key == "eos_token_id" || key == "pad_token_id";
}

inline bool model_key_shapes_parameters(const std::string& name, const std::string& key) {
  if (key == "name") return true;
  if (is_token_id_key(key)) return false;
  if (key == "max_positions") return name == "gpt";  // gpt's position table; llama's export only
  if (key == "plugin" || key == "dropout" || key == "init_std" || key == "preset") return false;
  if (name == "mlp") return key == "hidden";
  if (name == "cnn") return key == "channels";
  if (name == "gpt") return key != "hidden" && key != "channels" && !is_llama_only_key(key);
  // llama: the function too (norm_eps, rope_*), since a resume must compute the same model.
  if (name == "llama") return key != "hidden" && key != "channels";
  return true;
}

// The models gtrain-worker's registry holds before any plugin (runtime/models: register_builtin_models),
// in its order; `gtrain models` lists them without loading LibTorch (a test checks the two agree).
inline const std::vector<std::string>& builtin_model_names() {
  static const std::vector<std::string> names = {"cnn", "gpt", "llama", "mlp"};
  return names;
}

// Whether [model] key `key` applies to model `name` (the keys gtrain ckpt inspect and export list):
// name and dropout always; mlp: hidden; cnn: channels; gpt: n_layer, n_head, n_embd, seq_len, vocab,
// tied_embeddings, init_std; a plugin's model: every key but plugin (which ones it reads is its own).
inline bool model_key_applies(const std::string& name, const std::string& key) {
  if (key == "plugin" || key == "preset") return false;
  if (key == "name" || key == "dropout") return true;
  if (name == "mlp") return key == "hidden";
  if (name == "cnn") return key == "channels";
  if (name == "gpt") return key != "hidden" && key != "channels" && !is_llama_only_key(key);
  if (name == "llama") return key != "hidden" && key != "channels";
  return true;
}

}  // namespace gtrain
