// hf_config.cpp: config.json of GPT-2, Llama, Qwen2 and Qwen3 read into a ModelConfig and written
// from one; the [model] keys it decides merged with those a job file gives.
#include "runtime/core/hf_config.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <variant>

#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/core/safetensors_header.h"

namespace fs = std::filesystem;

namespace gtrain {
namespace {

constexpr const char* kKnownArchitectures = "GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM";

struct FamilyName {
  HfFamily family;
  const char* architecture;
  const char* model_type;
};
constexpr FamilyName kFamilies[] = {{HfFamily::gpt2, "GPT2LMHeadModel", "gpt2"},
                                    {HfFamily::llama, "LlamaForCausalLM", "llama"},
                                    {HfFamily::qwen2, "Qwen2ForCausalLM", "qwen2"},
                                    {HfFamily::qwen3, "Qwen3ForCausalLM", "qwen3"}};

// config.json's values, each read with an error naming the file and the key.
class ConfigJson {
 public:
  ConfigJson(nlohmann::json j, std::string path) : j_(std::move(j)), path_(std::move(path)) {}
  const std::string& path() const { return path_; }
  const nlohmann::json& json() const { return j_; }

  // Present and not null.
  bool has(const std::string& key, const nlohmann::json* in = nullptr) const {
    const nlohmann::json& o = in ? *in : j_;
    return o.contains(key) && !o.at(key).is_null();
  }
  const nlohmann::json& at(const std::string& key, const nlohmann::json* in = nullptr,
                           const std::string& prefix = "") const {
    const nlohmann::json& o = in ? *in : j_;
    if (!has(key, in))
      throw ConfigError(str(path_, ": key '", prefix, key, "' is missing"),
                        "a config.json written by transformers' save_pretrained has it");
    return o.at(key);
  }
  int64_t positive(const std::string& key, const nlohmann::json* in = nullptr, const std::string& prefix = "") const {
    const nlohmann::json& v = at(key, in, prefix);
    if (!v.is_number_integer() || v.get<int64_t>() < 1) fail(prefix + key, v, "a positive integer");
    return v.get<int64_t>();
  }
  double number(const std::string& key, const nlohmann::json* in = nullptr, const std::string& prefix = "") const {
    const nlohmann::json& v = at(key, in, prefix);
    if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>()))
      fail(prefix + key, v, "a positive number");
    return v.get<double>();
  }
  bool boolean(const std::string& key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!j_.at(key).is_boolean()) fail(key, j_.at(key), "true or false");
    return j_.at(key).get<bool>();
  }
  std::string string(const std::string& key, const std::string& fallback, const nlohmann::json* in = nullptr,
                     const std::string& prefix = "") const {
    if (!has(key, in)) return fallback;
    const nlohmann::json& v = (in ? *in : j_).at(key);
    if (!v.is_string()) fail(prefix + key, v, "a string");
    return v.get<std::string>();
  }
  [[noreturn]] void fail(const std::string& key, const nlohmann::json& v, const std::string& expected) const {
    throw ConfigError(str(path_, ": ", key, ": expected ", expected, ", got ", v.dump()));
  }
  [[noreturn]] void unsupported(const std::string& key, const nlohmann::json& v, const std::string& why) const {
    throw ConfigError(str(path_, ": ", key, " = ", v.dump(), ": ", why),
                      "gtrain's gpt and llama models cannot compute this model; it cannot be loaded");
  }

 private:
  nlohmann::json j_;
  std::string path_;
};

// The JSON document in `path` (ConfigError naming the file when it is not JSON).
nlohmann::json read_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  try {
    return nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::parse_error& e) {
    throw ConfigError(str(path, ": invalid JSON: ", first_line(e.what())));
  }
}

ConfigJson load_config_json(const std::string& dir) {
  const std::string path = (fs::path(dir) / "config.json").string();
  std::ifstream probe(path, std::ios::binary);
  if (!probe)
    throw ConfigError(path + ": cannot be read", "checkpoint.init_from must name a Hugging Face model directory");
  nlohmann::json j = read_json_file(path);
  if (!j.is_object()) throw ConfigError(path + ": expected a JSON object, got " + std::string(j.type_name()));
  return ConfigJson(std::move(j), path);
}

