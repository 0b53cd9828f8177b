// test_hf_checkpoint.cpp: Hugging Face checkpoints: the name mapping, directories written and read
// (single file, shards, bf16), the errors naming file and tensor, and checkpoint.init_from and
// `gtrain ckpt export --format hf` end to end.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/hf_checkpoint.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/core/checkpoint_dirs.h"
#include "runtime/core/errors.h"
#include "tests/support/cli_util.h"
#include "tests/support/test_util.h"

namespace gtrain {
namespace {

namespace fs = std::filesystem;
using test::run_command;

ModelConfig tiny_gpt(bool tied = true) {
  ModelConfig m;
  m.name = "gpt", m.n_layer = 2, m.n_head = 2, m.n_embd = 16, m.seq_len = 8, m.vocab = 32;
  m.tied_embeddings = tied;
  return m;
}

ModelConfig tiny_llama(bool qkv_bias, bool qk_norm) {
  ModelConfig m;
  m.name = "llama", m.n_layer = 2, m.n_head = 4, m.n_kv_head = 2, m.n_embd = 32, m.seq_len = 8, m.vocab = 64;
  m.intermediate_size = 48, m.tied_embeddings = false, m.qkv_bias = qkv_bias, m.qk_norm = qk_norm;
  return m;
}

// Random parameters of `m` by gtrain name (a fixed seed).
std::map<std::string, torch::Tensor> random_params(const ModelConfig& m) {
  torch::manual_seed(7);
  std::map<std::string, torch::Tensor> out;
  for (const auto& n : hf_tensor_names(m)) out[n.gtrain] = torch::randn(n.shape);
  return out;
}

HfExportResult export_to(const std::string& dir, const ModelConfig& m, const std::map<std::string, torch::Tensor>& p,
                         torch::ScalarType dtype = torch::kFloat32, int64_t shard = int64_t{5} << 30) {
  return write_hf_checkpoint(dir, m, dtype, shard, {{"origin", "test"}},
                             [&](const std::string& name) { return p.at(name); });
}

// Rewrites a safetensors file after `edit` changes its tensors (in file order).
using Tensors = std::vector<std::pair<std::string, torch::Tensor>>;
void rewrite(const std::string& file, const std::function<void(Tensors&)>& edit) {
  Tensors tensors;
  {
    SafetensorsReader r(file);
    for (const auto& t : r.tensors()) tensors.push_back({t.name, r.read(t.name)});
  }
  edit(tensors);
  std::vector<SafetensorsSpec> specs;
  for (const auto& [name, t] : tensors) specs.push_back({name, t.scalar_type(), t.sizes().vec()});
  write_safetensors(file, specs, {{"format", "pt"}}, [&](size_t i) { return tensors[i].second; });
}

std::string reader_error(const std::string& dir) {
  try {
    HfCheckpointReader r(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(HfNames, GptAndLlamaFamilies) {
  auto gpt = hf_tensor_names(tiny_gpt());
  ASSERT_EQ(gpt.size(), 28u);  // embeddings 2, 12 a block, ln_f 2; tied: no lm_head
  EXPECT_EQ(gpt[0].gtrain, "wte.weight");
  EXPECT_EQ(gpt[0].hf, "transformer.wte.weight");
  EXPECT_EQ(gpt[1].shape, (std::vector<int64_t>{8, 16}));  // wpe: [seq_len, C]
  const auto& qkv = gpt[4];
  EXPECT_EQ(qkv.gtrain, "h.0.attn.qkv.weight");
  EXPECT_EQ(qkv.hf, "transformer.h.0.attn.c_attn.weight");
  EXPECT_TRUE(qkv.transpose);
  EXPECT_EQ(qkv.shape, (std::vector<int64_t>{48, 16}));
  EXPECT_EQ(qkv.hf_shape(), (std::vector<int64_t>{16, 48}));  // Conv1D: [in, out]
  EXPECT_EQ(gpt[10].hf, "transformer.h.0.mlp.c_fc.weight");
  EXPECT_EQ(gpt[10].hf_shape(), (std::vector<int64_t>{16, 64}));
  auto untied = hf_tensor_names(tiny_gpt(false));
  ASSERT_EQ(untied.size(), 29u);
  EXPECT_EQ(untied.back().hf, "lm_head.weight");
  EXPECT_FALSE(untied.back().transpose);

  const auto llama = hf_tensor_names(tiny_llama(false, false));
  EXPECT_EQ(llama.size(), 1u + 2 * 9 + 1 + 1);
  EXPECT_EQ(llama[0].hf, "model.embed_tokens.weight");
  EXPECT_EQ(llama[2].gtrain, "layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(llama[2].shape, (std::vector<int64_t>{32, 32}));
  EXPECT_EQ(llama[3].shape, (std::vector<int64_t>{16, 32}));  // k_proj: 2 kv heads of 8
  EXPECT_EQ(llama[7].gtrain, "layers.0.mlp.gate_proj.weight");
  EXPECT_EQ(llama[9].shape, (std::vector<int64_t>{32, 48}));  // down_proj [C, I]
  EXPECT_EQ(llama.back().hf, "lm_head.weight");
  const auto qwen2 = hf_tensor_names(tiny_llama(true, false));
  EXPECT_EQ(qwen2.size(), 1u + 2 * 12 + 1 + 1);
  EXPECT_EQ(qwen2[3].hf, "model.layers.0.self_attn.q_proj.bias");
  const auto qwen3 = hf_tensor_names(tiny_llama(false, true));
  EXPECT_EQ(qwen3.size(), 1u + 2 * 11 + 1 + 1);
  EXPECT_EQ(qwen3[6].hf, "model.layers.0.self_attn.q_norm.weight");
  EXPECT_EQ(qwen3[6].shape, (std::vector<int64_t>{8}));

  EXPECT_TRUE(is_hf_buffer("transformer.h.3.attn.bias"));
  EXPECT_TRUE(is_hf_buffer("transformer.h.3.attn.masked_bias"));
  EXPECT_TRUE(is_hf_buffer("model.layers.0.self_attn.rotary_emb.inv_freq"));
  EXPECT_FALSE(is_hf_buffer("transformer.h.3.attn.c_attn.bias"));
  EXPECT_FALSE(is_hf_buffer("model.layers.0.self_attn.q_proj.bias"));
  ModelConfig mlp;
  EXPECT_THROW(hf_tensor_names(mlp), ConfigError);
}

TEST(HfCheckpoint, WritesAndReadsBack) {
  test::TempDir tmp;
  const ModelConfig gpt = tiny_gpt(false);
  const auto p = random_params(gpt);
  auto r = export_to(tmp.file("gpt"), gpt, p);
  EXPECT_EQ(r.files, std::vector<std::string>{tmp.file("gpt/model.safetensors")});
  EXPECT_EQ(r.tensors, 29);
  EXPECT_TRUE(fs::exists(tmp.file("gpt/config.json")));
  EXPECT_FALSE(fs::exists(tmp.file("gpt/model.safetensors.index.json")));
  SafetensorsReader file(tmp.file("gpt/model.safetensors"));
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.metadata().at("origin"), "test");
  EXPECT_TRUE(torch::equal(file.read("transformer.h.1.attn.c_attn.weight"), p.at("h.1.attn.qkv.weight").t()));
  HfCheckpointReader back(tmp.file("gpt"));
  EXPECT_EQ(back.shape().family, HfFamily::gpt2);
  EXPECT_EQ(back.tensors().size(), 29u);
  EXPECT_EQ(back.ignored(), 0);
  for (const auto& [name, t] : p) EXPECT_TRUE(torch::equal(back.read(name), t)) << name;

  // Qwen2 in bfloat16 over several shards with an index; read back as float32 of the bf16 values.
  const ModelConfig qwen2 = tiny_llama(true, false);
  const auto q = random_params(qwen2);
  r = export_to(tmp.file("qwen2"), qwen2, q, torch::kBFloat16, 8000);
  ASSERT_GT(r.files.size(), 2u);
  EXPECT_EQ(fs::path(r.files[0]).filename(), "model-00001-of-0000" + std::to_string(r.files.size()) + ".safetensors");
  const auto index = nlohmann::json::parse(test::read_file(tmp.file("qwen2/model.safetensors.index.json")));
  EXPECT_EQ(index.at("weight_map").size(), q.size());
  EXPECT_EQ(index.at("metadata").at("total_size"), r.bytes);
  const auto config = nlohmann::json::parse(test::read_file(tmp.file("qwen2/config.json")));
  EXPECT_EQ(config.at("architectures"), nlohmann::json({"Qwen2ForCausalLM"}));
  EXPECT_EQ(config.at("torch_dtype"), "bfloat16");
  HfCheckpointReader q_back(tmp.file("qwen2"));
  EXPECT_EQ(q_back.shape().family, HfFamily::qwen2);
  for (const auto& [name, t] : q) {
    EXPECT_EQ(q_back.stored_dtype(name), torch::kBFloat16);
    EXPECT_TRUE(torch::equal(q_back.read(name), t.to(torch::kBFloat16).to(torch::kFloat32))) << name;
  }
  // An earlier export is replaced; nothing temporary is left beside it.
  r = export_to(tmp.file("qwen2"), qwen2, q);
  EXPECT_EQ(r.files.size(), 1u);
  EXPECT_FALSE(fs::exists(tmp.file("qwen2/model.safetensors.index.json")));
  EXPECT_FALSE(fs::exists(r.files.empty() ? "" : tmp.file("qwen2/model-00001-of-00002.safetensors")));
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(tmp.path())) entries += e.path().filename().string().size() > 0;
  EXPECT_EQ(entries, 2u);  // gpt and qwen2
  // A directory that is not an export is not replaced.
  fs::create_directories(tmp.file("mine"));
  test::write_file(tmp.file("mine/notes.txt"), "keep");
  EXPECT_THROW(export_to(tmp.file("mine"), qwen2, q), ConfigError);
  EXPECT_EQ(test::read_file(tmp.file("mine/notes.txt")), "keep");
}

// Buffers (GPT-2's causal mask) and a tied model's lm_head are skipped, not errors.
TEST(HfCheckpoint, SkipsBuffersAndTiedHead) {
  test::TempDir tmp;
  const ModelConfig gpt = tiny_gpt(true);
  const auto p = random_params(gpt);
  export_to(tmp.file("gpt"), gpt, p);
  rewrite(tmp.file("gpt/model.safetensors"), [&](Tensors& t) {
    t.push_back({"transformer.h.0.attn.bias", torch::ones({1, 1, 8, 8})});
    t.push_back({"transformer.h.1.attn.masked_bias", torch::ones({1})});
    t.push_back({"lm_head.weight", p.at("wte.weight").to(torch::kFloat16)});
  });
  HfCheckpointReader r(tmp.file("gpt"));
  EXPECT_EQ(r.ignored(), 3);
  EXPECT_EQ(r.tensors().size(), 28u);
  EXPECT_TRUE(torch::equal(r.read("wte.weight"), p.at("wte.weight")));
}

TEST(HfCheckpoint, ErrorsNameFileAndTensor) {
  test::TempDir tmp;
  const ModelConfig gpt = tiny_gpt();
  const auto p = random_params(gpt);
  const std::string file = tmp.file("g/model.safetensors"), config = tmp.file("g/config.json");
  auto fresh = [&] {
    fs::remove_all(tmp.file("g"));
    export_to(tmp.file("g"), gpt, p);
  };
  fresh();
  rewrite(file, [](Tensors& t) {
    for (auto& [name, x] : t)
      if (name == "transformer.h.0.attn.c_attn.weight") x = torch::zeros({16, 40});
  });
  EXPECT_EQ(reader_error(tmp.file("g")),
            file + ": tensor 'transformer.h.0.attn.c_attn.weight' is [16, 40] (" + config + " gives [16, 48])");
  fresh();
  rewrite(file, [](Tensors& t) {
    t.erase(std::remove_if(t.begin(), t.end(), [](const auto& x) { return x.first == "transformer.ln_f.bias"; }),
            t.end());
  });
  EXPECT_EQ(reader_error(tmp.file("g")), file + ": no tensor 'transformer.ln_f.bias' (" + config + " gives [16])");
  fresh();
  rewrite(file, [](Tensors& t) { t.push_back({"transformer.h.2.ln_1.weight", torch::ones({16})}); });
  EXPECT_EQ(reader_error(tmp.file("g")),
            file +
                ": tensor 'transformer.h.2.ln_1.weight' is not a parameter of a GPT2LMHeadModel with this "
                "config.json");
  fresh();
  rewrite(file, [](Tensors& t) { t[0].second = t[0].second.to(torch::kInt32); });
  EXPECT_EQ(reader_error(tmp.file("g")),
            file + ": tensor '" + SafetensorsReader(file).tensors()[0].name + "' is Int, not a floating-point type");

  // Shards: one truncated, one missing; no weights at all.
  fs::remove_all(tmp.file("g"));
  const auto r = export_to(tmp.file("g"), gpt, p, torch::kFloat32, 4096);
  ASSERT_GT(r.files.size(), 2u);
  fs::resize_file(r.files[1], fs::file_size(r.files[1]) - 100);
  const std::string truncated = reader_error(tmp.file("g"));
  EXPECT_EQ(truncated.rfind(r.files[1] + ": tensor '", 0), 0u) << truncated;
  EXPECT_NE(truncated.find("do not hold its"), std::string::npos) << truncated;
  fs::remove(r.files[1]);
  const std::string missing = reader_error(tmp.file("g"));
  EXPECT_EQ(missing.rfind(tmp.file("g/model.safetensors.index.json") + ": tensor '", 0), 0u) << missing;
  EXPECT_NE(missing.find(r.files[1] + " does not exist"), std::string::npos) << missing;
  for (const auto& f : r.files)
    if (fs::exists(f)) fs::remove(f);
  fs::remove(tmp.file("g/model.safetensors.index.json"));
  EXPECT_EQ(reader_error(tmp.file("g")),
            tmp.file("g") + ": has config.json but neither model.safetensors nor model.safetensors.index.json");
}

// A job whose [model] is the Hugging Face directory's, starting from its weights.
std::string hf_job(const std::string& dir, int steps = 2) {
  return "[model]\nname = \"hf\"\n[data]\nkind = \"synthetic\"\n[train]\nglobal_batch = 4\nsteps = " +
         std::to_string(steps) + "\n[checkpoint]\ninterval = 0\ninit_from = \"" + dir +
         "\"\n[log]\nprogress = \"none\"\n";
}

// checkpoint.init_from with a Hugging Face directory, then `gtrain ckpt export --format hf` of the
// run: the tensors trained, under their Hugging Face names; bad directories are one line, exit 2.
TEST(Cli, HfInitFromAndExport) {
  test::TempDir dir;
  const ModelConfig gpt = tiny_gpt();
  const auto p = random_params(gpt);
  export_to(dir.file("hf"), gpt, p, torch::kBFloat16);
  rewrite(dir.file("hf/model.safetensors"), [](Tensors& t) {
    t.push_back({"transformer.h.0.attn.bias", torch::ones({1, 1, 8, 8})});
  });
  test::write_file(dir.file("job.toml"), hf_job(dir.file("hf")));
  auto r = gtrain_run(dir.file("job.toml"), dir.file("run"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("gtrain: weights from " + dir.file("hf") + " (28 tensors, checkpoint.init_from"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("gtrain: checkpoint.init_from: 1 tensors in " + dir.file("hf") + " that are not parameters"),
            std::string::npos)
      << r.output;
  const std::string resolved = test::read_file(dir.file("run/config.toml"));
  EXPECT_NE(resolved.find("name = \"gpt\""), std::string::npos) << resolved;

  r = run_command(GTRAIN_BINARY + " ckpt export " + dir.file("run") + " " + dir.file("out") + " --format hf");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(dir.file("out") + ": Hugging Face GPT2LMHeadModel, 28 tensors (float32), 1 file, "),
            std::string::npos)
      << r.output;
  const auto cks = committed_checkpoint_dirs(dir.file("run/checkpoints"));
  ASSERT_EQ(cks.size(), 1u);
  CheckpointReader ck(cks.back().second.string());
  HfCheckpointReader out(dir.file("out"));
  EXPECT_EQ(out.shape().model.n_embd, 16);
  EXPECT_TRUE(out.shape().model.tied_embeddings);
  for (const auto& t : out.tensors()) EXPECT_TRUE(torch::equal(out.read(t.gtrain), ck.read(t.gtrain))) << t.gtrain;
  // Trained: the weights moved from the imported ones.
  EXPECT_FALSE(
      torch::equal(out.read("h.0.mlp.fc.weight"), p.at("h.0.mlp.fc.weight").to(torch::kBFloat16).to(torch::kFloat)));

  r = run_command(GTRAIN_BINARY + " ckpt export " + dir.file("run") + " " + dir.file("out") +
                  " --format hf --dtype bf16 --max-shard-size 4KB");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::exists(dir.file("out/model.safetensors.index.json")));
  EXPECT_FALSE(fs::exists(dir.file("out/model.safetensors")));
  EXPECT_EQ(HfCheckpointReader(dir.file("out")).stored_dtype("wte.weight"), torch::kBFloat16);

  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {" --format onnx", "gtrain: config error: --format: 'onnx' is not one of safetensors, hf, peft\n"},
           {" --format hf --max-shard-size 5XB",
            "gtrain: config error: --max-shard-size: '5XB' is not a positive size such as 5GB, 500MB or 2GiB\n"},
           {" --format hf --dtype int8",
            "gtrain: config error: --dtype: 'int8' is not one of stored, float32, bfloat16, float16 (or fp32, "
            "bf16, fp16 as precision.dtype spells them)\n"}}) {
    r = run_command(GTRAIN_BINARY + " ckpt export " + dir.file("run") + " " + dir.file("x") + args);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_EQ(r.output, message);
  }
  // The LoRA exports of a run that trained every weight, and --merge without --format hf: one line each.
  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {" --format peft", "holds a whole model, not LoRA adapters (the run had no [adapter])"},
           {" --format hf --merge", "holds a whole model, not LoRA adapters (the run had no [adapter])"},
           {" --merge", "--merge: goes with --format hf"}}) {
    r = run_command(GTRAIN_BINARY + " ckpt export " + dir.file("run") + " " + dir.file("x") + args);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_NE(r.output.find(message), std::string::npos) << r.output;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  }
  // A model with no Hugging Face form.
  test::write_file(dir.file("mlp.toml"), kTiny);
  ASSERT_EQ(gtrain_run(dir.file("mlp.toml"), dir.file("mlp"), " --set train.steps=2").exit_code, 0);
  r = run_command(GTRAIN_BINARY + " ckpt export " + dir.file("mlp") + " " + dir.file("x") + " --format hf");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output,
            "gtrain: config error: --format hf: model.name = \"mlp\" has no Hugging Face form (gpt and "
            "llama have)\n");
}

