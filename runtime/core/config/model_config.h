// model_config.h: the [model] section: which registered model to build and its shape.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/config/schema.h"

namespace gtrain {

struct ModelConfig {
  std::string name = "mlp";                  // registered model: mlp, cnn, gpt, or a plugin's
  std::string plugin;                        // shared library that registers more models ("" = none)
  std::vector<int64_t> hidden = {256};       // mlp: hidden layer widths
  std::vector<int64_t> channels = {32, 64};  // cnn: channels of each conv block
  int64_t n_layer = 4;                       // gpt: transformer blocks
  int64_t n_head = 4;                        // gpt: attention heads (tensor parallel splits these)
  int64_t n_embd = 128;                      // gpt: model width
  int64_t seq_len = 128;                     // gpt: context length (tokens per sample)
  int64_t vocab = 0;                         // gpt: vocabulary size (0 = from the data)
  bool tied_embeddings = true;               // gpt: output head shares the token embedding
  double dropout = 0.0;                      // dropout probability (mlp, cnn, gpt)
  double init_std = 0.02;                    // gpt: std of the normal weight init

  template <class V>
  void visit(V& v) {
    v("name", name, "Registered model to build: \"mlp\", \"cnn\", \"gpt\", or a name a plugin registers.");
    v("plugin", plugin, "Path to a shared library that registers more models (\"\" = none).");
    v("hidden", hidden, "mlp: widths of the hidden layers.");
    v("channels", channels, "cnn: output channels of each conv block (conv, ReLU, 2x2 max-pool).");
    v("n_layer", n_layer, "gpt: number of transformer blocks (pipeline parallel splits these).", cfg::at_least(1));
    v("n_head", n_head, "gpt: attention heads; must divide n_embd (tensor parallel splits these).", cfg::at_least(1));
    v("n_embd", n_embd, "gpt: model width.", cfg::at_least(1));
    v("seq_len", seq_len, "gpt: context length in tokens; each sample is seq_len + 1 tokens.", cfg::at_least(1));
    v("vocab", vocab, "gpt: vocabulary size; 0 takes it from the data (256 for text_bytes).", cfg::at_least(0));
    v("tied_embeddings", tied_embeddings, "gpt: the output projection shares the token embedding weights.");
    v("dropout", dropout,
      "Dropout probability; masks follow (seed, sample, layer), so any layout drops the same units.",
      cfg::range(0.0, 0.9));
    v("init_std", init_std, "gpt: standard deviation of the normal weight initialisation.", cfg::greater_than(0.0));
  }
};

// Whether [model] key `key` shapes the parameters of model `name`, so that a resume must keep it:
// `name`, and the keys a built-in model reads (mlp: hidden; cnn: channels; gpt: n_layer, n_head,
// n_embd, seq_len, vocab, tied_embeddings); for a plugin's model every key but plugin, dropout and
// init_std. dropout changes the trajectory only, init_std only the weights before step 0.
inline bool model_key_shapes_parameters(const std::string& name, const std::string& key) {
  if (key == "name") return true;
  if (key == "plugin" || key == "dropout" || key == "init_std") return false;
  if (name == "mlp") return key == "hidden";
  if (name == "cnn") return key == "channels";
  if (name == "gpt") return key != "hidden" && key != "channels";
  return true;
}

// Whether [model] key `key` applies to model `name` (the keys gtrain ckpt inspect and export list):
// name and dropout always; mlp: hidden; cnn: channels; gpt: n_layer, n_head, n_embd, seq_len, vocab,
// tied_embeddings, init_std; a plugin's model: every key but plugin (which ones it reads is its own).
inline bool model_key_applies(const std::string& name, const std::string& key) {
  if (key == "plugin") return false;
  if (key == "name" || key == "dropout") return true;
  if (name == "mlp") return key == "hidden";
  if (name == "cnn") return key == "channels";
  if (name == "gpt") return key != "hidden" && key != "channels";
  return true;
}

}  // namespace gtrain