HfFamily family_of(const ConfigJson& c) {
  if (c.has("architectures")) {
    const nlohmann::json& a = c.json().at("architectures");
    if (!a.is_array() || a.size() != 1 || !a[0].is_string()) c.fail("architectures", a, "a list of one name");
    const std::string name = a[0].get<std::string>();
    for (const auto& f : kFamilies)
      if (name == f.architecture) return f.family;
    throw ConfigError(
        str(c.path(), ": architectures: unknown architecture '", name, "' (gtrain reads ", kKnownArchitectures, ")"),
        "gtrain's gpt and llama models take GPT-2, Llama 3, Qwen2 and Qwen3 checkpoints");
  }
  const std::string type = c.string("model_type", "");
  for (const auto& f : kFamilies)
    if (type == f.model_type) return f.family;
  throw ConfigError(str(c.path(), ": model_type: unknown model type '", type, "' and no architectures (gtrain reads ",
                        kKnownArchitectures, ")"));
}

// The [model] keys config.json may decide, as members, so one table sets, compares and prints them.
using Member = std::variant<int64_t ModelConfig::*, double ModelConfig::*, bool ModelConfig::*,
                            std::string ModelConfig::*, std::vector<int64_t> ModelConfig::*>;
const std::map<std::string, Member>& derivable() {
  static const std::map<std::string, Member> m = {
      {"name", &ModelConfig::name},
      {"n_layer", &ModelConfig::n_layer},
      {"n_head", &ModelConfig::n_head},
      {"n_embd", &ModelConfig::n_embd},
      {"seq_len", &ModelConfig::seq_len},
      {"vocab", &ModelConfig::vocab},
      {"tied_embeddings", &ModelConfig::tied_embeddings},
      {"n_kv_head", &ModelConfig::n_kv_head},
      {"head_dim", &ModelConfig::head_dim},
      {"intermediate_size", &ModelConfig::intermediate_size},
      {"norm_eps", &ModelConfig::norm_eps},
      {"rope_theta", &ModelConfig::rope_theta},
      {"rope_scaling", &ModelConfig::rope_scaling},
      {"rope_factor", &ModelConfig::rope_factor},
      {"rope_low_freq_factor", &ModelConfig::rope_low_freq_factor},
      {"rope_high_freq_factor", &ModelConfig::rope_high_freq_factor},
      {"rope_original_max_positions", &ModelConfig::rope_original_max_positions},
      {"qk_norm", &ModelConfig::qk_norm},
      {"qkv_bias", &ModelConfig::qkv_bias},
      {"max_positions", &ModelConfig::max_positions},
      {"bos_token_id", &ModelConfig::bos_token_id},
      {"eos_token_id", &ModelConfig::eos_token_id},
      {"pad_token_id", &ModelConfig::pad_token_id},
  };
  return m;
}

std::string literal_of(const ModelConfig& m, const std::string& key) {
  return std::visit([&](auto member) { return cfg::toml_literal(m.*member); }, derivable().at(key));
}

void copy_key(const ModelConfig& from, ModelConfig& to, const std::string& key) {
  std::visit([&](auto member) { to.*member = from.*member; }, derivable().at(key));
}

// A key whose 0 means "by the rule" (n_kv_head = n_head, ...): its resolved value.
int64_t resolved(const ModelConfig& m, const std::string& key) {
  if (key == "n_kv_head") return m.llama_kv_heads();
  if (key == "head_dim") return m.llama_head_dim();
  if (key == "intermediate_size") return m.llama_intermediate();
  return -1;
}

// Sets [model] keys and records where each came from.
class Deriver {
 public:
  Deriver(const ConfigJson& c, HfModelShape& s) : c_(c), s_(s) {}
  template <class T>
  void set(const std::string& key, T ModelConfig::*member, T value, const std::string& hf_key,
           const nlohmann::json& hf_value) {
    s_.model.*member = value;
    // A later source of the same key (generation_config.json after config.json) replaces it.
    auto& ds = s_.derived;
    ds.erase(std::remove_if(ds.begin(), ds.end(), [&](const HfDerivedKey& k) { return k.key == key; }), ds.end());
    ds.push_back({key, hf_key, hf_value.dump()});
  }
  // config.json's `hf_key` (inside `in` when given, named prefix + hf_key) as a positive integer / number.
  void positive(const std::string& key, int64_t ModelConfig::*member, const std::string& hf_key,
                const nlohmann::json* in = nullptr, const std::string& prefix = "") {
    const int64_t v = c_.positive(hf_key, in, prefix);
    set(key, member, v, prefix + hf_key, (in ? *in : c_.json()).at(hf_key));
  }
  void number(const std::string& key, double ModelConfig::*member, const std::string& hf_key,
              const nlohmann::json* in = nullptr, const std::string& prefix = "") {
    const double v = c_.number(hf_key, in, prefix);
    set(key, member, v, prefix + hf_key, (in ? *in : c_.json()).at(hf_key));
  }

