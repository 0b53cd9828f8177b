// test_llama.cpp: the llama model (Llama 3 / Qwen decoders) on one process: the presets' parameter
// counts against the published ones, the built model against its formula and Hugging Face's
// names, causality, cached decoding against the full forward, rotary frequencies, and its config.
#include <gtest/gtest.h>

#include <torch/torch.h>
#include <algorithm>

#include <cmath>
#include <filesystem>

#include "runtime/core/config/job_config.h"
#include "runtime/core/config/model_presets.h"
#include "runtime/core/errors.h"
#include "runtime/core/text/pipeline.h"
#include "runtime/models/gpt.h"
#include "runtime/models/llama.h"
#include "tests/support/test_util.h"

namespace gtrain {
namespace {

using test::token_spec;

ModelConfig preset(const std::string& name) {
  return apply_model_preset(ModelConfig{}, name);
}

// Parameter counts of the published checkpoints (their safetensors, tied heads counted once).
TEST(LlamaPresets, ParameterCountsAreThePublishedOnes) {
  const std::map<std::string, int64_t> published = {{"llama-3.2-1b", 1235814400}, {"llama-3.2-3b", 3212749824},
                                                    {"llama-3.1-8b", 8030261248}, {"qwen3-0.6b", 596049920},
                                                    {"qwen3-1.7b", 1720574976},   {"qwen3-8b", 8190735360}};
  for (const auto& [name, params] : published) {
    const ModelConfig c = preset(name);
    EXPECT_EQ(c.name, "llama") << name;
    EXPECT_EQ(llama_stats(c, c.vocab).params, params) << name;
  }
  // Outside the embeddings, as the Qwen3 model cards say: 0.44B, 1.4B (both tied) and 6.95B.
  for (const auto& [name, billions] :
       std::map<std::string, double>{{"qwen3-0.6b", 0.44}, {"qwen3-1.7b", 1.4}, {"qwen3-8b", 6.95}}) {
    const ModelConfig q = preset(name);
    const int64_t embeddings = (q.tied_embeddings ? 1 : 2) * q.vocab * q.n_embd;
    EXPECT_NEAR(static_cast<double>(llama_stats(q, q.vocab).params - embeddings) / 1e9, billions, 0.01) << name;
  }
}

TEST(LlamaModel, BuiltParametersMatchTheFormulaAndHuggingFaceNames) {
  for (const std::string name : {"llama-tiny", "qwen3-tiny"}) {
    ModelConfig c = preset(name);
    c.qkv_bias = name == "qwen3-tiny";  // Qwen2's biases on top of Qwen3's norms: every optional part
    torch::manual_seed(0);
    Llama m(c, token_spec(c.seq_len, 96));
    const ModelStats s = llama_stats(c, 96);
    EXPECT_EQ(m.num_parameters(), s.params) << name;
    EXPECT_EQ(m.stats(token_spec(c.seq_len, 96)).params, s.params);
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const auto& kv : m.named_parameters()) shapes[kv.key()] = kv.value().sizes().vec();
    const int64_t D = c.llama_head_dim(), KV = c.llama_kv_heads();
    EXPECT_EQ(shapes.at("embed_tokens.weight"), (std::vector<int64_t>{96, c.n_embd}));
    EXPECT_EQ(shapes.at("layers.3.self_attn.q_proj.weight"), (std::vector<int64_t>{c.n_head * D, c.n_embd}));
    EXPECT_EQ(shapes.at("layers.3.self_attn.k_proj.weight"), (std::vector<int64_t>{KV * D, c.n_embd}));
    EXPECT_EQ(shapes.at("layers.0.self_attn.o_proj.weight"), (std::vector<int64_t>{c.n_embd, c.n_head * D}));
    EXPECT_EQ(shapes.at("layers.0.mlp.down_proj.weight"), (std::vector<int64_t>{c.n_embd, c.intermediate_size}));
    EXPECT_EQ(shapes.count("layers.0.post_attention_layernorm.weight"), 1u);
    EXPECT_EQ(shapes.count("norm.weight"), 1u);
    EXPECT_EQ(shapes.count("lm_head.weight"), c.tied_embeddings ? 0u : 1u) << name;
    EXPECT_EQ(shapes.count("layers.0.self_attn.q_norm.weight"), c.qk_norm ? 1u : 0u) << name;
    EXPECT_EQ(shapes.count("layers.0.self_attn.v_proj.bias"), c.qkv_bias ? 1u : 0u) << name;
    EXPECT_EQ(m.blocks().size(), 4u);
  }
}

// Token t's logits depend on tokens 0..t only; the cached decoder, fed the prompt and then one
// token at a time, gives the full forward's logits (gpt and llama, grouped-query attention).
TEST(LlamaModel, CausalAndCachedDecodingMatchesTheFullForward) {
  ModelConfig lc = preset("llama-tiny");
  lc.seq_len = 12;
  ModelConfig gc;
  gc.name = "gpt", gc.n_layer = 2, gc.n_head = 2, gc.n_embd = 16, gc.seq_len = 12;
  torch::manual_seed(1);
  std::vector<std::shared_ptr<DecoderLm>> models = {std::make_shared<Llama>(lc, token_spec(12, 50)),
                                                    std::make_shared<Gpt>(gc, token_spec(12, 50))};
  for (auto& m : models) {
    m->eval();
    torch::NoGradGuard ng;
    auto idx = torch::randint(0, 50, {2, 12}, torch::kLong);
    auto full = m->forward(idx);
    auto changed = idx.clone();
    changed.index_put_({torch::indexing::Slice(), 8}, (idx.index({torch::indexing::Slice(), 8}) + 1) % 50);
    auto other = m->forward(changed);
    EXPECT_LT((other.narrow(1, 0, 8) - full.narrow(1, 0, 8)).abs().max().item<double>(), 1e-6);
    EXPECT_GT((other.narrow(1, 8, 4) - full.narrow(1, 8, 4)).abs().max().item<double>(), 1e-4);
    KvCache cache;
    std::vector<torch::Tensor> parts = {m->decode(idx.narrow(1, 0, 5), cache)};
    for (int64_t t = 5; t < 12; ++t) parts.push_back(m->decode(idx.narrow(1, t, 1), cache));
    EXPECT_EQ(cache.length, 12);
    EXPECT_LT((torch::cat(parts, 1) - full).abs().max().item<double>(), 1e-5);
    EXPECT_THROW(m->decode(idx.narrow(1, 0, 1), cache), ConfigError);  // past model.seq_len
  }
}

TEST(LlamaModel, RotaryFrequenciesWithAndWithoutLlama3Scaling) {
  ModelConfig c = preset("llama-tiny");  // head width 32
  c.rope_scaling = "none";
  auto plain = rotary_inverse_frequencies(c);
  ASSERT_EQ(plain.numel(), 16);
  for (int64_t i = 0; i < 16; ++i) {
    EXPECT_NEAR(plain[i].item<double>(), std::pow(500000.0, -2.0 * i / 32.0), 1e-6 * plain[i].item<double>());
  }
  c.rope_scaling = "llama3";
  auto scaled = rotary_inverse_frequencies(c);
  const double old_len = static_cast<double>(c.rope_original_max_positions);
  for (int64_t i = 0; i < 16; ++i) {
    const double f = plain[i].item<double>(), wavelen = 2 * M_PI / f;
    if (wavelen < old_len / c.rope_high_freq_factor) {
      EXPECT_FLOAT_EQ(scaled[i].item<float>(), static_cast<float>(f)) << i;  // high frequencies kept
    } else if (wavelen > old_len / c.rope_low_freq_factor) {
      EXPECT_NEAR(scaled[i].item<double>(), f / c.rope_factor, 1e-6 * f) << i;  // low ones divided
    } else {
      EXPECT_LT(scaled[i].item<double>(), f) << i;  // in between: a blend
      EXPECT_GT(scaled[i].item<double>(), f / c.rope_factor) << i;
    }
  }
}

JobConfig parse(const std::string& model_keys) {
  return parse_job_config("[model]\n" + model_keys + "\n[train]\nsteps = 1\n", "job.toml", {}, {});
}

std::string error_of(const std::string& model_keys) {
  try {
    parse(model_keys);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(LlamaConfig, PresetFillsTheShapeAndExplicitKeysOverrideIt) {
  const JobConfig c = parse("preset = \"qwen3-0.6b\"\nn_layer = 2\nseq_len = 256");
  EXPECT_EQ(c.model.name, "llama");
  EXPECT_EQ(c.model.n_layer, 2);
  EXPECT_EQ(c.model.seq_len, 256);
  EXPECT_EQ(c.model.n_embd, 1024);
  EXPECT_EQ(c.model.head_dim, 128);
  EXPECT_TRUE(c.model.qk_norm);
  EXPECT_DOUBLE_EQ(c.model.norm_eps, 1e-6);
  // The resolved config (what checkpoints keep) reads back to the same model.
  const JobConfig again = parse_job_config(to_toml(c), "resolved.toml", {}, {});
  EXPECT_EQ(flat_fields(again), flat_fields(c));
  EXPECT_NE(error_of("preset = \"llama-3.2-2b\"").find("model.preset: unknown preset 'llama-3.2-2b' (known: "),
            std::string::npos);
  EXPECT_NE(error_of("name = \"gpt\"\npreset = \"llama-3.2-1b\"").find("leave model.name out"), std::string::npos);
  EXPECT_NE(error_of("name = \"llama\"\nn_head = 4\nn_kv_head = 3").find("model.n_kv_head = 3 must divide"),
            std::string::npos);
  EXPECT_NE(error_of("name = \"llama\"\nn_head = 4\nn_embd = 36").find("the head width must be even"),
            std::string::npos);
  EXPECT_NE(error_of("name = \"llama\"\nrope_scaling = \"yarn\"").find("rope_scaling"), std::string::npos);
  // Llama 3's 128256 ids do not fit uint16 token files.
  try {
    parse_job_config(
        "[model]\npreset = \"llama-3.2-1b\"\n[data]\nkind = \"tokens\"\npath = \"t.bin\"\n[train]\nsteps = 1\n",
        "job.toml", {}, {});
    ADD_FAILURE() << "a uint16 token file for a 128256-token vocabulary was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(
        std::string(e.what()).find("data.token_dtype = \"uint16\" holds ids up to 65535, but model.vocab = 128256"),
        std::string::npos)
        << e.what();
  }
}

// gtrain sample on a byte-level llama trained for a few steps: greedy decoding is repeatable and
// continues the prompt; sampling follows its seed; bad flags are one line and exit 2.
TEST(Sample, GreedyAndSeededGenerationFromARun) {
  test::TempDir dir;
  test::write_file(dir.file("job.toml"), R"(
[model]
preset = "llama-tiny"
n_layer = 2
seq_len = 32
[data]
kind = "text_bytes"
path = "/usr/share/common-licenses/GPL-3"
[train]
global_batch = 8
steps = 3
threads = 1
[log]
progress = "none"
)");
  const std::string run = dir.file("run");
  ASSERT_EQ(test::run_command(GTRAIN_BINARY + " run " + dir.file("job.toml") + " --run-dir " + run).exit_code, 0);
  auto sample = [&](const std::string& flags) {
    return test::run_command(GTRAIN_BINARY + " sample " + run + " " + flags);
  };
  const auto greedy = sample("--prompt-text 'The GNU ' --tokens 8 --temperature 0 --json");
  ASSERT_EQ(greedy.exit_code, 0) << greedy.output;
  const auto j = nlohmann::json::parse(greedy.output);
  EXPECT_EQ(j.at("tokens").size(), 8u);
  EXPECT_EQ(j.at("prompt").size(), 8u);
  EXPECT_EQ(j.at("text").get<std::string>().size(), 8u);
  EXPECT_EQ(sample("--prompt-text 'The GNU ' --tokens 8 --temperature 0 --json").output, greedy.output);
  const auto a = sample("--prompt-ids 84,104 --tokens 12 --seed 1"),
             b = sample("--prompt-ids 84,104 --tokens 12 --seed 1");
  const auto c = sample("--prompt-ids 84,104 --tokens 12 --seed 2");
  EXPECT_EQ(a.exit_code, 0) << a.output;
  EXPECT_EQ(a.output, b.output);
  EXPECT_NE(a.output, c.output);
  for (const auto& [flags, expect] : std::vector<std::pair<std::string, std::string>>{
           {"--prompt-ids 1,x --tokens 2", "--prompt-ids: 'x' is not a token id"},
           {"--prompt-ids 1 --tokens 40", "exceed the model's context, model.seq_len = 32"},
           {"--prompt-ids 300", "token 300 is outside the model's vocabulary of 256"},
           {"--tokens 2", "give the prompt as --prompt-ids 1,2,3 or as --prompt-text"}}) {
    const auto r = sample(flags);
    EXPECT_EQ(r.exit_code, 2) << flags << "\n" << r.output;
    EXPECT_NE(r.output.find(expect), std::string::npos) << flags << "\n" << r.output;
    EXPECT_EQ(test::lines(r.output).size(), 1u) << r.output;
  }
  // Through a tokenizer.json: a byte-level BPE whose id of each byte is the byte gives the same ids
  // and text as the bytes; one with more ids than the model has is refused by name.
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[gtrain::text::byte_char(static_cast<unsigned char>(b))] = b;
  nlohmann::json tokenizer = {{"added_tokens", nlohmann::json::array()},
                              {"normalizer", nullptr},
                              {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
                              {"post_processor", nullptr},
                              {"decoder", {{"type", "ByteLevel"}}},
                              {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
  std::filesystem::create_directories(dir.file("tok"));
  std::filesystem::create_directories(dir.file("big"));
  test::write_file(dir.file("tok/tokenizer.json"), tokenizer.dump());
  const auto through =
      sample("--tokenizer " + dir.file("tok") + " --prompt-text 'The GNU ' --tokens 8 --temperature 0 --json");
  ASSERT_EQ(through.exit_code, 0) << through.output;
  const auto jt = nlohmann::json::parse(through.output);
  EXPECT_EQ(jt.at("prompt"), j.at("prompt"));
  EXPECT_EQ(jt.at("tokens"), j.at("tokens"));
  EXPECT_EQ(jt.at("text"), j.at("text"));
  vocab["<|big|>"] = 300;
  tokenizer["model"]["vocab"] = vocab;
  test::write_file(dir.file("big/tokenizer.json"), tokenizer.dump());
  const auto big = sample("--tokenizer " + dir.file("big") + " --prompt-text x --tokens 2");
  EXPECT_EQ(big.exit_code, 2) << big.output;
  EXPECT_NE(big.output.find("has 301 ids, more than the model's vocabulary of 256"), std::string::npos) << big.output;
  // A missing path is named, not the literal "PATH" of the usage line.
  const auto missing = test::run_command(GTRAIN_BINARY + " sample " + dir.file("nope") + " --prompt-ids 1");
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find(dir.file("nope") + ": does not exist"), std::string::npos) << missing.output;
  EXPECT_EQ(missing.output.find("PATH"), std::string::npos) << missing.output;
  // model.eos_token_id: the same weights (the key shapes nothing), and generation stops at the
  // first end-of-sequence token, keeping it, as transformers' generate() does.
  const std::vector<int64_t> free_run = j.at("tokens").get<std::vector<int64_t>>();
  const int64_t eos = free_run[3];
  const size_t first = std::find(free_run.begin(), free_run.end(), eos) - free_run.begin();
  const std::string eos_run = dir.file("eos_run");
  ASSERT_EQ(test::run_command(GTRAIN_BINARY + " run " + dir.file("job.toml") + " --run-dir " + eos_run +
                              " --set model.eos_token_id=[" + std::to_string(eos) + "]")
                .exit_code,
            0);
  const auto stopped = test::run_command(GTRAIN_BINARY + " sample " + eos_run +
                                         " --prompt-text 'The GNU ' --tokens 8 --temperature 0 --json");
  ASSERT_EQ(stopped.exit_code, 0) << stopped.output;
  const auto js = nlohmann::json::parse(stopped.output);
  EXPECT_EQ(js.at("stopped"), "eos");
  EXPECT_EQ(js.at("tokens").get<std::vector<int64_t>>(),
            std::vector<int64_t>(free_run.begin(), free_run.begin() + first + 1));
  EXPECT_EQ(j.at("stopped"), "length");
}

}  // namespace
}  // namespace gtrain
