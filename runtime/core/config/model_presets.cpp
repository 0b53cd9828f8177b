// model_presets.cpp: the published shapes (each model's config.json on the Hugging Face hub).
#include "runtime/core/config/model_presets.h"

#include <functional>
#include <map>

#include "runtime/core/errors.h"

namespace gtrain {
namespace {

struct Preset {
  const char* name;
  std::function<void(ModelConfig&)> set;
};

void llama3(ModelConfig& c, int64_t layers, int64_t heads, int64_t width, int64_t mlp, bool tied, double factor) {
  c.name = "llama";
  c.n_layer = layers, c.n_head = heads, c.n_kv_head = 8, c.n_embd = width, c.head_dim = width / heads;
  c.intermediate_size = mlp, c.vocab = 128256, c.seq_len = 2048, c.tied_embeddings = tied;
  c.norm_eps = 1e-5, c.rope_theta = 500000.0, c.rope_scaling = "llama3";
  c.rope_factor = factor, c.rope_low_freq_factor = 1.0, c.rope_high_freq_factor = 4.0;
  c.rope_original_max_positions = 8192;
  c.qk_norm = false, c.qkv_bias = false;
  // What generation and an export need, as the base models' config.json gives them.
  c.max_positions = 131072, c.bos_token_id = 128000, c.eos_token_id = {128001};
}

void qwen3(ModelConfig& c, int64_t layers, int64_t heads, int64_t width, int64_t mlp, bool tied) {
  c.name = "llama";
  c.n_layer = layers, c.n_head = heads, c.n_kv_head = 8, c.n_embd = width, c.head_dim = 128;
  c.intermediate_size = mlp, c.vocab = 151936, c.seq_len = 2048, c.tied_embeddings = tied;
  c.norm_eps = 1e-6, c.rope_theta = 1000000.0, c.rope_scaling = "none";
  c.qk_norm = true, c.qkv_bias = false;
  c.max_positions = 40960, c.bos_token_id = 151643, c.eos_token_id = {151645};
}

const std::vector<Preset>& presets() {
  static const std::vector<Preset> all = {
      {"llama-3.2-1b", [](ModelConfig& c) { llama3(c, 16, 32, 2048, 8192, true, 32.0); }},
      {"llama-3.2-3b", [](ModelConfig& c) { llama3(c, 28, 24, 3072, 8192, true, 32.0); }},
      {"llama-3.1-8b", [](ModelConfig& c) { llama3(c, 32, 32, 4096, 14336, false, 8.0); }},
      {"qwen3-0.6b", [](ModelConfig& c) { qwen3(c, 28, 16, 1024, 3072, true); }},
      {"qwen3-1.7b", [](ModelConfig& c) { qwen3(c, 28, 16, 2048, 6144, true); }},
      {"qwen3-8b", [](ModelConfig& c) { qwen3(c, 36, 32, 4096, 12288, false); }},
      // Small shapes of the same families, for tests and CPU examples (the vocabulary from the data).
      {"llama-tiny",
       [](ModelConfig& c) {
         llama3(c, 4, 4, 128, 384, true, 8.0);
         c.n_kv_head = 2, c.vocab = 0, c.seq_len = 128, c.rope_original_max_positions = 64;
         c.max_positions = 0, c.bos_token_id = -1, c.eos_token_id.clear();  // no tokenizer: bytes
       }},
      {"qwen3-tiny",
       [](ModelConfig& c) {
         qwen3(c, 4, 4, 128, 256, false);
         c.n_kv_head = 2, c.head_dim = 64, c.vocab = 0, c.seq_len = 128;
         c.max_positions = 0, c.bos_token_id = -1, c.eos_token_id.clear();
       }},
  };
  return all;
}

}  // namespace

std::vector<std::string> model_preset_names() {
  std::vector<std::string> out;
  for (const auto& p : presets()) out.push_back(p.name);
  return out;
}

ModelConfig apply_model_preset(const ModelConfig& base, const std::string& name) {
  if (name.empty()) return base;
  for (const auto& p : presets()) {
    if (name == p.name) {
      ModelConfig c = base;
      p.set(c);
      c.preset = name;
      return c;
    }
  }
  std::string list;
  for (const auto& n : model_preset_names()) list += (list.empty() ? "" : ", ") + n;
  throw ConfigError("model.preset: unknown preset '" + name + "' (known: " + list + ")");
}

}  // namespace gtrain
