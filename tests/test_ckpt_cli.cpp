// test_ckpt_cli.cpp: gtrain ckpt inspect / verify / export and checkpoint.init_from end to end through
// the binary: what they print, exit codes, and the files they write read back.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/core/checkpoint_dirs.h"
#include "tests/support/test_util.h"
#include "tests/support/tiny_configs.h"

namespace gtrain {
namespace {

namespace fs = std::filesystem;
using test::run_command;

const std::string kTinyGpt = test::tiny_job("gpt");

// A run of the tiny gpt in `run` (checkpoints at steps 2 and 4); the committed checkpoints.
std::vector<std::string> tiny_gpt_run(const test::TempDir& dir, const std::string& run) {
  test::write_file(dir.file("gpt.toml"), kTinyGpt);
  const auto r = run_command(GTRAIN_BINARY + " run " + dir.file("gpt.toml") + " --run-dir " + dir.file(run));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  std::vector<std::string> out;
  for (const auto& [step, path] : committed_checkpoint_dirs(dir.file(run + "/checkpoints"))) out.push_back(path);
  return out;
}

// The "  model" line of gtrain ckpt inspect, and the export's gtrain_model metadata: the keys of the
// model's kind only, each value as JSON once (a string quoted once, numbers and arrays as such).
TEST(CkptCli, InspectAndExportListOnlyTheModelsKeys) {
  test::TempDir dir;
  const auto cks = tiny_gpt_run(dir, "run");
  ASSERT_EQ(cks.size(), 2u);
  const std::string gpt =
      R"({"bos_token_id":-1,"dropout":0.0,"eos_token_id":[],"init_std":0.02,"max_positions":0,"n_embd":16,)"
      R"("n_head":2,"n_layer":2,"name":"gpt","pad_token_id":-1,"seq_len":8,"tied_embeddings":true,"vocab":32})";
  auto r = run_command(GTRAIN_BINARY + " ckpt inspect " + dir.file("run"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\n  model      " + gpt + "\n"), std::string::npos) << r.output;
  r = run_command(GTRAIN_BINARY + " ckpt export " + dir.file("run") + " " + dir.file("w.safetensors"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(SafetensorsReader(dir.file("w.safetensors")).metadata().at("gtrain_model"), gpt);

  // An mlp's: its widths, no gpt or cnn key.
  test::write_file(dir.file("mlp.toml"),
                   "[model]\nname = \"mlp\"\nhidden = [16, 8]\n[data]\nkind = \"synthetic\"\nsynthetic_samples = 64\n"
                   "[train]\nglobal_batch = 8\nsteps = 1\n[log]\nprogress = \"none\"\n");
  r = run_command(GTRAIN_BINARY + " run " + dir.file("mlp.toml") + " --run-dir " + dir.file("mlp"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(GTRAIN_BINARY + " ckpt inspect " + dir.file("mlp"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("\n  model      {\"dropout\":0.0,\"hidden\":[16,8],\"name\":\"mlp\"}\n"), std::string::npos)
      << r.output;
}

// --dtype takes precision.dtype's spellings (bf16, fp16, fp32) as well as the long ones.
TEST(CkptCli, ExportTakesPrecisionDtypeSpellings) {
  test::TempDir dir;
  const auto cks = tiny_gpt_run(dir, "run");
  ASSERT_EQ(cks.size(), 2u);
  CheckpointReader ck(cks.back());
  for (const auto& [flag, dtype, name] :
       std::vector<std::tuple<std::string, torch::ScalarType, std::string>>{{"bf16", torch::kBFloat16, "bfloat16"},
                                                                            {"fp16", torch::kFloat16, "float16"},
                                                                            {"fp32", torch::kFloat32, "float32"}}) {
    const std::string out = dir.file(flag + ".safetensors");
    const auto r = run_command(GTRAIN_BINARY + " ckpt export " + dir.file("run") + " " + out + " --dtype " + flag);
    ASSERT_EQ(r.exit_code, 0) << flag << "\n" << r.output;
    EXPECT_NE(r.output.find(": 28 tensors (" + name + "), "), std::string::npos) << r.output;
    SafetensorsReader w(out);
    EXPECT_EQ(w.read("wte.weight").scalar_type(), dtype) << flag;
    EXPECT_TRUE(torch::equal(w.read("wte.weight"), ck.read("wte.weight").to(dtype))) << flag;
  }
  const auto r =
      run_command(GTRAIN_BINARY + " ckpt export " + dir.file("run") + " " + dir.file("x.st") + " --dtype f16");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output,
            "gtrain: config error: --dtype: 'f16' is not one of stored, float32, bfloat16, float16 (or fp32, bf16, "
            "fp16 as precision.dtype spells them)\n");
}

// Flips bytes [begin, end) of a file.
void flip(const std::string& path, size_t begin, size_t end) {
  std::string bytes = test::read_file(path);
  for (size_t i = begin; i < end && i < bytes.size(); ++i) bytes[i] = static_cast<char>(bytes[i] ^ 0xff);
  test::write_file(path, bytes);
}

// A damaged data file is one line (how many of its pieces fail, the first tensors), then the verdict;
// --all checks every kept checkpoint and sums up.
TEST(CkptCli, VerifySummarisesPerFileAndAllChecksEveryCheckpoint) {
  test::TempDir dir;
  const auto cks = tiny_gpt_run(dir, "run");
  ASSERT_EQ(cks.size(), 2u);
  const std::string shard = cks.back() + "/shard_0.bin";
  const std::vector<std::string> names = CheckpointReader(cks.back()).tensor_names();
  ASSERT_EQ(names.size(), 85u);  // 28 model tensors, 2 moments each, optimizer.step
  auto r = run_command(GTRAIN_BINARY + " ckpt verify " + dir.file("run") + " --all");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, cks[0] + ": OK (85 tensors, every checksum matches)\n" + cks[1] +
                          ": OK (85 tensors, every checksum matches)\n2 checkpoints in " + dir.file("run/checkpoints") +
                          ": 2 passed, 0 failed\n");

  // Every byte of the newest's data file: one line for it, not 85.
  flip(shard, 0, fs::file_size(shard));
  r = run_command(GTRAIN_BINARY + " ckpt verify " + dir.file("run"));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.output, shard + ": checksum mismatch in 85 of its 85 pieces ('" + names[0] + "', '" + names[1] + "', '" +
                          names[2] + "' and 82 more); the file is corrupt\n" + cks[1] + ": FAILED (1 problem)\n");
  r = run_command(GTRAIN_BINARY + " ckpt verify " + dir.file("run/checkpoints") + " --all");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(test::lines(r.output),
            (std::vector<std::string>{cks[0] + ": OK (85 tensors, every checksum matches)",
                                      test::lines(r.output).at(1),  // the damaged file's line, as above
                                      cks[1] + ": FAILED (1 problem)",
                                      "2 checkpoints in " + dir.file("run/checkpoints") + ": 1 passed, 1 failed"}));
  EXPECT_EQ(test::lines(r.output).at(1).rfind(shard + ": checksum mismatch in 85 of its 85 pieces", 0), 0u);

  // One byte of one piece: that tensor alone.
  flip(shard, 0, fs::file_size(shard));  // restored
  const auto manifest = nlohmann::json::parse(test::read_file(cks.back() + "/manifest.json"));
  const auto& piece = manifest.at("tensors").at("wte.weight").at("pieces").at(0);
  const size_t at = piece.at("offset").get<size_t>() + 3;
  flip(shard, at, at + 1);
  r = run_command(GTRAIN_BINARY + " ckpt verify " + cks.back());
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.output, shard + ": checksum mismatch in 1 of its 85 pieces ('wte.weight'); the file is corrupt\n" +
                          cks[1] + ": FAILED (1 problem)\n");
  // --all from a checkpoint's own directory: its siblings too.
  r = run_command(GTRAIN_BINARY + " ckpt verify " + cks.front() + " --all");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("2 checkpoints in " + dir.file("run/checkpoints") + ": 1 passed, 1 failed\n"),
            std::string::npos)
      << r.output;
}

// checkpoint.init_from reads the model's tensors and says how many optimizer tensors it ignored.
TEST(CkptCli, InitFromSaysItIgnoresOptimizerState) {
  test::TempDir dir;
  const auto cks = tiny_gpt_run(dir, "a");
  ASSERT_EQ(cks.size(), 2u);
  const std::string run = std::string(GTRAIN_BINARY) + " run " + dir.file("gpt.toml") + " --set train.steps=1 ";
  auto r = run_command(run + "--run-dir " + dir.file("b") + " --set checkpoint.init_from=" + dir.file("a"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("gtrain: weights from " + cks.back() + " (28 tensors"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\ngtrain: checkpoint.init_from: 57 optimizer-state tensors in " + cks.back() +
                          " ignored (exp_avg, exp_avg_sq, momentum_buffer, optimizer.step)\n"),
            std::string::npos)
      << r.output;
  // An export with --optimizer: the same; without: nothing to ignore, no line.
  r = run_command(GTRAIN_BINARY + " ckpt export " + dir.file("a") + " " + dir.file("opt.safetensors") + " --optimizer");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(run + "--run-dir " + dir.file("c") + " --set checkpoint.init_from=" + dir.file("opt.safetensors"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("gtrain: checkpoint.init_from: 57 optimizer-state tensors in " + dir.file("opt.safetensors") +
                          " ignored"),
            std::string::npos)
      << r.output;
  r = run_command(GTRAIN_BINARY + " ckpt export " + dir.file("a") + " " + dir.file("w.safetensors"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = run_command(run + "--run-dir " + dir.file("d") + " --set checkpoint.init_from=" + dir.file("w.safetensors"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("gtrain: weights from " + dir.file("w.safetensors") + " (28 tensors"), std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("ignored"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace gtrain