 private:
  const ConfigJson& c_;
  HfModelShape& s_;
};

void read_gpt2(const ConfigJson& c, HfModelShape& s) {
  Deriver d(c, s);
  ModelConfig& m = s.model;
  const auto& j = c.json();
  d.positive("n_layer", &ModelConfig::n_layer, "n_layer");
  d.positive("n_head", &ModelConfig::n_head, "n_head");
  d.positive("n_embd", &ModelConfig::n_embd, "n_embd");
  // The position table has n_positions rows; a job may train on a shorter seq_len (its first rows).
  d.positive("max_positions", &ModelConfig::max_positions, "n_positions");
  d.positive("seq_len", &ModelConfig::seq_len, "n_positions");
  d.positive("vocab", &ModelConfig::vocab, "vocab_size");
  const bool tied = c.boolean("tie_word_embeddings", true);  // GPT2Config's default
  d.set("tied_embeddings", &ModelConfig::tied_embeddings, tied, "tie_word_embeddings", nlohmann::json(tied));
  if (m.n_embd % m.n_head != 0)
    throw ConfigError(str(c.path(), ": n_head = ", m.n_head, " does not divide n_embd = ", m.n_embd));
  const std::string act = c.string("activation_function", "gelu_new");
  if (act != "gelu_new")
    c.unsupported("activation_function", j.at("activation_function"),
                  "gtrain's gpt uses GELU's tanh approximation (\"gelu_new\")");
  if (c.has("layer_norm_epsilon") && c.number("layer_norm_epsilon") != 1e-5)
    c.unsupported("layer_norm_epsilon", j.at("layer_norm_epsilon"), "gtrain's gpt uses LayerNorm epsilon 1e-5");
  if (c.has("n_inner") && c.positive("n_inner") != 4 * m.n_embd)
    c.unsupported("n_inner", j.at("n_inner"), str("gtrain's gpt has an MLP of 4 x n_embd = ", 4 * m.n_embd));
  if (!c.boolean("scale_attn_weights", true))
    c.unsupported("scale_attn_weights", j.at("scale_attn_weights"), "gtrain's gpt scales attention by 1/sqrt(head)");
  if (c.boolean("scale_attn_by_inverse_layer_idx", false))
    c.unsupported("scale_attn_by_inverse_layer_idx", j.at("scale_attn_by_inverse_layer_idx"),
                  "gtrain's gpt does not scale attention by layer");
  if (c.boolean("add_cross_attention", false))
    c.unsupported("add_cross_attention", j.at("add_cross_attention"), "gtrain's gpt is decoder-only");
}

// rope_theta and rope scaling: transformers 4 writes rope_theta and rope_scaling at the top level,
// transformers 5 both inside rope_parameters.
void read_rope(const ConfigJson& c, HfModelShape& s) {
  Deriver d(c, s);
  const auto& j = c.json();
  const nlohmann::json* params = c.has("rope_parameters") ? &j.at("rope_parameters") : nullptr;
  if (params && !params->is_object()) c.fail("rope_parameters", *params, "an object");
  if (c.has("rope_theta")) {
    d.number("rope_theta", &ModelConfig::rope_theta, "rope_theta");
  } else if (params && c.has("rope_theta", params)) {
    d.number("rope_theta", &ModelConfig::rope_theta, "rope_theta", params, "rope_parameters.");
  } else {
    d.set("rope_theta", &ModelConfig::rope_theta, 10000.0, "rope_theta", nlohmann::json(10000.0));
  }
  std::string where = "rope_scaling";
  const nlohmann::json* scaling = c.has("rope_scaling") ? &j.at("rope_scaling") : nullptr;
  if (!scaling && params) scaling = params, where = "rope_parameters";
  if (scaling && !scaling->is_object()) c.fail(where, *scaling, "an object");
  const std::string prefix = where + ".";
  std::string type = "default";
  std::string type_key = "rope_type";
  if (scaling) {
    if (!c.has("rope_type", scaling) && c.has("type", scaling)) type_key = "type";
    type = c.string(type_key, "default", scaling, prefix);
  }
  if (type == "default") {
    d.set("rope_scaling", &ModelConfig::rope_scaling, std::string("none"), prefix + type_key, nlohmann::json(type));
    return;
  }
  if (type != "llama3")
    c.unsupported(prefix + type_key, nlohmann::json(type),
                  "gtrain's llama has the default rotary embedding and Llama 3's scaling (\"llama3\") only");
  d.set("rope_scaling", &ModelConfig::rope_scaling, std::string("llama3"), prefix + type_key, nlohmann::json(type));
  d.number("rope_factor", &ModelConfig::rope_factor, "factor", scaling, prefix);
  d.number("rope_low_freq_factor", &ModelConfig::rope_low_freq_factor, "low_freq_factor", scaling, prefix);
  d.number("rope_high_freq_factor", &ModelConfig::rope_high_freq_factor, "high_freq_factor", scaling, prefix);
  d.positive("rope_original_max_positions", &ModelConfig::rope_original_max_positions,
             "original_max_position_embeddings", scaling, prefix);
}

