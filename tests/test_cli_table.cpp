// test_cli_table.cpp: every named job of tests/support/tiny_configs.h through the binary end to end:
// plan, run, checkpoint verify, resume to more steps on the same trajectory as an uninterrupted run,
// status and export, each result read back from the files the commands write.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>

#include "runtime/core/checkpoint_dirs.h"
#include "tests/support/cli_util.h"
#include "tests/support/test_util.h"
#include "tests/support/tiny_configs.h"

namespace gtrain {
namespace {

using test::run_command;

// One train loss per step, in step order; a gap or a repeated step fails the test.
std::vector<double> train_losses(const std::string& metrics) {
  std::vector<double> out;
  for (const auto& r : test::read_jsonl(metrics)) {
    if (r.at("kind") != "train") continue;
    EXPECT_EQ(r.at("step").get<int64_t>(), static_cast<int64_t>(out.size()) + 1) << metrics;
    out.push_back(r.at("loss").get<double>());
  }
  return out;
}

// The JSON header of a safetensors file (8-byte little-endian length, then the JSON).
nlohmann::json safetensors_header(const std::string& path) {
  const std::string bytes = test::read_file(path);
  if (bytes.size() < 8) return nullptr;
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  return nlohmann::json::parse(bytes.substr(8, n));
}

class CliTable : public ::testing::TestWithParam<std::string> {};

TEST_P(CliTable, PlanRunVerifyResumeStatusExport) {
  test::TempDir dir;
  const std::string job = dir.file("job.toml");
  test::write_file(job, test::tiny_job(GetParam()));
  // A constant rate and one thread: a run cut at step n and resumed is the uninterrupted run.
  const std::string same = " --set train.lr_schedule=constant --set train.warmup_steps=0 --set train.threads=1";
  const int64_t n = 3, more = 2;
  const std::string steps = " --set train.steps=";

  auto r = run_command(GTRAIN_BINARY + " plan " + job);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("dp=1"), std::string::npos) << r.output;

  // The first stage: n steps, a committed checkpoint at n that verifies.
  const std::string cut = dir.file("cut");
  r = gtrain_run(job, cut, same + steps + std::to_string(n));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto first = train_losses(cut + "/metrics.jsonl");
  ASSERT_EQ(first.size(), static_cast<size_t>(n));
  for (double loss : first) EXPECT_TRUE(std::isfinite(loss)) << loss;
  const auto cks = committed_checkpoint_dirs(cut + "/checkpoints");
  ASSERT_FALSE(cks.empty());
  EXPECT_EQ(cks.back().first, n);
  r = run_command(GTRAIN_BINARY + " ckpt verify " + cut);
  EXPECT_EQ(r.exit_code, 0) << r.output;

  // The second stage resumes there and trains `more` steps: the same losses as one run of n + more.
  r = gtrain_run(job, cut, same + steps + std::to_string(n + more));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("resumed from " + cks.back().second.string() + " at step " + std::to_string(n)),
            std::string::npos)
      << r.output;
  const std::string whole = dir.file("whole");
  r = gtrain_run(job, whole, same + steps + std::to_string(n + more));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto resumed = train_losses(cut + "/metrics.jsonl"), uninterrupted = train_losses(whole + "/metrics.jsonl");
  ASSERT_EQ(uninterrupted.size(), static_cast<size_t>(n + more));
  EXPECT_EQ(resumed, uninterrupted);  // bitwise: one rank, one thread, the same layout
  EXPECT_LT(uninterrupted.back(), uninterrupted.front()) << "the job does not train";

  r = run_command(GTRAIN_BINARY + " status " + cut + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output).at("step"), n + more) << r.output;

  r = run_command(GTRAIN_BINARY + " ckpt export " + cut + " " + dir.file("w.safetensors"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto header = safetensors_header(dir.file("w.safetensors"));
  ASSERT_TRUE(header.is_object());
  EXPECT_EQ(header.at("__metadata__").at("gtrain_step"), std::to_string(n + more));
  EXPECT_GT(header.size(), 2u);  // the metadata and at least two tensors
}

std::vector<std::string> table_names() {
  std::vector<std::string> out;
  for (const auto& c : test::tiny_configs()) out.push_back(c.name);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Named, CliTable, ::testing::ValuesIn(table_names()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// tiny_job changes a key where it is, adds one to its section, and adds a missing section.
TEST(TinyJob, SetsKeysInPlace) {
  const std::string job =
      test::tiny_job("gpt", {{"train.steps", "9"}, {"train.seed", "5"}, {"precision.dtype", "\"bf16\""}});
  EXPECT_NE(job.find("[train]\nglobal_batch = 4\nsteps = 9\nseed = 5\n[checkpoint]"), std::string::npos) << job;
  EXPECT_NE(job.find("\n[precision]\ndtype = \"bf16\"\n"), std::string::npos) << job;
  EXPECT_EQ(job.find("steps = 4"), std::string::npos) << job;
}

}  // namespace
}  // namespace gtrain
