// hf_config.h: a Hugging Face model directory's config.json read into a ModelConfig and written from
// one (torch-free: the launcher resolves [model] from it before any rank starts).
//
// Families: GPT-2 (GPT2LMHeadModel, gtrain's "gpt"), and Llama, Qwen2, Qwen3 (LlamaForCausalLM,
// Qwen2ForCausalLM, Qwen3ForCausalLM, gtrain's "llama": Qwen2 adds q/k/v biases, Qwen3 q/k norms).
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/core/config/model_config.h"

namespace gtrain {

enum class HfFamily { gpt2, llama, qwen2, qwen3 };

const char* hf_architecture(HfFamily f);  // "GPT2LMHeadModel", "LlamaForCausalLM", ...
const char* hf_model_type(HfFamily f);    // "gpt2", "llama", "qwen2", "qwen3"

// One [model] key that config.json decides, with where it came from (for messages).
struct HfDerivedKey {
  std::string key;       // the [model] key: "n_layer"
  std::string hf_key;    // config.json's: "num_hidden_layers"
  std::string hf_value;  // its value there, as JSON text: "2"
};

struct HfModelShape {
  std::string config_path;  // <dir>/config.json
  HfFamily family = HfFamily::gpt2;
  ModelConfig model;          // name "gpt" or "llama", every derived key set
  int64_t max_positions = 0;  // the context it was made for (n_positions, max_position_embeddings; 0 = not given)
  std::vector<HfDerivedKey> derived;  // the keys config.json decides, name first
};

// Whether `path` is a Hugging Face model directory: a directory holding config.json (gtrain's run and
// checkpoint directories hold config.toml and manifest.json instead).
bool is_hf_model_dir(const std::string& path);

// The safetensors files of a Hugging Face directory: model.safetensors, or the shards
// model.safetensors.index.json names (each once, in the index's order), with `index` filled with
// tensor -> file when there is an index. Throws ConfigError naming the directory or the index: neither
// file, an index that is not JSON, a shard it names that is not there.
std::vector<std::string> hf_safetensors_files(const std::string& dir,
                                              std::map<std::string, std::string>* index = nullptr);

// Checks a Hugging Face directory before any rank starts: config.json (read_hf_config) and every
// shard's safetensors header. Throws ConfigError naming the file (and tensor).
void check_hf_model_dir(const std::string& dir);

// Reads <dir>/config.json onto `base` (keys config.json does not decide, such as llama's seq_len,
// keep base's values). Throws ConfigError naming the file and the key: an unknown architecture, a
// missing or mistyped size, a feature gtrain's models do not have (another activation or rope type,
// sliding windows, an o_proj bias).
HfModelShape read_hf_config(const std::string& dir, const ModelConfig& base = {});

// Sets `model`'s keys from the Hugging Face directory `dir`: those not in `given` (the [model] keys
// the file, environment or --set gave) take config.json's value; a given one that disagrees is a
// problem "<where>: model.n_layer = 4 but <dir>/config.json has num_hidden_layers = 2". `where_of`
// names where a key was given. Returns the problems (empty: `model` is resolved).
std::vector<std::string> merge_hf_model_config(ModelConfig& model, const std::set<std::string>& given,
                                               const std::string& dir,
                                               const std::function<std::string(const std::string&)>& where_of);

// The Hugging Face family a gtrain model is exported as: gpt -> GPT-2; llama -> Qwen3 with qk_norm,
// Qwen2 with qkv_bias, Llama otherwise. Throws ConfigError for a model with no Hugging Face form.
HfFamily hf_family_of(const ModelConfig& m);

// config.json for `m` (hf_family_of's architecture); `dtype` is "float32", "bfloat16" or "float16".
// Its context is model.max_positions (0: seq_len, or what llama3 rope scaling stretches to), its
// special tokens the model's bos/eos/pad ids.
nlohmann::json hf_config_json(const ModelConfig& m, const std::string& dtype);

// The model's special tokens as config.json and generation_config.json write them (an absent key:
// none; one eos id as an integer, several as a list).
nlohmann::json hf_special_tokens_json(const ModelConfig& m);

// generation_config.json for `m`: the source model's (an import's, {} when none) with the model's
// special tokens, so transformers' generate() stops at the model's end-of-sequence tokens.
nlohmann::json hf_generation_config_json(const ModelConfig& m, const nlohmann::json& source = {});

// Reads a directory's generation_config.json ({} when it has none; ConfigError when it is not JSON).
nlohmann::json read_hf_generation_config(const std::string& dir);

}  // namespace gtrain