void read_llama(const ConfigJson& c, HfModelShape& s) {
  Deriver d(c, s);
  ModelConfig& m = s.model;
  const auto& j = c.json();
  d.positive("n_layer", &ModelConfig::n_layer, "num_hidden_layers");
  d.positive("n_head", &ModelConfig::n_head, "num_attention_heads");
  if (c.has("num_key_value_heads")) {
    d.positive("n_kv_head", &ModelConfig::n_kv_head, "num_key_value_heads");
  } else {
    d.set("n_kv_head", &ModelConfig::n_kv_head, m.n_head, "num_attention_heads", j.at("num_attention_heads"));
  }
  d.positive("n_embd", &ModelConfig::n_embd, "hidden_size");
  if (c.has("head_dim")) {
    d.positive("head_dim", &ModelConfig::head_dim, "head_dim");
  } else {
    if (m.n_embd % m.n_head != 0)
      throw ConfigError(str(c.path(), ": num_attention_heads = ", m.n_head, " does not divide hidden_size = ", m.n_embd,
                            ", and there is no head_dim"));
    d.set("head_dim", &ModelConfig::head_dim, m.n_embd / m.n_head, "hidden_size", j.at("hidden_size"));
  }
  d.positive("intermediate_size", &ModelConfig::intermediate_size, "intermediate_size");
  d.positive("vocab", &ModelConfig::vocab, "vocab_size");
  const bool tied = c.boolean("tie_word_embeddings", false);  // Llama's, Qwen2's and Qwen3's default
  d.set("tied_embeddings", &ModelConfig::tied_embeddings, tied, "tie_word_embeddings", nlohmann::json(tied));
  const double eps = c.has("rms_norm_eps") ? c.number("rms_norm_eps") : 1e-6;
  d.set("norm_eps", &ModelConfig::norm_eps, eps, "rms_norm_eps", nlohmann::json(eps));
  read_rope(c, s);
  if (c.has("max_position_embeddings"))
    d.positive("max_positions", &ModelConfig::max_positions, "max_position_embeddings");
  const bool qwen2 = s.family == HfFamily::qwen2, qwen3 = s.family == HfFamily::qwen3;
  // Qwen2's q, k and v projections always have biases; Llama's and Qwen3's attention_bias would put
  // one on o_proj too, which gtrain's llama has not.
  if (!qwen2 && c.boolean("attention_bias", false))
    c.unsupported("attention_bias", j.at("attention_bias"), "gtrain's llama has no bias on o_proj");
  d.set("qkv_bias", &ModelConfig::qkv_bias, qwen2, "architectures", nlohmann::json(hf_architecture(s.family)));
  d.set("qk_norm", &ModelConfig::qk_norm, qwen3, "architectures", nlohmann::json(hf_architecture(s.family)));
  if (c.boolean("mlp_bias", false)) c.unsupported("mlp_bias", j.at("mlp_bias"), "gtrain's llama has no MLP biases");
  if (c.boolean("use_sliding_window", false))
    c.unsupported("use_sliding_window", j.at("use_sliding_window"), "gtrain's llama attends over the whole context");
  if (c.has("layer_types")) {
    const auto& types = j.at("layer_types");
    if (!types.is_array()) c.fail("layer_types", types, "a list");
    for (const auto& t : types)
      if (t != "full_attention") c.unsupported("layer_types", t, "gtrain's llama has full attention in every layer");
  }
  const std::string act = c.string("hidden_act", "silu");
  if (act != "silu") c.unsupported("hidden_act", j.at("hidden_act"), "gtrain's llama has a SwiGLU (silu) MLP");
  if (m.n_head % m.n_kv_head != 0)
    throw ConfigError(
        str(c.path(), ": num_key_value_heads = ", m.n_kv_head, " does not divide num_attention_heads = ", m.n_head));
  if (m.head_dim % 2 != 0)
    throw ConfigError(str(c.path(), ": the head width ", m.head_dim, " is odd; rotary embeddings need it even"));
}

