// test_thread_choice.cpp: train.threads = 0 on CPU ranks: the first steps try a few intra-op thread
// counts and the run keeps the fastest (runtime/train/thread_choice.h).
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "runtime/comm/communicator.h"
#include "runtime/train/thread_choice.h"
#include "tests/support/test_util.h"

namespace gtrain {
namespace {

TEST(ThreadChoice, CandidatesArePowersOfTwoAndTheCores) {
  EXPECT_EQ(thread_candidates(1), std::vector<int>({1}));
  EXPECT_EQ(thread_candidates(2), std::vector<int>({1, 2}));
  EXPECT_EQ(thread_candidates(6), std::vector<int>({1, 2, 4, 6}));
  EXPECT_EQ(thread_candidates(8), std::vector<int>({1, 2, 4, 8}));
  EXPECT_EQ(thread_candidates(128), std::vector<int>({1, 2, 4, 8, 16, 128}));
}

// Feeds `steps` (seconds of each step in turn) and returns the count chosen and the steps it took.
std::pair<int, int> tune(int most, const std::vector<double>& steps) {
  LocalCommunicator comm;
  ThreadTuner t(most, 1, /*timed_steps=*/2);
  int used = 0;
  for (double s : steps) {
    if (!t.active()) break;
    t.before_step();
    ++used;
    if (t.after_step(s, comm)) break;
  }
  return {t.active() ? -1 : t.chosen(), used};
}

TEST(ThreadChoice, KeepsTheFastestMeanAndFewerThreadsWhenClose) {
  // 1 thread: 40 ms a step; 2 threads: steps of 38 and 50 ms (a spinning pool): the mean loses.
  // The first step at each count settles it and is not timed (the 900 ms).
  EXPECT_EQ(tune(2, {0.9, 0.040, 0.040, 0.9, 0.038, 0.050}), std::make_pair(1, 6));
  // A count already 1.5x slower than an earlier one is dropped after its first timed step.
  EXPECT_EQ(tune(2, {0.9, 0.040, 0.040, 0.9, 0.200, 0.040}), std::make_pair(1, 5));
  EXPECT_EQ(tune(2, {0.9, 0.040, 0.040, 0.9, 0.020, 0.020}), std::make_pair(2, 6));
  // Within 5% of the fastest, fewer threads win (less to share with the data workers).
  EXPECT_EQ(tune(2, {0.9, 0.041, 0.041, 0.9, 0.040, 0.040}), std::make_pair(1, 6));
  // 4 counts on 8 cores, 4 fastest.
  EXPECT_EQ(tune(8, {1, .08, .08, 1, .05, .05, 1, .03, .03, 1, .035, .035}), std::make_pair(4, 12));
  // One core a rank: nothing to try.
  EXPECT_EQ(tune(1, {0.1}), std::make_pair(1, 0));
}

// A one-rank run with train.threads = 0 on a machine of 2 or more cores records what it measured
// and the count it kept (metrics.jsonl and the stage's ledger line), and says so.
TEST(ThreadChoice, RunRecordsTheMeasuredChoice) {
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) GTEST_SKIP() << "one core: nothing to choose";
  test::TempDir dir;
  test::write_file(dir.file("job.toml"), R"(
[model]
name = "mlp"
hidden = [32]
[data]
kind = "synthetic"
synthetic_samples = 512
synthetic_features = 16
synthetic_classes = 3
[train]
global_batch = 32
steps = 20
threads = 0
[log]
progress = "plain"
interval = 100
)");
  const auto r = test::run_command(GTRAIN_BINARY + " run " + dir.file("job.toml") + " --run-dir " + dir.file("run"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("threads/rank auto (the first steps try 1, "), std::string::npos) << r.output;
  int chosen = 0;
  for (const auto& l : test::lines(test::read_file(dir.file("run/metrics.jsonl")))) {
    const auto j = nlohmann::json::parse(l);
    if (j.at("kind") != "threads") continue;
    chosen = j.at("threads").get<int>();
    EXPECT_NE(j.at("measured").get<std::string>().find("1 thread(s): "), std::string::npos) << j.dump();
  }
  EXPECT_GE(chosen, 1) << "no threads record";
  EXPECT_NE(r.output.find("threads/rank " + std::to_string(chosen) + ", the fastest of steps at 1 thread(s): "),
            std::string::npos)
      << r.output;
  const auto ledger = nlohmann::json::parse(test::lines(test::read_file(dir.file("run/stages.jsonl"))).at(0));
  EXPECT_EQ(ledger.at("threads").get<int>(), chosen);
}

}  // namespace
}  // namespace gtrain
