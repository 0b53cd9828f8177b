// test_hf_config.cpp: Hugging Face config.json read into [model] and written from it, and a job's
// [model] resolved from the config.json of checkpoint.init_from.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "runtime/core/config/job_config.h"
#include "runtime/core/config/model_presets.h"
#include "runtime/core/errors.h"
#include "runtime/core/hf_config.h"
#include "tests/support/test_util.h"

namespace gtrain {
namespace {

namespace fs = std::filesystem;

// GPT-2 as transformers 5 saves a small one.
const nlohmann::json kGpt2 = nlohmann::json::parse(R"({
  "activation_function": "gelu_new", "add_cross_attention": false, "architectures": ["GPT2LMHeadModel"],
  "attn_pdrop": 0.1, "bos_token_id": 50256, "dtype": "float32", "embd_pdrop": 0.1, "eos_token_id": 50256,
  "initializer_range": 0.02, "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_embd": 64, "n_head": 4,
  "n_inner": null, "n_layer": 2, "n_positions": 32, "reorder_and_upcast_attn": false, "resid_pdrop": 0.1,
  "scale_attn_by_inverse_layer_idx": false, "scale_attn_weights": true, "tie_word_embeddings": true,
  "transformers_version": "5.24.0", "use_cache": true, "vocab_size": 256})");

// Llama with grouped-query attention and Llama 3 rope scaling, as transformers 5 saves it
// (rope_parameters).
const nlohmann::json kLlama = nlohmann::json::parse(R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0, "bos_token_id": 1,
  "dtype": "float32", "eos_token_id": 2, "head_dim": 16, "hidden_act": "silu", "hidden_size": 64,
  "initializer_range": 0.02, "intermediate_size": 128, "max_position_embeddings": 2048, "mlp_bias": false,
  "model_type": "llama", "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
  "pretraining_tp": 1, "rms_norm_eps": 1e-06,
  "rope_parameters": {"factor": 8.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                      "original_max_position_embeddings": 16, "rope_theta": 10000.0, "rope_type": "llama3"},
  "tie_word_embeddings": false, "use_cache": true, "vocab_size": 256})");

// Llama 3.1 8B's and Qwen3 0.6B's config.json from the hub (transformers 4: rope_theta and
// rope_scaling at the top level).
const nlohmann::json kLlama31_8b = nlohmann::json::parse(R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
  "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 131072, "mlp_bias": false,
  "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16", "use_cache": true,
  "vocab_size": 128256})");
const nlohmann::json kQwen3_06b = nlohmann::json::parse(R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024,
  "initializer_range": 0.02, "intermediate_size": 3072, "max_position_embeddings": 40960, "max_window_layers": 28,
  "model_type": "qwen3", "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "use_cache": true, "use_sliding_window": false,
  "vocab_size": 151936})");

std::string hf_dir(const test::TempDir& tmp, const std::string& name, const nlohmann::json& config) {
  const std::string dir = tmp.file(name);
  fs::create_directories(dir);
  test::write_file(dir + "/config.json", config.dump(2));
  return dir;
}

nlohmann::json with(nlohmann::json j, const std::string& key, const nlohmann::json& value) {
  if (value.is_null() && key.rfind("-", 0) == 0) {
    j.erase(key.substr(1));
  } else {
    j[key] = value;
  }
  return j;
}