// A token id in config.json or generation_config.json: null / absent (none), an integer, or (eos)
// a list of integers.
std::vector<int64_t> token_ids(const ConfigJson& c, const std::string& key, bool list) {
  if (!c.has(key)) return {};
  const nlohmann::json& v = c.json().at(key);
  std::vector<int64_t> out;
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return {v.get<int64_t>()};
  if (list && v.is_array()) {
    for (const auto& x : v) {
      if (!x.is_number_integer() || x.get<int64_t>() < 0) c.fail(key, v, "a token id or a list of token ids");
      out.push_back(x.get<int64_t>());
    }
    return out;
  }
  c.fail(key, v, list ? "a token id or a list of token ids" : "a token id");
}

// The special tokens: config.json's, then generation_config.json's where it has them (what
// transformers' generate() uses).
void read_special_tokens(const ConfigJson& c, const std::string& dir, HfModelShape& s) {
  Deriver d(c, s);
  std::vector<const ConfigJson*> sources = {&c};
  std::optional<ConfigJson> gen;
  const std::string gen_path = (fs::path(dir) / "generation_config.json").string();
  std::error_code ec;
  if (fs::is_regular_file(gen_path, ec)) {
    nlohmann::json j = read_json_file(gen_path);
    if (!j.is_object()) throw ConfigError(gen_path + ": expected a JSON object, got " + std::string(j.type_name()));
    gen.emplace(std::move(j), gen_path);
    sources.push_back(&*gen);
  }
  for (const ConfigJson* src : sources) {
    const std::string where = src == &c ? "" : "generation_config.json: ";
    for (const char* key : {"bos_token_id", "pad_token_id"}) {
      const auto ids = token_ids(*src, key, false);
      if (!ids.empty())
        d.set(key, key[0] == 'b' ? &ModelConfig::bos_token_id : &ModelConfig::pad_token_id, ids[0], where + key,
              src->json().at(key));
    }
    const auto eos = token_ids(*src, "eos_token_id", true);
    if (!eos.empty())
      d.set("eos_token_id", &ModelConfig::eos_token_id, eos, where + "eos_token_id", src->json().at("eos_token_id"));
  }
}

}  // namespace

const char* hf_architecture(HfFamily f) {
  for (const auto& n : kFamilies)
    if (n.family == f) return n.architecture;
  return "";
}

const char* hf_model_type(HfFamily f) {
  for (const auto& n : kFamilies)
    if (n.family == f) return n.model_type;
  return "";
}

bool is_hf_model_dir(const std::string& path) {
  std::error_code ec;
  return !path.empty() && fs::is_directory(path, ec) && fs::is_regular_file(fs::path(path) / "config.json", ec);
}

std::vector<std::string> hf_safetensors_files(const std::string& dir, std::map<std::string, std::string>* index) {
  const fs::path root(dir);
  const std::string single = (root / "model.safetensors").string();
  const std::string index_path = (root / "model.safetensors.index.json").string();
  std::error_code ec;
  if (fs::is_regular_file(single, ec)) return {single};
  if (!fs::is_regular_file(index_path, ec))
    throw ConfigError(str(dir, ": has config.json but neither model.safetensors nor model.safetensors.index.json"),
                      "gtrain reads safetensors; save the model with transformers' save_pretrained "
                      "(safe_serialization, the default)");
  nlohmann::json j = read_json_file(index_path);
  if (!j.is_object() || !j.contains("weight_map") || !j.at("weight_map").is_object())
    throw ConfigError(index_path + ": expected an object with a \"weight_map\" object");
  std::vector<std::string> files;
  for (const auto& [tensor, file] : j.at("weight_map").items()) {
    if (!file.is_string() || file.get<std::string>().empty() || file.get<std::string>().find('/') != std::string::npos)
      throw ConfigError(
          str(index_path, ": weight_map: tensor '", tensor, "': expected a file name, got ", file.dump()));
    const std::string path = (root / file.get<std::string>()).string();
    if (!fs::is_regular_file(path, ec))
      throw ConfigError(
          str(index_path, ": tensor '", tensor, "' is in ", file.get<std::string>(), ", and ", path, " does not exist"),
          "copy every shard the index names into the directory");
    if (index) (*index)[tensor] = path;
    if (std::find(files.begin(), files.end(), path) == files.end()) files.push_back(path);
  }
  if (files.empty()) throw ConfigError(index_path + ": weight_map names no tensor");
  return files;
}

