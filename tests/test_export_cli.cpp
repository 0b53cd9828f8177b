// test_export_cli.cpp: `gtrain ckpt export` writes the model as safetensors; checkpoint.init_from
// starts a fresh run from given weights.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/core/checkpoint_dirs.h"
#include "runtime/core/errors.h"
#include "tests/support/cli_util.h"
#include "tests/support/test_util.h"
#include "tests/support/tiny_configs.h"

namespace gtrain {
namespace {

namespace fs = std::filesystem;
using test::run_command;

// A 2-block GPT trained 3 steps: 28 model tensors (embeddings 2, 12 a block, ln_f 2), 57 of optimizer state.
const std::string kTinyGpt = test::tiny_job("gpt", {{"train.steps", "3"}, {"checkpoint.interval", "0"}});

// `gtrain ckpt export`: the model's full tensors in one safetensors file, equal to the checkpoint's,
// optimizer state only on request, casts on request; bad requests are one-line errors, exit 2.
TEST(Cli, CkptExportWritesTheModelAsSafetensors) {
  test::TempDir dir;
  test::write_file(dir.file("gpt.toml"), kTinyGpt);
  auto r = gtrain_run(dir.file("gpt.toml"), dir.file("run"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto cks = committed_checkpoint_dirs(dir.file("run/checkpoints"));
  ASSERT_EQ(cks.size(), 1u);
  CheckpointReader ck(cks.back().second.string());

  r = run_command(GTRAIN_BINARY + " ckpt export " + dir.file("run") + " " + dir.file("w.safetensors"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("28 tensors (as stored)"), std::string::npos) << r.output;  // 2 + 12 a block x 2 + ln_f's 2
  EXPECT_NE(r.output.find("57 optimizer tensors left out"), std::string::npos) << r.output;
  SafetensorsReader w(dir.file("w.safetensors"));
  ASSERT_EQ(w.tensors().size(), 28u);
  for (const auto& t : w.tensors()) {
    EXPECT_EQ(t.name.find("exp_avg"), std::string::npos) << t.name;
    EXPECT_TRUE(torch::equal(w.read(t.name), ck.read(t.name))) << t.name;
  }
  EXPECT_EQ(w.read("wte.weight").sizes().vec(), (std::vector<int64_t>{32, 16}));
  EXPECT_EQ(w.metadata().at("format"), "pt");
  EXPECT_EQ(w.metadata().at("gtrain_step"), "3");
  const auto model = nlohmann::json::parse(w.metadata().at("gtrain_model"));
  EXPECT_EQ(model.at("name"), "gpt");
  EXPECT_EQ(model.at("n_layer"), 2);
  EXPECT_EQ(model.at("tied_embeddings"), true);
  // The layout is the format's: header length, then JSON padded so the data starts 8-byte aligned.
  const std::string bytes = test::read_file(dir.file("w.safetensors"));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ((8 + n) % 8, 0u);
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header.at("wte.weight").at("dtype"), "F32");

  r = run_command(GTRAIN_BINARY + " ckpt export " + cks.back().second.string() + " " + dir.file("w16.safetensors") +
                  " --dtype bfloat16 --optimizer");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  SafetensorsReader w16(dir.file("w16.safetensors"));
  EXPECT_EQ(w16.tensors().size(), ck.tensor_names().size());
  EXPECT_TRUE(torch::equal(w16.read("h.1.mlp.fc.weight"), ck.read("h.1.mlp.fc.weight").to(torch::kBFloat16)));
  EXPECT_TRUE(torch::equal(w16.read("h.1.mlp.fc.weight.exp_avg_sq"),
                           ck.read("h.1.mlp.fc.weight.exp_avg_sq").to(torch::kBFloat16)));
  EXPECT_EQ(w16.read("optimizer.step").scalar_type(), torch::kInt64);  // not a float: kept
  EXPECT_EQ(w16.read("optimizer.step").item<int64_t>(), 3);

  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {dir.file("run") + " " + dir.file("x.st") + " --dtype int8",
            "gtrain: config error: --dtype: 'int8' is not one of stored, float32, bfloat16, float16 (or fp32, bf16, "
            "fp16 as precision.dtype spells them)\n"},
           {dir.file("run") + " " + dir.file("no/x.st"),
            "gtrain: config error: " + dir.file("no/x.st") + ": folder " + dir.file("no") +
                " does not exist; hint: create the folder first, or give a path in an existing one\n"},
           {dir.file("run") + " " + dir.path(),
            "gtrain: config error: " + dir.path() + ": is a directory; hint: give the .safetensors file to write\n"},
           {dir.file("gpt.toml") + " " + dir.file("x.st"),
            "gtrain: config error: " + dir.file("gpt.toml") +
                ": not a checkpoint, and holds no committed checkpoint\n"}}) {
    r = run_command(GTRAIN_BINARY + " ckpt export " + args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_EQ(r.output, message);
  }
  EXPECT_FALSE(fs::exists(dir.file("x.st")));
  // Only a regular file (or nothing) is replaced; a symlink is written through; the checkpoint
  // itself is never a destination.
  ASSERT_EQ(::mkfifo(dir.file("fifo").c_str(), 0600), 0);
  fs::create_directories(dir.file("real"));
  fs::create_symlink("real/t.safetensors", dir.file("link.safetensors"));  // dangling until written
  const std::string step_dir = cks.back().second.string();
  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {dir.file("fifo"), dir.file("fifo") + ": is not a regular file (a device, FIFO or socket)"
                                                 "; hint: give the .safetensors file to write"},
           {step_dir + "/x.safetensors", step_dir + "/x.safetensors: is inside the checkpoint it exports (" + step_dir +
                                             "); hint: write it elsewhere"},
           {"''", "OUT: expected the path of the .safetensors file to write, got ''"}}) {
    r = run_command(GTRAIN_BINARY + " ckpt export " + dir.file("run") + " " + args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_EQ(r.output, "gtrain: config error: " + message + "\n");
  }
  EXPECT_TRUE(fs::is_fifo(dir.file("fifo")));
  EXPECT_FALSE(fs::exists(step_dir + "/x.safetensors"));
  r = run_command(GTRAIN_BINARY + " ckpt export " + dir.file("run") + " " + dir.file("link.safetensors"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(fs::is_symlink(dir.file("link.safetensors")));
  EXPECT_EQ(SafetensorsReader(dir.file("real/t.safetensors")).tensors().size(), 28u);
}

// checkpoint.init_from: a fresh run starts from exported weights (a file) or a run's checkpoint (a
// directory), in any layout; a model they do not fit is refused naming the tensors; a resume reads
// the run's own checkpoint instead.
TEST(Cli, InitFromStartsAFreshRunFromGivenWeights) {
  test::TempDir dir;
  test::write_file(dir.file("gpt.toml"), kTinyGpt);
  auto r = gtrain_run(dir.file("gpt.toml"), dir.file("a"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(GTRAIN_BINARY + " ckpt export " + dir.file("a") + " " + dir.file("a.safetensors"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  SafetensorsReader a(dir.file("a.safetensors"));
  // One step at a learning rate of 1e-9 moves no weight by more than about 1e-9.
  const std::string slow = " --set train.steps=1 --set optimizer.learning_rate=1e-9 --set train.warmup_steps=0";
  const auto largest_change = [&](const std::string& run) {
    auto e = run_command(GTRAIN_BINARY + " ckpt export " + dir.file(run) + " " + dir.file(run + ".safetensors"));
    EXPECT_EQ(e.exit_code, 0) << e.output;
    SafetensorsReader w(dir.file(run + ".safetensors"));
    double worst = 0;
    for (const auto& t : a.tensors())
      worst = std::max(worst, (w.read(t.name) - a.read(t.name)).abs().max().item<double>());
    return worst;
  };
  r = gtrain_run(dir.file("gpt.toml"), dir.file("b"),
                 slow + " --set checkpoint.init_from=" + dir.file("a.safetensors"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("gtrain: weights from " + dir.file("a.safetensors") + " (28 tensors"), std::string::npos)
      << r.output;
  EXPECT_LT(largest_change("b"), 1e-6);
  r = gtrain_run(dir.file("gpt.toml"), dir.file("c"), slow + " --set checkpoint.init_from=" + dir.file("a"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_LT(largest_change("c"), 1e-6);
  r = gtrain_run(dir.file("gpt.toml"), dir.file("d"), slow);  // without it: the model's own initialisation
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_GT(largest_change("d"), 1e-3);

  // A resume reads its own checkpoint, and says checkpoint.init_from was not read.
  r = gtrain_run(dir.file("gpt.toml"), dir.file("b"),
                 " --set train.steps=2 --set checkpoint.init_from=" + dir.file("d.safetensors"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("is for fresh starts"), std::string::npos) << r.output;

  // Weights that do not fit: wider, fewer blocks, absent.
  r = gtrain_run(dir.file("gpt.toml"), dir.file("e"),
                 " --set model.n_embd=32 --set checkpoint.init_from=" + dir.file("a.safetensors"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("checkpoint.init_from: " + dir.file("a.safetensors") +
                          " does not fit the model: 'h.0.attn.proj.bias' is [16], the model's [32]"),
            std::string::npos)
      << r.output;
  r = gtrain_run(dir.file("gpt.toml"), dir.file("f"),
                 " --set model.n_layer=1 --set checkpoint.init_from=" + dir.file("a.safetensors"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("'h.1.attn.proj.bias' is not a tensor of this model"), std::string::npos) << r.output;
  r = gtrain_run(dir.file("gpt.toml"), dir.file("g"), " --set checkpoint.init_from=" + dir.file("none.safetensors"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output, "gtrain: config error: checkpoint.init_from: " + dir.file("none.safetensors") +
                          " does not exist (expected a .safetensors file, a checkpoint or run directory, or a Hugging "
                          "Face model directory)\n");
  EXPECT_FALSE(fs::exists(dir.file("e/checkpoints/step_00000003")));
  // Not safetensors: refused by the launcher before any rank starts, naming the key.
  r = gtrain_run(dir.file("gpt.toml"), dir.file("h"), " --set checkpoint.init_from=" + dir.file("gpt.toml"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output.rfind(
                "gtrain: config error: checkpoint.init_from: " + dir.file("gpt.toml") + ": not a safetensors file", 0),
            0u)
      << r.output;
  // A tensor of the right shape but not floating point (it would train to nan).
  {
    std::vector<SafetensorsSpec> specs = a.tensors();
    for (auto& spec : specs)
      if (spec.name == "h.0.ln1.bias") spec.dtype = torch::kInt64;
    write_safetensors(dir.file("int.safetensors"), specs, {}, [&](size_t i) {
      const auto t = a.read(specs[i].name);
      return specs[i].dtype == torch::kInt64 ? t.to(torch::kInt64) : t;
    });
  }
  r = gtrain_run(dir.file("gpt.toml"), dir.file("i"), " --set checkpoint.init_from=" + dir.file("int.safetensors"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("'h.0.ln1.bias' is Long, not a floating-point type"), std::string::npos) << r.output;
  // A run directory whose checkpoint.dir is elsewhere: its config.toml says where.
  // (--force: only where it saves differs from a run beside it, so the run is a repeat of that one.)
  r = gtrain_run(dir.file("gpt.toml"), dir.file("j"), " --force --set checkpoint.dir=" + dir.file("elsewhere"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = gtrain_run(dir.file("gpt.toml"), dir.file("k"), slow + " --set checkpoint.init_from=" + dir.file("j"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("gtrain: weights from " + dir.file("elsewhere/step_00000003")), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace gtrain
