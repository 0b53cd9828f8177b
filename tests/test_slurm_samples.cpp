// test_slurm_samples.cpp: a stage on the real Slurm harness (label slurm, no accounting) samples its
// partition while it runs (cluster.sample_minutes), and gtrain cluster, which cannot read sacct
// there, builds its hour-of-week profile from those samples.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "launcher/cluster/cluster_samples.h"
#include "launcher/scheduler/batch_script.h"
#include "tests/support/slurm_cleanup.h"
#include "tests/support/test_util.h"

namespace fs = std::filesystem;
using namespace gtrain;
using Clock = std::chrono::steady_clock;

namespace {

const bool kEnvSet = test::use_slurm_harness_env();

std::string gtrain_cmd(const std::string& args) {
  return std::string(GTRAIN_BINARY) + " " + args;
}

// A stage of a few seconds that samples every 1.2 s.
const char* kSampledJob =
    "[model]\nname = \"gpt\"\nn_layer = 2\nn_head = 2\nn_embd = 64\nseq_len = 32\nvocab = 32\n"
    "[data]\nkind = \"synthetic\"\n[train]\nglobal_batch = 16\nsteps = 400\nthreads = 1\n"
    "[checkpoint]\ninterval = 1000000\n[log]\nprogress = \"none\"\n[cluster]\nsample_minutes = 0.02\n";

TEST(SlurmSamples, StagesSampleTheirPartitionAndClusterLearnsFromThemWithoutAccounting) {
  const char* profile = std::getenv("GTRAIN_PROFILE_DIR");
  ASSERT_TRUE(profile && *profile) << "the suite's environment sets GTRAIN_PROFILE_DIR";
  std::error_code ec;
  fs::remove_all(std::string(profile) + "/cluster", ec);
  test::TempDir dir;
  test::write_file(dir.file("job.toml"), kSampledJob);
  const std::string run = dir.file("run");
  const auto r = test::run_command(gtrain_cmd("submit " + shell_quote(dir.file("job.toml")) + " --run-dir " +
                                              shell_quote(run) + " --gpus 2 --stages 1 --time 00:10:00"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  nlohmann::json chain;
  for (auto t0 = Clock::now(); Clock::now() - t0 < std::chrono::seconds(120);) {
    chain = nlohmann::json::parse(test::read_file(run + "/chain.json"), nullptr, false);
    if (chain.is_object() && chain.value("state", "running") != "running") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  ASSERT_EQ(chain.value("state", ""), "completed") << chain.dump(2);
  const std::string job = chain["stages"][0].value("job", "");
  const std::string path = std::string(profile) + "/cluster/slurm-gtraintest.jsonl";
  int skipped = -1;
  const auto samples = read_cluster_samples(path, &skipped);
  EXPECT_EQ(skipped, 0);
  ASSERT_GE(samples.size(), 2u) << test::read_file(path) << test::read_file(run + "/slurm-1.out");
  for (const auto& s : samples) {
    EXPECT_EQ(s.scheduler, "slurm");
    EXPECT_EQ(s.cluster, "gtraintest");
    EXPECT_EQ(s.partition, "debug");
    EXPECT_EQ(s.job, job);
    EXPECT_EQ(s.gpus, 8);  // 2 nodes x 4
    EXPECT_LE(s.free_gpus, 6) << "the sampling stage itself holds 2";
    EXPECT_GE(s.running_jobs, 1);
  }
  EXPECT_GE(samples.back().time - samples.front().time, 1);  // periodic, not one sample twice
  // The harness has no accounting: the profile comes from the samples alone.
  const auto text = test::run_command(gtrain_cmd("cluster --weeks 1 --gpus 6"));
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("hours known from gtrain's own stages' samples (the accounting cannot be read)"),
            std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("samples from gtrain's own stages: " + std::to_string(samples.size()) + " in " + path),
            std::string::npos)
      << text.output;
  const auto js = test::run_command(gtrain_cmd("cluster --json --weeks 1"));
  ASSERT_EQ(js.exit_code, 0) << js.output;
  const auto j = nlohmann::json::parse(js.output.substr(js.output.find('{')));
  EXPECT_FALSE(j["history"]["read"].get<bool>());
  EXPECT_EQ(j["cluster"], "gtraintest");
  EXPECT_GE(j["partitions"][0]["sampled_hours"].get<int>(), 1);
  // The report reads the cluster afresh for its resource request and keeps it in cluster.json.
  const auto report = test::run_command(gtrain_cmd("report " + shell_quote(run) + " --format md -o -"));
  ASSERT_EQ(report.exit_code, 0) << report.output;
  EXPECT_NE(report.output.find("- Cluster facts (read by gtrain report, "), std::string::npos) << report.output;
  EXPECT_NE(report.output.find("): partition debug, 8 GPUs ("), std::string::npos) << report.output;
  const auto kept = nlohmann::json::parse(test::read_file(run + "/cluster.json"));
  EXPECT_EQ(kept["read_by"], "gtrain report");
  EXPECT_EQ(kept["cluster"], "gtraintest");
}

}  // namespace