void check_hf_model_dir(const std::string& dir) {
  read_hf_config(dir);
  for (const auto& f : hf_safetensors_files(dir)) {
    try {
      read_safetensors_header(f);
    } catch (const CheckpointError& e) {
      throw ConfigError(e.what(), e.hint());
    }
  }
}

HfModelShape read_hf_config(const std::string& dir, const ModelConfig& base) {
  const ConfigJson c = load_config_json(dir);
  HfModelShape s;
  s.config_path = c.path();
  s.family = family_of(c);
  s.model = base;
  s.model.preset.clear();
  const std::string name = s.family == HfFamily::gpt2 ? "gpt" : "llama";
  s.model.name = name;
  s.derived.push_back({"name", "architectures", nlohmann::json::array({hf_architecture(s.family)}).dump()});
  if (s.family == HfFamily::gpt2) {
    read_gpt2(c, s);
  } else {
    read_llama(c, s);
  }
  read_special_tokens(c, dir, s);
  s.max_positions = s.model.max_positions;
  return s;
}

std::vector<std::string> merge_hf_model_config(ModelConfig& model, const std::set<std::string>& given,
                                               const std::string& dir,
                                               const std::function<std::string(const std::string&)>& where_of) {
  const HfModelShape s = read_hf_config(dir, model);
  ModelConfig out = model;
  for (const auto& d : s.derived)
    if (!given.count(d.key)) copy_key(s.model, out, d.key);
  std::vector<std::string> problems;
  for (const auto& d : s.derived) {
    if (!given.count(d.key)) continue;
    if (literal_of(out, d.key) == literal_of(s.model, d.key)) continue;
    // The job's own special tokens win (a chat fine-tune adds its end-of-turn token); a shorter
    // seq_len than GPT-2's n_positions trains the position table's first rows.
    if (is_token_id_key(d.key)) continue;
    if (d.key == "seq_len" && s.family == HfFamily::gpt2 && out.seq_len <= s.model.max_positions) continue;
    // n_kv_head = 0 (= n_head), head_dim = 0, intermediate_size = 0: their rule's value counts.
    const int64_t rule = resolved(out, d.key);
    if (rule >= 0 && literal_of(out, d.key) == "0" && rule == resolved(s.model, d.key)) continue;
    problems.push_back(str(where_of(d.key), ": model.", d.key, " = ", literal_of(out, d.key), " but ", s.config_path,
                           " has ", d.hf_key, " = ", d.hf_value));
  }
  if (problems.empty()) model = out;
  return problems;
}

HfFamily hf_family_of(const ModelConfig& m) {
  if (m.name == "gpt") return HfFamily::gpt2;
  if (m.name != "llama")
    throw ConfigError("--format hf: model.name = \"" + m.name + "\" has no Hugging Face form (gpt and llama have)");
  if (m.qk_norm && m.qkv_bias)
    throw ConfigError(
        "--format hf: a llama with both qk_norm and qkv_bias has no Hugging Face architecture "
        "(Qwen3 has q/k norms without biases, Qwen2 biases without norms)");
  if (m.qk_norm) return HfFamily::qwen3;
  if (m.qkv_bias) return HfFamily::qwen2;
  return HfFamily::llama;
}

