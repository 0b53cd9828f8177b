// test_multiproc.cpp: the gtrain binary on several MPI ranks: the same losses and parameters on
// any world size, accumulation and ZeRO stage; failures stop every rank with a message.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "launcher/run_command.h"
#include "runtime/checkpoint/checkpoint.h"
#include "tests/multiproc_util.h"

namespace gtrain {
namespace {

namespace fs = std::filesystem;
using test::run_command;

const std::string kMlp = R"(
[model]
name = "mlp"
hidden = [32, 16]
[data]
kind = "synthetic"
synthetic_samples = 2048
synthetic_features = 12
synthetic_classes = 4
[optimizer]
learning_rate = 0.01
[train]
global_batch = 32
steps = 50
grad_clip = 0.5
warmup_steps = 5
[log]
progress = "none"
)";

class MultiRank : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { reference_ = new RunResult(run_gtrain(kMlp, 1, {})); }
  static void TearDownTestSuite() { delete reference_; }
  static RunResult* reference_;
};
RunResult* MultiRank::reference_ = nullptr;

TEST_F(MultiRank, ReferenceRunLearns) {
  ASSERT_EQ(reference_->losses.size(), 50u);
  EXPECT_LT(reference_->losses.back(), 0.8 * reference_->losses.front());
}

TEST_F(MultiRank, TwoRanksMatchOne) { expect_same_run(*reference_, run_gtrain(kMlp, 2, {}), "2 ranks"); }

TEST_F(MultiRank, FourRanksMatchOne) { expect_same_run(*reference_, run_gtrain(kMlp, 4, {}), "4 ranks"); }

TEST_F(MultiRank, TwoRanksWithAccumulationMatchOne) {
  auto r = run_gtrain(kMlp, 2, {"parallel.micro_batch=8"});
  EXPECT_NE(r.output.find("micro_batch=8 grad_accum=2"), std::string::npos) << r.output;
  expect_same_run(*reference_, r, "2 ranks x accumulation 2");
}

TEST_F(MultiRank, ZeroStagesMatchPlainDataParallel) {
  for (int ranks : {2, 4}) {
    for (int zero : {1, 2}) {
      // Small buckets: several reduce-scatters / all-gathers, padding in the last chunk.
      auto r = run_gtrain(kMlp, ranks, {"parallel.mode=explicit", "parallel.zero=" + std::to_string(zero),
                                        "parallel.bucket_mb=0.001"});
      EXPECT_NE(r.output.find("zero=" + std::to_string(zero)), std::string::npos) << r.output;
      expect_same_run(*reference_, r, std::to_string(ranks) + " ranks, ZeRO-" + std::to_string(zero));
    }
  }
}

TEST(MultiRankGpt, TransformerMatchesOnTwoRanks) {
  const std::string gpt = R"(
[model]
name = "gpt"
n_layer = 2
n_head = 2
n_embd = 32
seq_len = 16
vocab = 16
[data]
kind = "synthetic"
[train]
global_batch = 8
steps = 20
[log]
progress = "none"
)";
  expect_same_run(run_gtrain(gpt, 1, {}), run_gtrain(gpt, 2, {"parallel.mode=explicit", "parallel.zero=1"}),
                  "gpt on 2 ranks with ZeRO-1");
}

// PIDs of the ranks of a job whose command line contains `marker`, by rank.
std::map<int, int> rank_pids(const std::string& marker) {
  std::map<int, int> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = test::read_file(e.path().string() + "/cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(marker) == std::string::npos || cmdline.rfind("mpirun", 0) == 0) continue;
    std::string environ = test::read_file(e.path().string() + "/environ");
    auto pos = environ.find("OMPI_COMM_WORLD_RANK=");
    if (pos == std::string::npos) continue;
    out[std::stoi(environ.substr(pos + 21))] = std::stoi(name);
  }
  return out;
}

struct Background {
  std::FILE* pipe = nullptr;
  std::string output;
  int exit_code = -1;
  double seconds = 0;
};

// Starts a long 2-rank run, waits until it trains, applies `signal_rank1`, and collects the result.
Background disrupt_rank1(int signo, const std::vector<std::string>& sets) {
  test::TempDir dir;
  std::string text = kMlp;
  text.replace(text.find("steps = 50"), 10, "steps = 1000000");
  test::write_file(dir.file("long.toml"), text);
  std::string cmd = GTRAIN_BINARY " run " + dir.file("long.toml") + " --ranks 2 --run-dir " + dir.file("run");
  for (const auto& s : sets) cmd += " --set " + s;
  Background bg;
  bg.pipe = popen((cmd + " 2>&1").c_str(), "r");
  // Wait for training to start (metrics appear), then find rank 1.
  std::map<int, int> pids;
  for (int i = 0; i < 300; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    pids = rank_pids(dir.file("long.toml"));
    if (pids.size() == 2 && test::read_file(dir.file("run/metrics.jsonl")).size() > 1000) break;
  }
  EXPECT_EQ(pids.size(), 2u);
  auto t0 = std::chrono::steady_clock::now();
  if (pids.count(1)) kill(pids[1], signo);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), bg.pipe)) > 0) bg.output.append(buf, n);
  int status = pclose(bg.pipe);
  bg.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  bg.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (pids.count(1) && signo == SIGSTOP) kill(pids[1], SIGKILL);
  EXPECT_TRUE(rank_pids(dir.file("long.toml")).empty()) << "ranks left running";
  return bg;
}

TEST(MultiRankFailure, KilledRankStopsEveryRank) {
  auto bg = disrupt_rank1(SIGKILL, {});
  EXPECT_NE(bg.exit_code, 0) << bg.output;
  EXPECT_LT(bg.seconds, 30.0) << bg.output;
  EXPECT_NE(bg.output.find("rank 1"), std::string::npos) << bg.output;
}

// Only rank 0 writes checkpoints: when that throws, rank 1 (waiting in a collective) must stop too.
TEST(MultiRankFailure, ThrowingRankStopsEveryRank) {
  test::TempDir dir;
  test::write_file(dir.file("job.toml"), kMlp);
  auto t0 = std::chrono::steady_clock::now();
  auto r = run_command(GTRAIN_BINARY " run " + dir.file("job.toml") + " --ranks 2 --run-dir " + dir.file("run") +
                       " --set checkpoint.interval=3 --set checkpoint.dir=/dev/null/ckpt");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(secs, 30.0);
  EXPECT_NE(r.output.find("[rank 0] gtrain: checkpoint error: /dev/null/ckpt: cannot create checkpoint directory"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("[rank 0 on "), std::string::npos) << r.output;
}

// A rank that stops answering (SIGSTOP) leaves its peer inside a collective: the timeout aborts.
TEST(MultiRankFailure, HungRankIsCaughtByCollectiveTimeout) {
  auto bg = disrupt_rank1(SIGSTOP, {"parallel.collective_timeout_s=3"});
  EXPECT_NE(bg.exit_code, 0) << bg.output;
  EXPECT_LT(bg.seconds, 30.0) << bg.output;
  EXPECT_NE(bg.output.find("did not finish within 3 s"), std::string::npos) << bg.output;
  EXPECT_NE(bg.output.find("on rank 0"), std::string::npos) << bg.output;
}

}  // namespace
}  // namespace gtrain