// A Qwen3 directory into model.name = "llama" (the job gives only seq_len), trained, and exported back
// as Qwen3ForCausalLM with the trained tensors.
TEST(Cli, HfLlamaFamilyRoundTrip) {
  test::TempDir dir;
  ModelConfig qwen3 = tiny_llama(false, true);
  qwen3.tied_embeddings = true;
  export_to(dir.file("q3"), qwen3, random_params(qwen3));
  test::write_file(dir.file("job.toml"),
                   "[model]\nname = \"llama\"\nseq_len = 8\n[data]\nkind = \"synthetic\"\n"
                   "[train]\nglobal_batch = 4\nsteps = 2\n[checkpoint]\ninterval = 0\n"
                   "init_from = \"" +
                       dir.file("q3") + "\"\n[log]\nprogress = \"none\"\n");
  auto r = gtrain_run(dir.file("job.toml"), dir.file("run"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const size_t tensors = hf_tensor_names(qwen3).size();
  EXPECT_NE(r.output.find("gtrain: weights from " + dir.file("q3") + " (" + std::to_string(tensors) + " tensors"),
            std::string::npos)
      << r.output;
  r = run_command(GTRAIN_BINARY + " ckpt export " + dir.file("run") + " " + dir.file("out") + " --format hf");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Hugging Face Qwen3ForCausalLM, " + std::to_string(tensors) + " tensors"), std::string::npos)
      << r.output;
  const auto config = nlohmann::json::parse(test::read_file(dir.file("out/config.json")));
  EXPECT_EQ(config.at("head_dim"), 8);
  EXPECT_EQ(config.at("num_key_value_heads"), 2);
  EXPECT_EQ(config.at("tie_word_embeddings"), true);
  CheckpointReader ck(resolve_checkpoint_path(dir.file("run")));
  HfCheckpointReader out(dir.file("out"));
  for (const auto& t : out.tensors()) EXPECT_TRUE(torch::equal(out.read(t.gtrain), ck.read(t.gtrain))) << t.gtrain;
  // A key the job sets against config.json: one line naming both, exit 2, before any rank starts.
  r = gtrain_run(dir.file("job.toml"), dir.file("run2"), " --set model.n_kv_head=4");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output, "gtrain: config error: --set model.n_kv_head=4: model.n_kv_head = 4 but " + dir.file("q3") +
                          "/config.json has num_key_value_heads = 2\n");
}

// Each bad directory stops `gtrain run` with one line naming the file and the tensor, exit 2.
TEST(Cli, HfInitFromErrors) {
  test::TempDir dir;
  const ModelConfig gpt = tiny_gpt();
  const auto p = random_params(gpt);
  auto bad = [&](const std::string& name, const std::function<void(const std::string&)>& damage, int64_t shard) {
    export_to(dir.file(name), gpt, p, torch::kFloat32, shard);
    damage(dir.file(name));
    test::write_file(dir.file(name + ".toml"), hf_job(dir.file(name), 1));
    return gtrain_run(dir.file(name + ".toml"), dir.file("run-" + name));
  };
  const int64_t one_file = int64_t{1} << 30;
  struct Case {
    std::string name;
    std::function<void(const std::string&)> damage;
    int64_t shard;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {"shape",
       [](const std::string& d) {
         rewrite(d + "/model.safetensors", [](Tensors& t) {
           for (auto& [n, x] : t)
             if (n == "transformer.wpe.weight") x = torch::zeros({4, 16});
         });
       },
       one_file, "model.safetensors: tensor 'transformer.wpe.weight' is [4, 16] ("},
      {"missing",
       [](const std::string& d) {
         rewrite(d + "/model.safetensors", [](Tensors& t) {
           t.erase(std::remove_if(t.begin(), t.end(),
                                  [](const auto& x) { return x.first == "transformer.h.1.mlp.c_fc.weight"; }),
                   t.end());
         });
       },
       one_file, "model.safetensors: no tensor 'transformer.h.1.mlp.c_fc.weight' ("},
      {"arch",
       [](const std::string& d) {
         auto j = nlohmann::json::parse(test::read_file(d + "/config.json"));
         j["architectures"] = {"GPTNeoXForCausalLM"};
         test::write_file(d + "/config.json", j.dump());
       },
       one_file, "config.json: architectures: unknown architecture 'GPTNeoXForCausalLM'"},
      {"truncated",
       [](const std::string& d) {
         for (const auto& e : fs::directory_iterator(d))
           if (e.path().filename().string().rfind("model-00002-of-", 0) == 0) fs::resize_file(e.path(), 1000);
       },
       3000, "model-00002-of-"},
  };
  for (const auto& c : cases) {
    const auto r = bad(c.name, c.damage, c.shard);
    EXPECT_EQ(r.exit_code, 2) << c.name << ": " << r.output;
    EXPECT_EQ(test::lines(r.output).size(), 1u) << c.name << ": " << r.output;
    EXPECT_EQ(r.output.rfind("gtrain: config error: checkpoint.init_from: " + dir.file(c.name), 0), 0u)
        << c.name << ": " << r.output;
    EXPECT_NE(r.output.find(c.needle), std::string::npos) << c.name << ": " << r.output;
  }
}

}  // namespace
}  // namespace gtrain
