// test_cheap_saves.cpp: interval saves that cost training almost nothing (label multiproc; real
// ranks under mpirun): an async interval checkpoint takes its resume probe from the next step's own
// loss (probe_step in its manifest) and holds, byte for byte, the state a synchronous save of its
// step holds (the writer copies the live tensors before the next optimizer update), a resume on
// another rank count passes that probe, and a checkpoint whose probe does not match is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "tests/support/multiproc_util.h"
#include "tests/support/tiny_configs.h"

namespace gtrain {
namespace {

namespace fs = std::filesystem;

// Losses by step from metrics.jsonl.
std::map<int64_t, double> losses_by_step(const std::string& metrics) {
  std::map<int64_t, double> out;
  for (const auto& l : test::lines(test::read_file(metrics))) {
    const auto j = nlohmann::json::parse(l);
    if (j.at("kind") == "train") out[j.at("step").get<int64_t>()] = j.at("loss").get<double>();
  }
  return out;
}

nlohmann::json manifest_of(const std::string& run_dir, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08lld", static_cast<long long>(step));
  return nlohmann::json::parse(test::read_file(run_dir + "/checkpoints/" + name + "/manifest.json"));
}

// The CRC-32C of every piece of a checkpoint's rank-0 file, by tensor name.
std::map<std::string, uint32_t> piece_crcs(const std::string& run_dir, int64_t step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step_%08lld", static_cast<long long>(step));
  std::map<std::string, uint32_t> out;
  for (const auto& p : nlohmann::json::parse(test::read_file(run_dir + "/checkpoints/" + name + "/shard_0.json")))
    out[p.at("name").get<std::string>()] = p.at("crc32c").get<uint32_t>();
  return out;
}

// A step of the tiny classifier takes about a millisecond, far less than the writer thread takes to
// start: an async save that did not hold the optimizer back until its copy was made would write
// the next step's weights.
TEST(CheapSaves, AsyncIntervalSavesHoldExactlyTheStateOfTheirStep) {
  test::TempDir dir;
  test::write_file(dir.file("job.toml"), test::tiny_job("mlp"));
  const std::string base = GTRAIN_BINARY + " run " + dir.file("job.toml") +
                           " --set log.progress=none --set train.steps=6 --set checkpoint.interval=1"
                           " --set checkpoint.keep=10 --force --run-dir ";  // the same run twice: --force
  for (const char* mode : {"true", "false"}) {
    auto r = test::run_command(base + dir.file(std::string("run-") + mode) + " --set checkpoint.async=" + mode);
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  for (int64_t step = 1; step <= 6; ++step) {
    EXPECT_EQ(piece_crcs(dir.file("run-true"), step), piece_crcs(dir.file("run-false"), step)) << "step " << step;
    EXPECT_EQ(manifest_of(dir.file("run-true"), step).contains("probe_step"), step < 6) << "step " << step;
  }
}

TEST(CheapSaves, IntervalSaveProbesWithTheNextStepsLossAndResumesOnOneRank) {
  test::TempDir dir;
  test::write_file(dir.file("job.toml"), gpt4_job(8, 10));
  const std::string run = dir.file("run");
  const std::string base = GTRAIN_BINARY + " run " + dir.file("job.toml") + " --run-dir " + run;
  auto first = test::run_command(base + " --ranks 2 --set checkpoint.interval=4 --set checkpoint.keep=5" +
                                 " --set checkpoint.async=true --set checkpoint.at_end=false");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto losses = losses_by_step(run + "/metrics.jsonl");
  ASSERT_EQ(losses.size(), 10u);
  for (int64_t step : {4, 8}) {
    const auto m = manifest_of(run, step);
    ASSERT_TRUE(m.contains("probe_step")) << m.dump();
    EXPECT_EQ(m.at("probe_step").get<int64_t>(), step + 1);
    // The next step's training loss, the same number metrics.jsonl records for it.
    const double saved = m.at("probe_loss").get<double>(), trained = losses.at(step + 1);
    EXPECT_NEAR(saved, trained, 1e-6 * std::abs(trained)) << "step " << step;
    EXPECT_EQ(m.at("probe_indices").size(), 8u);  // the next step's global batch
  }

  // The newest (step 8) resumes on one rank: the probe runs that step's batch again and agrees.
  auto second = test::run_command(base + " --ranks 1 --set train.steps=12");
  ASSERT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("resumed from " + run + "/checkpoints/step_00000008 at step 8 (probe loss checked"),
            std::string::npos)
      << second.output;
  const auto resumed = losses_by_step(run + "/metrics.jsonl");
  ASSERT_EQ(resumed.size(), 12u);
  EXPECT_NEAR(resumed.at(9), losses.at(9), 1e-5 * std::abs(losses.at(9)));  // step 9 again, on one rank
}

// The probe's loss is a collective of the tensor-parallel group (vocabulary-parallel cross
// entropy): every rank of the group computes it though only one counts it. A resume onto tp = 2
// (and a pipeline with tp = 2 in its last stage) must come back, not wait forever on a rank that
// skipped it.
TEST(CheapSaves, ResumeOntoTensorAndPipelineParallelLayoutsRunsTheProbeOnEveryRank) {
  test::TempDir dir;
  test::write_file(dir.file("job.toml"), gpt4_job(8, 6));
  const std::string run = dir.file("run");
  const std::string base =
      "timeout -s KILL 120 " + GTRAIN_BINARY + " run " + dir.file("job.toml") + " --run-dir " + run;
  auto first = test::run_command(base + " --ranks 2 --set checkpoint.interval=2 --set checkpoint.keep=5" +
                                 " --set checkpoint.async=true --set checkpoint.at_end=false");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const auto losses = losses_by_step(run + "/metrics.jsonl");
  ASSERT_EQ(manifest_of(run, 4).at("probe_step").get<int64_t>(), 5);
  auto tp = test::run_command(base + " --ranks 2 --set parallel.mode=explicit --set parallel.tp=2 --set train.steps=6");
  ASSERT_EQ(tp.exit_code, 0) << tp.output;
  EXPECT_NE(tp.output.find("at step 4 (probe loss checked"), std::string::npos) << tp.output;
  EXPECT_NEAR(losses_by_step(run + "/metrics.jsonl").at(5), losses.at(5), 1e-5 * std::abs(losses.at(5)));
  auto pp = test::run_command(base + " --ranks 4 --set parallel.mode=explicit --set parallel.tp=2 --set parallel.pp=2" +
                              " --set train.steps=8");
  ASSERT_EQ(pp.exit_code, 0) << pp.output;
  EXPECT_NE(pp.output.find("at step 6 (probe loss checked"), std::string::npos) << pp.output;
}

TEST(CheapSaves, ACheckpointWhoseNextStepProbeDisagreesIsRefused) {
  test::TempDir dir;
  test::write_file(dir.file("job.toml"), gpt4_job(8, 6));
  const std::string run = dir.file("run");
  const std::string base = GTRAIN_BINARY + " run " + dir.file("job.toml") + " --run-dir " + run + " --ranks 1";
  auto first = test::run_command(base + " --set checkpoint.interval=4 --set checkpoint.async=true" +
                                 " --set checkpoint.at_end=false");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::string manifest = run + "/checkpoints/step_00000004/manifest.json";
  auto m = nlohmann::json::parse(test::read_file(manifest));
  ASSERT_EQ(m.at("probe_step").get<int64_t>(), 5);
  m["probe_loss"] = m.at("probe_loss").get<double>() * 1.5;  // as if other weights had been saved
  test::write_file(manifest, m.dump());
  auto second = test::run_command(base + " --set train.steps=8");
  EXPECT_NE(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("resume check failed: the probe batch's loss"), std::string::npos) << second.output;
  EXPECT_TRUE(fs::exists(manifest)) << "a refused resume must leave the checkpoint alone";
}

}  // namespace
}  // namespace gtrain