nlohmann::json hf_config_json(const ModelConfig& m, const std::string& dtype) {
  const HfFamily f = hf_family_of(m);
  nlohmann::json j = {{"architectures", {hf_architecture(f)}},
                      {"model_type", hf_model_type(f)},
                      {"vocab_size", m.vocab},
                      {"tie_word_embeddings", m.tied_embeddings},
                      {"initializer_range", m.init_std},
                      {"torch_dtype", dtype},
                      {"use_cache", true}};
  if (f == HfFamily::gpt2) {
    // GPT-2's defaults put bos/eos at 50256, which a smaller vocabulary does not hold; the model's
    // own tokens (an import's) win.
    const nlohmann::json special = m.vocab > 50256 ? nlohmann::json(50256) : nlohmann::json(nullptr);
    j.update({{"n_layer", m.n_layer},
              {"n_head", m.n_head},
              {"n_embd", m.n_embd},
              {"n_positions", m.context_length()},
              {"n_ctx", m.context_length()},
              {"n_inner", nullptr},
              {"activation_function", "gelu_new"},
              {"layer_norm_epsilon", 1e-5},
              {"scale_attn_weights", true},
              {"scale_attn_by_inverse_layer_idx", false},
              {"reorder_and_upcast_attn", false},
              {"resid_pdrop", m.dropout},
              {"embd_pdrop", m.dropout},
              {"attn_pdrop", m.dropout},
              {"bos_token_id", special},
              {"eos_token_id", special}});
    j.update(hf_special_tokens_json(m));
    return j;
  }
  nlohmann::json rope_scaling = nullptr;
  // The context the model is meant for: the job's, or with Llama 3's scaling the one it stretches to
  // (transformers warns when original_max_position_embeddings is not below it).
  int64_t max_positions = m.max_positions > 0 ? m.max_positions : m.seq_len;
  if (m.rope_scaling == "llama3" && m.max_positions == 0) {
    const auto stretched = static_cast<int64_t>(std::ceil(m.rope_original_max_positions * m.rope_factor));
    max_positions = std::max({max_positions, stretched, m.rope_original_max_positions + 1});
  }
  if (m.rope_scaling == "llama3") {
    rope_scaling = {{"rope_type", "llama3"},
                    {"factor", m.rope_factor},
                    {"low_freq_factor", m.rope_low_freq_factor},
                    {"high_freq_factor", m.rope_high_freq_factor},
                    {"original_max_position_embeddings", m.rope_original_max_positions}};
  }
  j.update({{"num_hidden_layers", m.n_layer},
            {"num_attention_heads", m.n_head},
            {"num_key_value_heads", m.llama_kv_heads()},
            {"hidden_size", m.n_embd},
            {"head_dim", m.llama_head_dim()},
            {"intermediate_size", m.llama_intermediate()},
            {"hidden_act", "silu"},
            {"rms_norm_eps", m.norm_eps},
            {"rope_theta", m.rope_theta},
            {"rope_scaling", rope_scaling},
            {"max_position_embeddings", max_positions},
            {"attention_dropout", 0.0}});
  if (f != HfFamily::qwen2) j["attention_bias"] = false;
  if (f == HfFamily::llama) j["mlp_bias"] = false;
  if (f != HfFamily::llama) {
    j.update({{"use_sliding_window", false}, {"sliding_window", nullptr}, {"max_window_layers", m.n_layer}});
  }
  j.update(hf_special_tokens_json(m));
  return j;
}

nlohmann::json read_hf_generation_config(const std::string& dir) {
  const std::string path = (fs::path(dir) / "generation_config.json").string();
  std::error_code ec;
  if (dir.empty() || !fs::is_regular_file(path, ec)) return nlohmann::json::object();
  nlohmann::json j = read_json_file(path);
  if (!j.is_object()) throw ConfigError(path + ": expected a JSON object, got " + std::string(j.type_name()));
  return j;
}

nlohmann::json hf_special_tokens_json(const ModelConfig& m) {
  nlohmann::json j = nlohmann::json::object();
  if (m.bos_token_id >= 0) j["bos_token_id"] = m.bos_token_id;
  if (m.eos_token_id.size() == 1) j["eos_token_id"] = m.eos_token_id[0];
  if (m.eos_token_id.size() > 1) j["eos_token_id"] = m.eos_token_id;
  if (m.pad_token_id >= 0) j["pad_token_id"] = m.pad_token_id;
  return j;
}

nlohmann::json hf_generation_config_json(const ModelConfig& m, const nlohmann::json& source) {
  nlohmann::json j = source.is_object() ? source : nlohmann::json::object();
  // The model's tokens replace the source's (the same after a plain import).
  for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id"}) j.erase(key);
  j.update(hf_special_tokens_json(m));
  return j;
}

}  // namespace gtrain