// The ConfigError's message, or "" when reading does not throw.
std::string read_error(const std::string& dir) {
  try {
    read_hf_config(dir);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

std::string parse_error(const std::string& toml, const std::vector<std::string>& sets = {}) {
  try {
    parse_job_config(toml, "job.toml", sets, {});
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// Every [model] key as its TOML text, for comparing whole configs.
std::map<std::string, std::string> model_fields(const ModelConfig& m) {
  std::map<std::string, std::string> out;
  for (const auto& f : cfg::list_fields(m)) out[f.key] = f.value;
  return out;
}

TEST(HfConfig, ReadsGpt2) {
  test::TempDir tmp;
  const HfModelShape s = read_hf_config(hf_dir(tmp, "g", kGpt2));
  EXPECT_EQ(s.family, HfFamily::gpt2);
  EXPECT_EQ(s.config_path, tmp.file("g/config.json"));
  EXPECT_EQ(s.model.name, "gpt");
  EXPECT_EQ(s.model.n_layer, 2);
  EXPECT_EQ(s.model.n_head, 4);
  EXPECT_EQ(s.model.n_embd, 64);
  EXPECT_EQ(s.model.seq_len, 32);  // n_positions
  EXPECT_EQ(s.model.vocab, 256);
  EXPECT_TRUE(s.model.tied_embeddings);
  ASSERT_FALSE(s.derived.empty());
  EXPECT_EQ(s.derived[0].key, "name");
  // Untied, and GPT2Config's defaults for the keys left out.
  auto untied = with(with(with(kGpt2, "tie_word_embeddings", false), "-activation_function", nullptr),
                     "-layer_norm_epsilon", nullptr);
  EXPECT_FALSE(read_hf_config(hf_dir(tmp, "u", untied)).model.tied_embeddings);
  EXPECT_TRUE(read_hf_config(hf_dir(tmp, "d", with(kGpt2, "-tie_word_embeddings", nullptr))).model.tied_embeddings);
}

// What generation needs comes along: the context (n_positions, which a job may train a shorter
// seq_len of), the special tokens from config.json, then generation_config.json's where it has them.
TEST(HfConfig, ContextAndSpecialTokensAreCarried) {
  test::TempDir tmp;
  const std::string dir = hf_dir(tmp, "g", kGpt2);
  HfModelShape s = read_hf_config(dir);
  EXPECT_EQ(s.model.max_positions, 32);
  EXPECT_EQ(s.max_positions, 32);
  EXPECT_EQ(s.model.bos_token_id, 50256);
  EXPECT_EQ(s.model.eos_token_id, std::vector<int64_t>{50256});
  EXPECT_EQ(s.model.pad_token_id, -1);
  test::write_file(dir + "/generation_config.json",
                   R"({"bos_token_id": 7, "eos_token_id": [8, 9], "temperature": 0.7})");
  s = read_hf_config(dir);
  EXPECT_EQ(s.model.bos_token_id, 7);
  EXPECT_EQ(s.model.eos_token_id, (std::vector<int64_t>{8, 9}));
  int derived_eos = 0;
  for (const auto& d : s.derived) derived_eos += d.key == "eos_token_id";
  EXPECT_EQ(derived_eos, 1);  // the later source replaces the earlier
  // A shorter seq_len than n_positions is no conflict (the table's first rows); a longer one is, and
  // so is another max_positions. The job's own special tokens win.
  const auto where = [](const std::string& key) { return "job.toml: model." + key; };
  ModelConfig m;
  m.name = "gpt", m.seq_len = 16, m.eos_token_id = {3};
  EXPECT_TRUE(merge_hf_model_config(m, {"name", "seq_len", "eos_token_id"}, dir, where).empty());
  EXPECT_EQ(m.seq_len, 16);
  EXPECT_EQ(m.max_positions, 32);
  EXPECT_EQ(m.eos_token_id, std::vector<int64_t>{3});
  EXPECT_EQ(m.bos_token_id, 7);
  ModelConfig longer;
  longer.name = "gpt", longer.seq_len = 64;
  const auto problems = merge_hf_model_config(longer, {"name", "seq_len"}, dir, where);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("model.seq_len = 64 but " + dir + "/config.json has n_positions = 32"), std::string::npos)
      << problems[0];
  test::write_file(dir + "/generation_config.json", R"({"eos_token_id": "x"})");
  try {
    read_hf_config(dir);
    ADD_FAILURE() << "a string eos_token_id was accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              dir + "/generation_config.json: eos_token_id: expected a token id or a list of token ids, got \"x\"");
  }
}

TEST(HfConfig, ReadsLlamaQwen2Qwen3) {
  test::TempDir tmp;
  ModelConfig base;
  base.seq_len = 48;  // llama's context is the job's, not max_position_embeddings
  HfModelShape s = read_hf_config(hf_dir(tmp, "l", kLlama), base);
  EXPECT_EQ(s.family, HfFamily::llama);
  EXPECT_EQ(s.model.name, "llama");
  EXPECT_EQ(s.model.n_layer, 2);
  EXPECT_EQ(s.model.n_head, 4);
  EXPECT_EQ(s.model.n_kv_head, 2);
  EXPECT_EQ(s.model.n_embd, 64);
  EXPECT_EQ(s.model.head_dim, 16);
  EXPECT_EQ(s.model.intermediate_size, 128);
  EXPECT_EQ(s.model.vocab, 256);
  EXPECT_EQ(s.model.seq_len, 48);
  EXPECT_FALSE(s.model.tied_embeddings);
  EXPECT_DOUBLE_EQ(s.model.norm_eps, 1e-6);
  EXPECT_DOUBLE_EQ(s.model.rope_theta, 10000.0);
  EXPECT_EQ(s.model.rope_scaling, "llama3");
  EXPECT_DOUBLE_EQ(s.model.rope_factor, 8.0);
  EXPECT_DOUBLE_EQ(s.model.rope_low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(s.model.rope_high_freq_factor, 4.0);
  EXPECT_EQ(s.model.rope_original_max_positions, 16);
  EXPECT_FALSE(s.model.qk_norm);
  EXPECT_FALSE(s.model.qkv_bias);
  // No head_dim: hidden / heads; no num_key_value_heads: as many as heads; default rope.
  auto plain = kLlama;
  plain.erase("head_dim"), plain.erase("num_key_value_heads"), plain.erase("rope_parameters");
  s = read_hf_config(hf_dir(tmp, "p", plain));
  EXPECT_EQ(s.model.head_dim, 16);
  EXPECT_EQ(s.model.n_kv_head, 4);
  EXPECT_EQ(s.model.rope_scaling, "none");
  EXPECT_DOUBLE_EQ(s.model.rope_theta, 10000.0);
  // The older spelling of the rope type ("type") reads too.
  auto old = plain;
  old["rope_scaling"] = {{"type", "llama3"},
                         {"factor", 32.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192}};
  EXPECT_DOUBLE_EQ(read_hf_config(hf_dir(tmp, "o", old)).model.rope_factor, 32.0);
  // Qwen2: q/k/v biases; Qwen3: q/k norms.
  auto qwen2 = with(with(kLlama, "architectures", {"Qwen2ForCausalLM"}), "model_type", "qwen2");
  s = read_hf_config(hf_dir(tmp, "q2", qwen2));
  EXPECT_EQ(s.family, HfFamily::qwen2);
  EXPECT_TRUE(s.model.qkv_bias);
  EXPECT_FALSE(s.model.qk_norm);
  auto qwen3 = with(with(kLlama, "architectures", {"Qwen3ForCausalLM"}), "model_type", "qwen3");
  s = read_hf_config(hf_dir(tmp, "q3", qwen3));
  EXPECT_EQ(s.family, HfFamily::qwen3);
  EXPECT_TRUE(s.model.qk_norm);
  EXPECT_FALSE(s.model.qkv_bias);
  // model_type alone names the family when architectures is absent.
  EXPECT_EQ(read_hf_config(hf_dir(tmp, "mt", with(qwen3, "-architectures", nullptr))).family, HfFamily::qwen3);
}

// The published config.json files give the shapes of gtrain's presets (all but seq_len, the job's).
TEST(HfConfig, PublishedConfigsMatchThePresets) {
  test::TempDir tmp;
  for (const auto& [preset, config] :
       std::vector<std::pair<std::string, nlohmann::json>>{{"llama-3.1-8b", kLlama31_8b}, {"qwen3-0.6b", kQwen3_06b}}) {
    const ModelConfig want = apply_model_preset(ModelConfig(), preset);
    ModelConfig got = read_hf_config(hf_dir(tmp, preset, config), want).model;
    got.preset = want.preset;
    EXPECT_EQ(model_fields(got), model_fields(want)) << preset;
  }
}

// config.json written from a ModelConfig reads back as the same [model] (seq_len: gpt's n_positions;
// llama keeps the job's).
TEST(HfConfig, WrittenConfigReadsBack) {
  test::TempDir tmp;
  std::vector<ModelConfig> models;
  ModelConfig gpt;
  gpt.name = "gpt", gpt.n_layer = 3, gpt.n_head = 2, gpt.n_embd = 32, gpt.seq_len = 24, gpt.vocab = 100;
  gpt.tied_embeddings = false;
  models.push_back(gpt);
  for (const std::string preset : {"llama-3.2-1b", "llama-3.1-8b", "qwen3-0.6b", "qwen3-8b", "llama-tiny"}) {
    ModelConfig m = apply_model_preset(ModelConfig(), preset);
    m.preset.clear();
    if (m.vocab == 0) m.vocab = 256;
    models.push_back(m);
  }
  ModelConfig qwen2 = models.back();
  qwen2.qkv_bias = true, qwen2.rope_scaling = "none", qwen2.tied_embeddings = false;
  models.push_back(qwen2);
  for (size_t i = 0; i < models.size(); ++i) {
    const nlohmann::json written = hf_config_json(models[i], "bfloat16");
    const std::string dir = hf_dir(tmp, "m" + std::to_string(i), written);
    ModelConfig got = read_hf_config(dir, models[i]).model;
    auto want = model_fields(models[i]);
    // The context written (model.max_positions, else seq_len or llama3's stretch) reads back as it.
    want["max_positions"] = written.at(models[i].name == "gpt" ? "n_positions" : "max_position_embeddings").dump();
    if (models[i].max_positions > 0) {
      EXPECT_EQ(want["max_positions"], std::to_string(models[i].max_positions));
    }
    // The rules' values written out (0 = n_head, ...), and llama3's factors only with that scaling.
    if (models[i].name == "llama") {
      want["n_kv_head"] = std::to_string(models[i].llama_kv_heads());
      want["head_dim"] = std::to_string(models[i].llama_head_dim());
      want["intermediate_size"] = std::to_string(models[i].llama_intermediate());
    }
    EXPECT_EQ(model_fields(got), want) << models[i].name << " " << i;
  }
  const auto q2 = hf_config_json(qwen2, "float32");
  EXPECT_EQ(q2.at("architectures"), nlohmann::json({"Qwen2ForCausalLM"}));
  EXPECT_FALSE(q2.contains("attention_bias"));  // Qwen2's attention has its q/k/v biases by architecture
  const auto g = hf_config_json(gpt, "float16");
  EXPECT_EQ(g.at("activation_function"), "gelu_new");
  EXPECT_EQ(g.at("n_ctx"), 24);
  EXPECT_EQ(g.at("torch_dtype"), "float16");
  EXPECT_TRUE(g.at("bos_token_id").is_null());  // GPT-2's 50256 is past a vocabulary of 100
  // The model's own special tokens and context win; generation_config.json carries the tokens over
  // the source's other settings.
  ModelConfig tokens = gpt;
  tokens.max_positions = 64, tokens.bos_token_id = 1, tokens.eos_token_id = {2, 3}, tokens.pad_token_id = 0;
  const auto t = hf_config_json(tokens, "float32");
  EXPECT_EQ(t.at("n_positions"), 64);
  EXPECT_EQ(t.at("bos_token_id"), 1);
  EXPECT_EQ(t.at("eos_token_id"), nlohmann::json({2, 3}));
  EXPECT_EQ(t.at("pad_token_id"), 0);
  const auto gen = hf_generation_config_json(tokens, {{"eos_token_id", 9}, {"temperature", 0.6}, {"do_sample", true}});
  EXPECT_EQ(gen, nlohmann::json({{"bos_token_id", 1},
                                 {"eos_token_id", {2, 3}},
                                 {"pad_token_id", 0},
                                 {"temperature", 0.6},
                                 {"do_sample", true}}));
  ModelConfig both = qwen2;
  both.qk_norm = true;
  EXPECT_THROW(hf_config_json(both, "float32"), ConfigError);
  ModelConfig mlp;
  EXPECT_THROW(hf_config_json(mlp, "float32"), ConfigError);
}

TEST(HfConfig, ErrorsNameTheFileAndKey) {
  test::TempDir tmp;
  const std::string path = tmp.file("x/config.json");
  const std::string reads = " (gtrain reads GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)";
  struct Case {
    nlohmann::json config;
    std::string message;
  };
  auto yarn = kLlama;
  yarn["rope_parameters"]["rope_type"] = "yarn";
  auto sliding = with(with(kLlama, "architectures", {"Qwen2ForCausalLM"}), "use_sliding_window", true);
  const std::vector<Case> cases = {
      {with(kLlama, "architectures", {"MistralForCausalLM"}),
       path + ": architectures: unknown architecture 'MistralForCausalLM'" + reads},
      {with(with(kGpt2, "-architectures", nullptr), "model_type", "gptj"),
       path + ": model_type: unknown model type 'gptj' and no architectures" + reads},
      {with(kGpt2, "activation_function", "gelu"),
       path + ": activation_function = \"gelu\": gtrain's gpt uses GELU's tanh approximation (\"gelu_new\")"},
      {with(kGpt2, "layer_norm_epsilon", 1e-6), path + ": layer_norm_epsilon = 1e-06: gtrain's gpt uses LayerNorm "
                                                       "epsilon 1e-5"},
      {with(kGpt2, "-n_layer", nullptr), path + ": key 'n_layer' is missing"},
      {with(kLlama, "num_hidden_layers", "2"), path + ": num_hidden_layers: expected a positive integer, got \"2\""},
      {yarn, path + ": rope_parameters.rope_type = \"yarn\": gtrain's llama has the default rotary embedding and "
                    "Llama 3's scaling (\"llama3\") only"},
      {with(kLlama, "attention_bias", true), path + ": attention_bias = true: gtrain's llama has no bias on o_proj"},
      {with(kLlama, "hidden_act", "gelu"), path + ": hidden_act = \"gelu\": gtrain's llama has a SwiGLU (silu) MLP"},
      {sliding, path + ": use_sliding_window = true: gtrain's llama attends over the whole context"},
      {with(kLlama, "num_key_value_heads", 3), path + ": num_key_value_heads = 3 does not divide "
                                                      "num_attention_heads = 4"},
  };
  for (const auto& c : cases) {
    hf_dir(tmp, "x", c.config);
    EXPECT_EQ(read_error(tmp.file("x")), c.message);
  }
  test::write_file(path, "{\"n_layer\": ");
  EXPECT_EQ(read_error(tmp.file("x")).rfind(path + ": invalid JSON: ", 0), 0u) << read_error(tmp.file("x"));
  EXPECT_FALSE(is_hf_model_dir(tmp.file("none")));
  EXPECT_FALSE(is_hf_model_dir(path));
  EXPECT_TRUE(is_hf_model_dir(tmp.file("x")));
}

// model.name = "hf": [model] is config.json's; gpt or llama with a Hugging Face init_from: the keys the
// job leaves out come from it and those it gives must agree, each disagreement one line.
TEST(HfConfig, JobModelComesFromInitFrom) {
  test::TempDir tmp;
  const std::string gpt2 = hf_dir(tmp, "gpt2", kGpt2), llama = hf_dir(tmp, "llama", kLlama);
  const std::string job = "[model]\nname = \"hf\"\n[checkpoint]\ninit_from = \"" + gpt2 + "\"\n[train]\nsteps = 1\n";
  JobConfig c = parse_job_config(job, "job.toml", {}, {});
  EXPECT_EQ(c.model.name, "gpt");
  EXPECT_EQ(c.model.n_layer, 2);
  EXPECT_EQ(c.model.n_embd, 64);
  EXPECT_EQ(c.model.seq_len, 32);
  EXPECT_EQ(c.model.vocab, 256);
  EXPECT_EQ(c.model_keys_given, (std::set<std::string>{"name"}));
  // The resolved config (what the ranks and a resume read) parses back to itself.
  const JobConfig again = parse_job_config(to_toml(c), "resolved.toml", {}, {});
  EXPECT_EQ(flat_fields(again), flat_fields(c));

  const std::string lj = "[model]\nname = \"llama\"\nseq_len = 64\nhead_dim = 0\n[checkpoint]\ninit_from = \"" + llama +
                         "\"\n[train]\nsteps = 1\n";
  c = parse_job_config(lj, "job.toml", {}, {});
  EXPECT_EQ(c.model.seq_len, 64);  // the job's context
  EXPECT_EQ(c.model.head_dim, 0);  // 0 = n_embd / n_head = 16, as config.json has it
  EXPECT_EQ(c.model.n_kv_head, 2);
  EXPECT_EQ(c.model.rope_scaling, "llama3");

  EXPECT_EQ(parse_error(lj, {"model.n_layer=4"}),
            "--set model.n_layer=4: model.n_layer = 4 but " + llama + "/config.json has num_hidden_layers = 2");
  EXPECT_EQ(parse_error("[model]\nname = \"llama\"\nn_embd = 32\ntied_embeddings = true\n[checkpoint]\ninit_from = "
                        "\"" +
                        llama + "\"\n[train]\nsteps = 1\n"),
            "job.toml:3:10: model.n_embd = 32 but " + llama +
                "/config.json has hidden_size = 64\n  job.toml:4:19: "
                "model.tied_embeddings = true but " +
                llama + "/config.json has tie_word_embeddings = false");
  EXPECT_EQ(parse_error("[model]\nname = \"gpt\"\n[checkpoint]\ninit_from = \"" + llama + "\"\n[train]\nsteps = 1\n"),
            "job.toml:2:8: model.name = \"gpt\" but " + llama +
                "/config.json has architectures = "
                "[\"LlamaForCausalLM\"]");
  EXPECT_EQ(parse_error("[model]\nname = \"hf\"\n[train]\nsteps = 1\n"),
            "job.toml:2:8: model.name = \"hf\" takes the model's shape from the config.json of "
            "checkpoint.init_from, but checkpoint.init_from = \"\" is not a Hugging Face model directory (a folder "
            "with config.json and the model's .safetensors)");
  hf_dir(tmp, "bad", with(kLlama, "architectures", {"MistralForCausalLM"}));
  EXPECT_EQ(parse_error(job, {"checkpoint.init_from=" + tmp.file("bad")}),
            "checkpoint.init_from: " + tmp.file("bad/config.json") +
                ": architectures: unknown architecture 'MistralForCausalLM' (gtrain reads GPT2LMHeadModel, "
                "LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM); hint: gtrain's gpt and llama models take "
                "GPT-2, Llama 3, Qwen2 and Qwen3 checkpoints");
  // A model that is not gpt or llama ignores the directory's shape (its tensors will not fit, which
  // the ranks report).
  EXPECT_EQ(parse_job_config(job, "job.toml", {"model.name=mlp"}, {}).model.name, "mlp");
}

}  // namespace
}  // namespace gtrain
