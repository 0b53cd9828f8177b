// test_uneven.cpp: issue 25 end to end: GPU counts that do not divide the global batch train the
// same model. Global batch 32 on 3, 5, 6 and 7 ranks (replica shares differ by one sample), with
// accumulation, ZeRO-2, tensor and pipeline parallel, matches one rank for 20 steps; a run staged
// over 4 -> 3 -> 5 -> 1 ranks matches the unstaged run; a grant too large for the batch leaves
// ranks idle, and says so.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/support/multiproc_util.h"
#include "tests/support/tiny_configs.h"

namespace gtrain {
namespace {

// The MLP of test_multiproc.cpp at 20 steps: cheap enough for 7 ranks on 2 cores.
const std::string kMlp = mlp_job(20);

// A 4-block transformer (4 heads: tp 2 divides them; 4 blocks: pp 3 splits them 1/2/1).
const std::string kGpt = gpt4_job(32, 20);

struct MlpJob {
  static const std::string& config() { return kMlp; }
};
struct GptJob {
  static const std::string& config() { return kGpt; }
};
using UnevenMlp = MatchesOneRank<MlpJob>;
using UnevenGpt = MatchesOneRank<GptJob>;

// Data parallel alone on every count that does not divide 32: each replica takes 32/dp samples
// (one more on the first 32%dp), and the losses and parameters are those of one rank.
TEST_F(UnevenMlp, ThreeFiveSixSevenRanksMatchOne) {
  ASSERT_EQ(reference_->losses.size(), 20u) << reference_->output;
  const std::map<int, std::string> shares = {{3, "shares 11, 11, 10"},
                                             {5, "shares 7, 7, 6, 6, 6"},
                                             {6, "shares 6, 6, 5, 5, 5, 5"},
                                             {7, "shares 5, 5, 5, 5, 4, 4, 4"}};
  for (const auto& [ranks, expect] : shares) {
    const RunResult r = run_gtrain(kMlp, ranks, {"parallel.mode=explicit"});
    EXPECT_NE(r.output.find("dp=" + std::to_string(ranks) + " tp=1 pp=1"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find(expect), std::string::npos) << r.output;
    expect_same_run(*reference_, r, std::to_string(ranks) + " ranks");
  }
}

// Accumulation over uneven shares: 11 samples at most 4 at a time are 4, 4, 3; 10 are 4, 3, 3
// (every replica runs 3 micro-batches, so the collectives line up).
TEST_F(UnevenMlp, AccumulationWithMicroBatchesThatDifferByOne) {
  const RunResult r = run_gtrain(kMlp, 3, {"parallel.micro_batch=4"});
  EXPECT_NE(r.output.find("micro_batch=4 grad_accum=3"), std::string::npos) << r.output;
  expect_same_run(*reference_, r, "3 ranks, micro-batches of 4 and 3");
}

// ZeRO-1 and ZeRO-2 shard the optimizer and gradients by parameter, whatever the batch shares;
// ZeRO-2 reduce-scatters every micro-batch (small buckets: several per step).
TEST_F(UnevenMlp, ZeroStagesOnThreeRanks) {
  for (int zero : {1, 2}) {
    const RunResult r = run_gtrain(kMlp, 3,
                                   {"parallel.mode=explicit", "parallel.zero=" + std::to_string(zero),
                                    "parallel.micro_batch=6", "parallel.bucket_mb=0.001"});
    EXPECT_NE(r.output.find("zero=" + std::to_string(zero)), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("micro_batch=6 grad_accum=2"), std::string::npos) << r.output;
    expect_same_run(*reference_, r, "3 ranks ZeRO-" + std::to_string(zero));
  }
}

// dp 3 x tp 2 on 6 ranks: both tensor-parallel ranks of a replica read its share.
TEST_F(UnevenGpt, DataTimesTensorParallelOnSix) {
  check(6, {"parallel.tp=2"}, "dp=3 tp=2 pp=1", "dp=3 x tp=2");
}

// pp 3 on 4 blocks with micro-batches of 11, 11 and 10 samples: activations of two shapes travel
// between the stages of one step.
TEST_F(UnevenGpt, PipelineOnFourBlocksWithUnevenMicroBatches) {
  check(3, {"parallel.pp=3", "parallel.pp_microbatches=3"}, "micro_batch=11 grad_accum=3", "pp=3 m=3 of 11/11/10");
}

// dp 3 x pp 2 on 6 ranks: every replica's pipeline runs its own share (11, 11, 10 as 6+5, 6+5,
// 5+5), with recompute.
TEST_F(UnevenGpt, DataTimesPipelineParallelWithRecompute) {
  check(6, {"parallel.pp=2", "parallel.pp_microbatches=2", "parallel.recompute=true", "parallel.zero=1"},
        "dp=3 tp=1 pp=2 zero=1 micro_batch=6 grad_accum=2 recompute=on", "dp=3 x pp=2 recompute");
}

// A run stopped and resumed on 4, then 3, then 5, then 1 rank (constant learning rate, so each
// stage's train.steps does not change the schedule) equals the same 20 steps in one stage.
TEST(UnevenStages, FourThreeFiveOneRanksMatchTheUnstagedRun) {
  const std::vector<std::string> common = {"train.warmup_steps=0", "train.lr_schedule=constant"};
  auto with = [&](int steps) {
    auto v = common;
    v.push_back("train.steps=" + std::to_string(steps));
    return v;
  };
  const RunResult ref = run_gtrain(kGpt, 1, with(20));
  ASSERT_EQ(ref.losses.size(), 20u) << ref.output;
  test::TempDir dir;
  test::write_file(dir.file("job.toml"), kGpt);
  const std::string run = dir.file("run");
  std::string outputs;
  const std::vector<std::pair<int, int>> stages = {{4, 5}, {3, 10}, {5, 15}, {1, 20}};
  for (const auto& [ranks, steps] : stages) {
    std::string cmd =
        GTRAIN_BINARY + " run " + dir.file("job.toml") + " --run-dir " + run + " --ranks " + std::to_string(ranks);
    for (const auto& s : with(steps)) cmd += " --set " + s;
    const auto r = test::run_command(cmd);
    ASSERT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
    EXPECT_EQ(test::last_train_step(run + "/metrics.jsonl"), steps) << r.output;
    if (steps > 5) {
      EXPECT_NE(r.output.find("resumed from"), std::string::npos) << r.output;
    }
    outputs += r.output;
  }
  EXPECT_NE(outputs.find("shares 11, 11, 10"), std::string::npos) << outputs;
  EXPECT_NE(outputs.find("shares 7, 7, 6, 6, 6"), std::string::npos) << outputs;
  RunResult staged;
  staged.losses = train_losses(run + "/metrics.jsonl");
  staged.params = final_params(run);
  staged.output = outputs;
  expect_same_run(ref, staged, "4 -> 3 -> 5 -> 1 ranks");
  std::vector<int> worlds;
  for (const auto& l : test::lines(test::read_file(run + "/stages.jsonl")))
    worlds.push_back(nlohmann::json::parse(l).at("world").get<int>());
  EXPECT_EQ(worlds, (std::vector<int>{4, 3, 5, 1}));
}

// More GPUs granted than samples in the batch (5 in CUDA_VISIBLE_DEVICES: a CPU build runs a CPU
// rank for each): the launcher starts only as many as the plan uses, names the idle ones, and the
// ledger records them. --ranks 5 asks for exactly 5, and is refused in one line.
TEST(UnevenGrant, GrantLargerThanTheBatchLeavesRanksIdle) {
  test::TempDir dir;
  test::write_file(dir.file("job.toml"), kMlp);
  const std::string args = " run " + dir.file("job.toml") + " --set train.global_batch=3 --set train.steps=3";
  const auto r =
      test::run_command("CUDA_VISIBLE_DEVICES=0,1,2,3,4 " + GTRAIN_BINARY + args + " --run-dir " + dir.file("run"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("gtrain: starting 3 of the 5 granted ranks"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(":gpu 3, "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("uses 3 of the 5 granted ranks (2 idle): no layout of all 5 fits"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("plan dp=3 tp=1 pp=1"), std::string::npos) << r.output;
  const auto lines = test::lines(test::read_file(dir.file("run/stages.jsonl")));
  ASSERT_EQ(lines.size(), 1u);
  const auto rec = nlohmann::json::parse(lines[0]);
  EXPECT_EQ(rec.at("world"), 3);
  EXPECT_EQ(rec.at("allocation").at("gpus"), 5);
  EXPECT_EQ(rec.at("allocation").at("ranks"), 3);
  ASSERT_EQ(rec.at("allocation").at("idle").size(), 2u) << rec.dump();
  EXPECT_NE(rec.at("allocation").at("idle")[1].get<std::string>().find(":gpu 4"), std::string::npos) << rec.dump();

  const auto exact = test::run_command(GTRAIN_BINARY + args + " --run-dir " + dir.file("run5") + " --ranks 5");
  EXPECT_EQ(exact.exit_code, 2) << exact.output;
  EXPECT_NE(exact.output.find("train.global_batch = 3 is smaller than the 5 data-parallel ranks"), std::string::npos)
      << exact.output;
  EXPECT_NE(exact.output.find("hint: raise train.global_batch to at least 5, or run on at most 3 ranks"),
            std::string::npos)
      << exact.output;
}

}  // namespace
}  // namespace gtrain
