// test_planner.cpp: planner invariants for every world size 1..1024, the reference cases (GPT-2 on
// 8 x 80 GB, 13B on 8 x 40 GB, a model that cannot fit), explicit layouts, the cost model's
// formulas, and hardware profiles.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <utility>
#include <vector>

#include "launcher/commands/plan_command.h"
#include "runtime/core/errors.h"
#include "strategies/planner/planner.h"
#include "strategies/planner/stage_split.h"
#include "tests/support/planner_inputs.h"
#include "tests/support/test_util.h"

namespace gtrain {
namespace {

using test::gpt_input;
using test::kGiB;
const auto error_of = test::plan_error;

PlannerInput gpt2_on(int64_t world) {
  return gpt_input(12, 12, 768, 1024, 512, world, "A100-80GB");
}

void check_invariants(const PlannerInput& in, const std::vector<RankedPlan>& all) {
  const int64_t gpn = std::min(in.gpus_per_node, in.world);
  const double usable = usable_memory_bytes(in);
  const int64_t B = in.train.global_batch;
  int64_t expect_rank = 1;
  double last_time = 0;
  for (const auto& r : all) {
    const Plan& p = r.plan;
    EXPECT_EQ(p.dp * p.tp * p.pp, p.world) << p.summary();
    EXPECT_LE(p.world, in.world) << p.summary();
    EXPECT_EQ(p.idle_ranks(), in.world - p.world) << p.summary();
    if (!in.use_fewer_ranks) {
      EXPECT_EQ(p.world, in.world) << p.summary();
    }
    if (!r.feasible) {
      EXPECT_EQ(r.rank, 0);
      EXPECT_FALSE(r.why.empty());
      continue;
    }
    EXPECT_EQ(r.rank, expect_rank++) << "feasible plans come first, ranked 1..n";
    // Ranked by time; a layout that leaves ranks idle must beat the others by kIdleRankMargin.
    const double ranked = r.time.total() * (p.idle_ranks() > 0 ? 1.0 + kIdleRankMargin : 1.0);
    EXPECT_DOUBLE_EQ(ranked, ranking_time(r));
    EXPECT_GE(ranked * (1 + kSameTime), last_time) << "ranked by time";
    last_time = ranked;
    // The replicas' shares add up to the global batch and differ by at most one sample; every
    // micro-batch holds a sample, and micro_batch is the largest.
    int64_t total = 0;
    for (int64_t d = 0; d < p.dp; ++d) total += p.replica_batch(d);
    EXPECT_EQ(total, p.global_batch()) << p.summary();
    EXPECT_LE(p.max_replica_batch() - p.min_replica_batch(), 1) << p.summary();
    EXPECT_LE(p.grad_accum, p.min_replica_batch()) << p.summary();
    EXPECT_EQ(p.micro_batch, largest_part(p.max_replica_batch(), p.grad_accum)) << p.summary();
    EXPECT_NO_THROW(p.validate(p.world, p.global_batch())) << p.summary();
    if (in.parallel.batch_tolerance == 0) {
      EXPECT_EQ(p.global_batch(), B) << p.summary();
      EXPECT_EQ(p.requested_global_batch, 0);
    } else {
      EXPECT_LE(std::llabs(p.global_batch() - B), in.parallel.batch_tolerance * B + 1e-9);
      if (p.global_batch() != B) {
        EXPECT_EQ(p.requested_global_batch, B);
      }
    }
    EXPECT_EQ(in.model.heads % p.tp, 0) << p.summary();
    EXPECT_LE(p.pp, in.model.blocks) << p.summary();  // stages need not divide the blocks
    // tp stays within a node: of the ranks the plan uses (the first ones, filling nodes in order).
    const int64_t used_gpn = std::min(gpn, p.world);
    EXPECT_LE(p.tp, used_gpn);
    EXPECT_EQ(used_gpn % p.tp, 0) << "tp stays within a node";
    EXPECT_LE(r.memory.total(), usable) << p.summary();
    EXPECT_LE(r.memory.total() * (1 + in.parallel.memory_margin), usable * (1 + 1e-12)) << "keeps the margin";
    EXPECT_FALSE(r.tight);
    EXPECT_NEAR(p.est_memory_bytes, r.memory.total(), 1.0);
    EXPECT_LE(p.zero, in.caps.max_zero);
    if (!in.caps.tensor_parallel) {
      EXPECT_EQ(p.tp, 1);
    }
    if (!in.caps.pipeline_parallel) {
      EXPECT_EQ(p.pp, 1);
    }
    if (!in.caps.recompute) {
      EXPECT_FALSE(p.recompute);
    }
    if (p.dp == 1) {
      EXPECT_EQ(p.zero, 0);
    }
    EXPECT_GT(r.time.total(), 0);
  }
  // plan_job agrees: the first feasible, or an error when there is none.
  if (!all.empty() && all.front().feasible) {
    const Plan p = plan_job(in);
    EXPECT_EQ(p.summary(), all.front().plan.summary());
  } else {
    EXPECT_FALSE(error_of(in).empty());
  }
}

TEST(PlannerInvariants, EveryWorldSize1To1024) {
  int64_t feasible_worlds = 0;
  for (int64_t w = 1; w <= 1024; ++w) {
    PlannerInput in = gpt2_on(w);
    const auto exact = plan_candidates(in);
    check_invariants(in, exact);
    feasible_worlds += !exact.empty() && exact.front().feasible;
    in.parallel.batch_tolerance = 0.1;
    check_invariants(in, plan_candidates(in));
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "first failing world size: " << w;
      break;
    }
  }
  // Every grant has a plan: dp need not divide 512 (uneven shares), and past 512 ranks the plan
  // leaves the surplus idle or gives it to tp / pp.
  EXPECT_EQ(feasible_worlds, 1024);
}

// Issue 25: a grant of any count up to the batch trains on all of it, each replica taking its
// share of the exact global batch; the step time is set by the largest share. A plan leaves ranks
// idle only when that is at least kIdleRankMargin faster than every layout of all of them (21
// GPUs: dp 10 x tp 2 on 20 beats dp 7 x tp 3 or 21 uneven replicas), and says so.
TEST(PlannerUneven, EveryCountUpToTheBatchTrainsOnAllRanks) {
  for (int64_t w = 1; w <= 64; ++w) {
    PlannerInput in = gpt2_on(w);
    in.train.global_batch = 64;
    // One node of w: across nodes of 8, 9 GPUs are 8 + 1 and the one across the slow link costs
    // more than it gives (the planner then rightly uses 8).
    in.gpus_per_node = w;
    const auto all = plan_candidates(in);
    ASSERT_TRUE(all.front().feasible) << w;
    const Plan& p = all.front().plan;
    EXPECT_EQ(p.global_batch(), 64) << p.summary();
    if (w <= 8) {
      EXPECT_EQ(p.world, w) << p.summary() << ": " << all.front().why;
    }
    if (p.idle_ranks() == 0) continue;
    EXPECT_NE(all.front().why.find("uses " + std::to_string(p.world) + " of the " + std::to_string(w)),
              std::string::npos)
        << all.front().why;
    for (const auto& r : all) {
      if (r.feasible && r.plan.world == w) {
        EXPECT_GE(r.time.total(), (1 + kIdleRankMargin) * all.front().time.total()) << r.plan.summary();
      }
    }
  }
  // 32 over 3 replicas: 11, 11, 10, and the step costs what 11 samples per replica cost.
  PlannerInput three = gpt2_on(3);
  three.train.global_batch = 32;
  const Plan p3 = plan_job(three);
  ASSERT_EQ(p3.dp, 3) << p3.summary();
  EXPECT_EQ(p3.shares(), "11, 11, 10");
  // Nodes of 8: the ninth GPU sits across the slow link, and 8 on one node are faster.
  PlannerInput nine_in = gpt2_on(9);
  nine_in.train.global_batch = 64;
  const Plan nine = plan_job(nine_in);
  EXPECT_EQ(nine.world, 8) << nine.summary();
  EXPECT_NE(nine.reason.find("uses 8 of the 9 granted GPUs (1 idle)"), std::string::npos) << nine.reason;
  EXPECT_FALSE(p3.even());
  EXPECT_NE(p3.summary().find("shares 11, 11, 10"), std::string::npos) << p3.summary();
  const CostModelInput cost = [&] {
    CostModelInput c;
    c.model = three.model;
    c.precision = "bf16";
    c.profile = three.profile;
    c.topology = {3, 3, 1};
    return c;
  }();
  ParallelLayout uneven;
  uneven.dp = 3;
  uneven.split_batch(32, 1);
  ParallelLayout even = uneven;
  even.split_batch(33, 1);  // 11 each: the same largest share
  const TimeEstimate tu = estimate_time(cost, uneven), te = estimate_time(cost, even);
  EXPECT_NEAR(tu.compute, te.compute, 1e-12 * te.compute) << "the largest share sets the compute";
  EXPECT_NEAR(tu.imbalance, 11.0 * 3.0 / 32.0 - 1.0, 1e-12);
  EXPECT_EQ(te.imbalance, 0.0);
  ParallelLayout two;
  two.dp = 2;
  two.split_batch(32, 1);
  EXPECT_NEAR(estimate_time(cost, two).compute / tu.compute, 16.0 / 11.0, 1e-9);
}

// "Use k of the n GPUs": when every layout of all n is slower or does not fit, the plan leaves
// some idle, names how many, and says why; started ranks (use_fewer_ranks = false) never do.
TEST(PlannerUneven, FewerRanksWhenTheGrantCannotBeUsedWhole) {
  // 24 heads, too big for one 40 GB GPU without tp = 2 (or pp): 7 GPUs.
  PlannerInput in = gpt_input(24, 16, 2048, 2048, 64, 7, "A100-40GB");
  // Attention dropout keeps the T x T scores on every LibTorch: without it, LibTorch 2's SDPA
  // kernels would fit dp = 7 and the test would depend on the LibTorch it was built with.
  in.model.dropout = 0.1;
  in.caps.max_zero = 0;
  in.caps.recompute = false;
  in.caps.pipeline_parallel = false;
  const Plan p = plan_job(in);
  EXPECT_EQ(p.world, 6) << p.summary() << ": " << p.reason;
  EXPECT_EQ(p.tp, 2) << p.summary();
  EXPECT_EQ(p.granted, 7);
  EXPECT_NE(p.reason.find("uses 6 of the 7 granted GPUs (1 idle)"), std::string::npos) << p.reason;
  in.use_fewer_ranks = false;
  EXPECT_FALSE(error_of(in).empty());
  // Ranks already started on the 6 plan the same layout.
  in.world = 6;
  const Plan six = plan_job(in);
  EXPECT_EQ(six.summary(), p.summary());
  EXPECT_EQ(fewer_rank_counts(7, 8, 64), (std::vector<int64_t>{6, 5, 4}));
  // Above kAllFewerRanksUpTo: the 8 largest counts, and the multiples of powers of two from half up.
  EXPECT_EQ(fewer_rank_counts(100, 8, 1000), (std::vector<int64_t>{99, 98, 97, 96, 95, 94, 93, 92, 64}));
  EXPECT_EQ(fewer_rank_counts(100, 8, 20), (std::vector<int64_t>{99, 98, 97, 96, 95, 94, 93, 92, 64, 20}));
}

TEST(PlannerInvariants, RunCapabilitiesOnlyDataParallelAndTightMemory) {
  for (int64_t w = 1; w <= 256; ++w) {
    PlannerInput in = gpt_input(24, 16, 2048, 2048, 256, w, "A100-40GB");  // ~1.3B: memory matters
    in.caps = kRunCapabilities;
    check_invariants(in, plan_candidates(in));
    in.caps = kAllCapabilities;
    in.gpus_per_node = 4;
    check_invariants(in, plan_candidates(in));
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "first failing world size: " << w;
      break;
    }
  }
}

TEST(PlannerReference, Gpt2On8x80GBIsPureDataParallel) {
  PlannerInput in = gpt2_on(8);
  EXPECT_NEAR(static_cast<double>(in.model.params), 124.4e6, 0.1e6);
  const Plan p = plan_job(in);
  EXPECT_EQ(p.dp, 8);
  EXPECT_EQ(p.tp, 1);
  EXPECT_EQ(p.pp, 1);
  EXPECT_FALSE(p.recompute);
  EXPECT_FALSE(p.offload);
  // The ZeRO stage is whichever the estimate makes fastest (ZeRO-3's gathers hide behind the
  // compute, its sharded optimizer step is shorter): within 0.1% of plain data parallel.
  for (const auto& r : plan_candidates(in)) {
    if (r.feasible && r.plan.dp == 8 && r.plan.zero == 0 && !r.plan.recompute && !r.plan.offload) {
      EXPECT_LE(p.est_step_seconds, r.time.total());
      EXPECT_NEAR(p.est_step_seconds, r.time.total(), 1e-3 * r.time.total());
    }
  }
  EXPECT_EQ(p.global_batch(), 512);
  EXPECT_LE(p.est_memory_bytes, 80 * kGiB);
  // 512 x 6 x 124M x 1024 tokens over 8 x 140 TFLOP/s: a few tenths of a second.
  EXPECT_GT(p.est_step_seconds, 0.2);
  EXPECT_LT(p.est_step_seconds, 1.0);
  EXPECT_NE(p.reason.find("least time"), std::string::npos);
}

TEST(PlannerReference, Gpt13BOn8x40GBNeedsModelParallelOrZero) {
  PlannerInput in = gpt_input(40, 40, 5120, 2048, 1024, 8, "A100-40GB");
  EXPECT_NEAR(static_cast<double>(in.model.params), 12.85e9, 0.05e9);
  const auto all = plan_candidates(in);
  ASSERT_TRUE(all.front().feasible);
  const Plan& p = all.front().plan;
  EXPECT_TRUE(p.tp * p.pp > 1 || p.zero > 0) << p.summary();
  EXPECT_LE(p.est_memory_bytes, 40 * kGiB);
  // Pure data parallel does not fit, and says by how much.
  bool pure_dp_seen = false;
  for (const auto& r : all) {
    if (r.plan.tp == 1 && r.plan.pp == 1 && r.plan.zero == 0) {
      pure_dp_seen = true;
      EXPECT_FALSE(r.feasible);
      EXPECT_NE(r.why.find("over memory by"), std::string::npos) << r.why;
      EXPECT_GT(r.missing_bytes, 100 * kGiB);  // 12.85B params x 18 bytes alone is ~215 GiB
    }
  }
  EXPECT_TRUE(pure_dp_seen);
  // gtrain run executes tensor and pipeline parallel and ZeRO-3: auto mode picks one of them
  // because data parallel with ZeRO-1/2 alone does not fit.
  in.caps = kRunCapabilities;
  const Plan run = plan_job(in);
  EXPECT_TRUE(run.tp * run.pp > 1 || run.zero == 3 || run.offload) << run.summary();
  EXPECT_LE(run.est_memory_bytes, 40 * kGiB);
  bool zero3_fits = false;
  for (const auto& r : all) {
    if (r.plan.tp == 1 && r.plan.pp == 1 && r.plan.zero < 3 && !r.plan.offload) {
      EXPECT_FALSE(r.feasible) << r.plan.summary() << ": " << r.why;
    }
    // 12.85B x 16 B over 8 ranks is 26 GiB: fully sharded, data parallel alone fits.
    if (r.plan.tp == 1 && r.plan.pp == 1 && r.plan.zero == 3 && r.feasible) zero3_fits = true;
  }
  EXPECT_TRUE(zero3_fits);
}

TEST(PlannerReference, ModelThatCannotFitSaysHowMuchIsMissing) {
  PlannerInput in = gpt_input(96, 96, 12288, 2048, 1024, 8, "A100-40GB");  // ~175B
  const std::string e = error_of(in);
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(e, m, std::regex("needs ([0-9.]+) GiB per GPU, 39\\.0 GiB usable: ([0-9.]+) GiB missing")))
      << e;
  EXPECT_NEAR(std::stod(m[1]) - 39.0, std::stod(m[2]), 0.11);
  EXPECT_GT(std::stod(m[2]), 100.0);
  EXPECT_EQ(e.rfind("no layout fits", 0), 0u) << e;
}

TEST(PlannerBatch, NearestValidBatchesAndTolerance) {
  PlannerInput in;
  in.model.params = 1000000;
  in.model.activation_bytes_per_sample = 10e6;
  in.model.recompute_bytes_per_sample = 2e6;
  in.train.global_batch = 64;
  in.world = 3;
  // Exact by default: 64 over 3 replicas is 22, 21, 21.
  const Plan uneven = plan_job(in);
  EXPECT_EQ(uneven.global_batch(), 64);
  EXPECT_EQ(uneven.shares(), "22, 21, 21");
  EXPECT_EQ(uneven.requested_global_batch, 0);
  EXPECT_NE(uneven.reason.find("replica shares 22, 21, 21"), std::string::npos) << uneven.reason;
  // parallel.batch_tolerance: the user prefers an even split with a changed batch.
  in.parallel.batch_tolerance = 0.05;
  const Plan p = plan_job(in);
  EXPECT_EQ(p.global_batch(), 63);
  EXPECT_EQ(p.requested_global_batch, 64);
  EXPECT_TRUE(p.even());
  in.parallel.batch_tolerance = 0.01;  // 63 is 1.6% away: the exact batch, split unevenly
  EXPECT_EQ(plan_job(in).global_batch(), 64);
  EXPECT_EQ(nearest_valid_global_batches(64, 3), (std::vector<int64_t>{63, 66}));
}

// When no layout of the ranks works, the error names why each one with tp or pp was ruled out too
// (it named only data parallelism's reason).
TEST(PlannerBatch, NoLayoutNamesEveryLayoutsReason) {
  PlannerInput in = gpt_input(2, 4, 128, 64, 2, 3, "A100-80GB");
  in.use_fewer_ranks = false;  // ranks already started: all 3 must train
  const std::string e = error_of(in);
  EXPECT_EQ(e,
            "train.global_batch = 2 is smaller than the 3 data-parallel ranks; other layouts: tp 1 x pp 3: pp=3 "
            "exceeds the 2 blocks (a stage needs one); tp 3 x pp 1: tp=3 does not divide the 4 attention heads");
  // Before the ranks start, the planner uses 2 of the 3 instead, and says so.
  in.use_fewer_ranks = true;
  const Plan p = plan_job(in);
  EXPECT_EQ(p.world, 2) << p.summary();
  EXPECT_EQ(p.granted, 3);
  EXPECT_EQ(p.idle_ranks(), 1);
  EXPECT_NE(p.reason.find("uses 2 of the 3 granted GPUs (1 idle): no layout of all 3 fits"), std::string::npos)
      << p.reason;
}

// Pipeline stages need not divide the blocks: 4 blocks on 3 stages split by cost (the output layer
// on the last), and the cost model prices the most loaded stage, 2 blocks.
TEST(PlannerPipeline, StagesThatDoNotDivideTheBlocks) {
  const ModelStats tiny = gpt_stats(4, 4, 32, 16, 16, true);  // output layer ~4% of a block
  EXPECT_EQ(pipeline_stage_bounds(tiny, 4, 3), (std::vector<int64_t>{0, 1, 3, 4}));
  EXPECT_EQ(max_stage_blocks(pipeline_stage_bounds(tiny, 4, 3)), 2);
  EXPECT_EQ(pipeline_stage_bounds(tiny, 4, 4), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  // GPT-2's 50257-token output layer costs about five blocks: the last stage takes fewer blocks.
  const ModelStats gpt2 = gpt_stats(12, 12, 768, 1024, 50257, true);
  const std::vector<int64_t> b = pipeline_stage_bounds(gpt2, 12, 2);
  EXPECT_GT(b[1], 6) << b[1];
  EXPECT_THROW(pipeline_stage_bounds(tiny, 4, 5), ConfigError);

  // 4 blocks on 3 ranks: every layout of 3 ranks keeps the batch of 32 (dp = 3 splits it unevenly).
  PlannerInput in = gpt_input(4, 4, 128, 64, 32, 3, "A100-80GB");
  const Plan p = plan_job(in);
  EXPECT_EQ(p.dp * p.tp * p.pp, 3) << p.summary();
  EXPECT_EQ(p.global_batch(), 32) << p.summary();
  in.parallel.mode = ParallelMode::given;
  in.parallel.pp = 3;
  const Plan pp3 = plan_job(in);
  EXPECT_EQ(pp3.pp, 3);
  EXPECT_EQ(pp3.dp, 1);
  // The most loaded stage holds 2 of the 4 blocks: more than a quarter of the model's parameters.
  EXPECT_GT(params_per_device(in.model, 1, 3), 2.0 * static_cast<double>(in.model.params_per_block));
}

// Every pp's split at once (what the planner caches) is each pp's own split, ties broken alike:
// uniform blocks (the planner's), uneven ones, with and without the extras.
TEST(PlannerPipeline, EveryPpAtOnceEqualsEachPp) {
  std::vector<std::vector<double>> costs = {{1.0}, std::vector<double>(12, 1.0), std::vector<double>(13, 2.5)};
  uint32_t seed = 7;
  for (int n : {5, 9, 17}) {
    std::vector<double> c;
    for (int i = 0; i < n; ++i) c.push_back(1.0 + (seed = seed * 1103515245u + 12345u) % 5);  // ties too
    costs.push_back(c);
  }
  for (const auto& cost : costs) {
    for (const auto& [first, last] : {std::pair<double, double>{0, 0}, {0, 3.5}, {2, 0}, {1, 40}}) {
      const auto all = balance_stages_each_pp(cost, first, last);
      ASSERT_EQ(all.size(), cost.size());
      for (size_t pp = 1; pp <= cost.size(); ++pp)
        EXPECT_EQ(all[pp - 1], balance_stages(cost, first, last, static_cast<int64_t>(pp)))
            << cost.size() << " blocks, pp " << pp << ", extras " << first << " " << last;
    }
  }
  const ModelStats gpt3 = gpt_stats(96, 96, 12288, 2048, 50257, true);
  const auto each = pipeline_stage_bounds_each_pp(gpt3, 96);
  for (int64_t pp : {2, 7, 16, 33, 95, 96}) EXPECT_EQ(each[pp - 1], pipeline_stage_bounds(gpt3, 96, pp)) << pp;
}

TEST(PlannerExplicit, EveryWrongFactorIsNamed) {
  PlannerInput in = gpt2_on(8);
  in.parallel.mode = ParallelMode::given;
  in.parallel.dp = 3;
  in.parallel.tp = 5;
  in.parallel.pp = 13;
  const std::string e = error_of(in);
  EXPECT_NE(e.find("dp=3 tp=5 pp=13"), std::string::npos) << e;
  EXPECT_NE(e.find("dp*tp*pp = 195 must equal the 8 granted ranks"), std::string::npos) << e;
  EXPECT_NE(e.find("tp = 5 must divide the 12 attention heads"), std::string::npos) << e;
  EXPECT_NE(e.find("pp = 13 must not exceed the 12 blocks (a stage needs one)"), std::string::npos) << e;

  in.parallel.dp = 0;
  in.parallel.tp = 2;
  in.parallel.pp = 2;
  in.parallel.zero = 1;
  Plan p = plan_job(in);
  EXPECT_EQ(p.dp, 2);
  EXPECT_EQ(p.tp, 2);
  EXPECT_EQ(p.pp, 2);
  EXPECT_EQ(p.zero, 1);
  EXPECT_EQ(p.global_batch(), 512);

  in.caps = kRunCapabilities;  // gtrain run executes tp x pp x dp with ZeRO-1
  const Plan run = plan_job(in);
  EXPECT_EQ(run.summary(), p.summary());

  // An explicit layout over the memory estimate still runs, with a warning in its reason.
  PlannerInput big = gpt_input(40, 40, 5120, 2048, 1024, 8, "A100-40GB");
  big.parallel.mode = ParallelMode::given;
  p = plan_job(big);
  EXPECT_EQ(p.dp, 8);
  EXPECT_NE(p.reason.find("exceeds the memory estimate"), std::string::npos) << p.reason;
}

TEST(PlannerConstraints, TensorParallelStaysWithinANode) {
  PlannerInput in = gpt_input(24, 16, 2048, 2048, 256, 16, "A100-40GB");
  in.gpus_per_node = 4;
  bool saw = false;
  for (const auto& r : plan_candidates(in)) {
    if (r.plan.tp == 8) {
      saw = true;
      EXPECT_FALSE(r.feasible);
      EXPECT_NE(r.why.find("does not fit within a node of 4 GPUs"), std::string::npos) << r.why;
    }
    if (r.feasible) {
      EXPECT_LE(r.plan.tp, 4);
    }
  }
  EXPECT_TRUE(saw);
}

TEST(PlannerConstraints, ClassifiersAreDataParallelOnly) {
  PlannerInput in;
  in.model.params = 100000;
  in.model.activation_bytes_per_sample = 1e5;
  in.model.recompute_bytes_per_sample = 1e5;
  in.model_name = "mlp";
  in.train.global_batch = 64;
  in.world = 4;
  for (const auto& r : plan_candidates(in)) {
    if (r.plan.tp > 1) {
      EXPECT_NE(r.why.find("model mlp does not support tensor parallel"), std::string::npos);
    }
    if (r.plan.pp > 1 && r.plan.tp == 1) {
      EXPECT_NE(r.why.find("cannot be split into pipeline stages"), std::string::npos);
    }
    if (r.feasible) {
      EXPECT_FALSE(r.plan.recompute);
    }
  }
  EXPECT_EQ(plan_job(in).dp, 4);
}

// ---- cost model ----

TEST(CostModel, PipelineBubbleAndMemoryTerms) {
  CostModelInput c;
  c.model = gpt_stats(12, 12, 768, 1024, 50257, true);
  c.precision = "bf16";
  c.profile = *find_gpu_profile("A100-80GB");
  c.topology = {8, 8, 1};
  ParallelLayout l;
  l.dp = 2, l.pp = 4, l.micro_batch = 2, l.grad_accum = 4;
  const TimeEstimate t = estimate_time(c, l);
  EXPECT_NEAR(t.bubble_fraction, 3.0 / 7.0, 1e-12);
  // The bubble is (pp-1) micro-batch slots: bubble / (bubble + busy) == (pp-1)/(m+pp-1).
  const double busy = t.compute + t.overhead + t.tp_comm + t.pp_comm;
  EXPECT_NEAR(t.bubble / (t.bubble + busy), 3.0 / 7.0, 1e-9);

  ParallelLayout dp8;
  dp8.dp = 8, dp8.micro_batch = 4, dp8.grad_accum = 1;
  const MemoryEstimate m0 = estimate_memory(c, dp8);
  dp8.zero = 1;
  const MemoryEstimate m1 = estimate_memory(c, dp8);
  dp8.zero = 2;
  const MemoryEstimate m2 = estimate_memory(c, dp8);
  EXPECT_NEAR(m1.optimizer, m0.optimizer / 8, 1.0);
  EXPECT_NEAR(m1.grads, m0.grads, 1.0);
  EXPECT_NEAR(m2.grads, m0.grads / 8, 1.0);
  EXPECT_NEAR(m0.optimizer, 8.0 * static_cast<double>(c.model.params), 1.0);  // AdamW: two fp32 moments
  EXPECT_NEAR(m0.params, 6.0 * static_cast<double>(c.model.params), 1.0);     // fp32 master + bf16 copy
  // Recompute keeps less per sample; tensor parallel splits activations and parameters.
  EXPECT_LT(m0.activation_per_sample_recompute, 0.4 * m0.activation_per_sample_no_recompute);  // logits stay
  ParallelLayout tp2 = dp8;
  tp2.zero = 0, tp2.dp = 4, tp2.tp = 2;
  const MemoryEstimate mt = estimate_memory(c, tp2);
  EXPECT_LT(mt.activation_per_sample, m0.activation_per_sample);
  EXPECT_NEAR(mt.params, m0.params / 2, 1.0);
  // Autograd's per-parameter gradients come on top of the buckets: a GPU's caching allocator reuses
  // each freed one, so only the largest counts (the [50257, 768] embedding, split by tp); a CPU
  // heap keeps them all. Only a split model has a build peak (the whole fp32 model before a rank
  // keeps its part), and the total covers it.
  EXPECT_NEAR(m2.grad_accumulators, 4.0 * 50257 * 768, 1.0);
  EXPECT_NEAR(mt.grad_accumulators, m0.grad_accumulators / 2, 1.0);
  EXPECT_NEAR(m0.tensors(), m0.training() - m0.workspace, 1.0);
  EXPECT_LT(m0.tensors(), m0.total() - c.profile.workspace_bytes + 1.0);
  EXPECT_EQ(m0.build, 0.0);
  EXPECT_EQ(mt.build, 0.0);  // a GPU receives only its part
  CostModelInput cpu = c;
  cpu.profile = default_cpu_profile(8);
  const MemoryEstimate mc = estimate_memory(cpu, tp2);
  EXPECT_NEAR(mc.build, 4.0 * static_cast<double>(c.model.params) + cpu.profile.workspace_bytes, 1.0);
  EXPECT_NEAR(mc.grad_accumulators, 4.0 * static_cast<double>(c.model.params) / 2, 0.01 * mc.grad_accumulators);
  EXPECT_GE(mc.total(), mc.build);
  // 1F1B: the first of 4 stages holds min(pp, accum) micro-batches.
  ParallelLayout pp4;
  pp4.dp = 2, pp4.pp = 4, pp4.micro_batch = 1, pp4.grad_accum = 8;
  EXPECT_EQ(estimate_memory(c, pp4).in_flight, 4);
  pp4.grad_accum = 2;
  EXPECT_EQ(estimate_memory(c, pp4).in_flight, 2);
  // GPipe: all forwards before any backward, so every micro-batch is in flight.
  pp4.grad_accum = 8;
  const double one_f_one_b = estimate_memory(c, pp4).activations;
  pp4.gpipe = true;
  EXPECT_EQ(estimate_memory(c, pp4).in_flight, 8);
  EXPECT_GT(estimate_memory(c, pp4).activations, 1.9 * one_f_one_b);
}

// Attention scores: LibTorch 1.13's explicit softmax keeps its output (HT^2 elements a block), 2.25
// of those with dropout (always the explicit softmax); SDPA's flash kernels (LibTorch 2.x without
// dropout) keep a HT log-sum-exp. The planner asks this build.
TEST(CostModel, AttentionScoresFollowTheKernel) {
  ModelStats s = gpt_stats(12, 12, 768, 1024, 50304, true, 0.0);
  EXPECT_EQ(s.attention_score_tensors, 1.0);  // gpt_stats assumes the explicit softmax
  const double T = 1024, C = 768, H = 12;
  EXPECT_DOUBLE_EQ(transformer_block_activation_elements(s, 1), 16 * T * C + H * T * T);
  s.attention_score_tensors = 0.0;
  EXPECT_DOUBLE_EQ(transformer_block_activation_elements(s, 1), 16 * T * C + H * T);
  EXPECT_DOUBLE_EQ(transformer_block_activation_elements(s, 2), 4 * T * C + (12 * T * C + H * T) / 2);
  s.attention_score_tensors = 2.25;
  EXPECT_DOUBLE_EQ(transformer_block_activation_elements(s, 1), 16 * T * C + 2.25 * H * T * T);
#if defined(GTRAIN_TORCH_SDPA) && GTRAIN_TORCH_SDPA
  EXPECT_EQ(attention_score_tensors(0.0), 0.0);
  EXPECT_EQ(attention_score_tensors(0.1), 2.25);  // dropout takes the explicit softmax (keyed masks)
  const double gpu_k = 0.0;
#else
  EXPECT_EQ(attention_score_tensors(0.0), 1.0);
  EXPECT_EQ(attention_score_tensors(0.1), 2.25);
  const double gpu_k = 1.0;
#endif
  // The chosen plan's activations on a GPU follow: GPT-2 124M, bf16, micro-batch 16, one H200.
  PlannerInput in = gpt_input(12, 12, 768, 1024, 16, 1, "H200");
  in.model = gpt_stats(12, 12, 768, 1024, 50304, true, 0.0);
  in.parallel.micro_batch = 16;
  const std::vector<RankedPlan> ranked = plan_candidates(in);
  ASSERT_FALSE(ranked.empty());
  ASSERT_TRUE(ranked[0].feasible) << ranked[0].why;
  ASSERT_EQ(ranked[0].plan.micro_batch, 16);
  const double eb = 2.4;  // bf16 autocast bytes per kept element
  const double blocks = 12 * (16 * T * C + (gpu_k > 0 ? gpu_k * H * T * T : H * T)) * eb;
  // Outside the blocks: the final norm (2TC); a GPU rank's fused loss holds no whole logits.
  EXPECT_NEAR(ranked[0].memory.activation_per_sample_no_recompute, blocks + 2 * T * C * eb, 1e-6 * blocks);
}

TEST(CostModel, GptStatsMatchTheFormula) {
  const ModelStats s = gpt_stats(3, 2, 16, 8, 50, true);
  EXPECT_EQ(s.params, 50 * 16 + 8 * 16 + 3 * (12 * 16 * 16 + 13 * 16) + 2 * 16);
  EXPECT_EQ(gpt_stats(3, 2, 16, 8, 50, false).params, s.params + 50 * 16);
  EXPECT_EQ(s.heads, 2);
  EXPECT_EQ(s.blocks, 3);
  EXPECT_TRUE(s.supports_tp && s.supports_pp);
  EXPECT_GT(s.activation_bytes_per_sample, s.recompute_bytes_per_sample);
}

// ---- hardware profiles ----

TEST(HardwareProfiles, TableLookupAndSavedCalibrations) {
  EXPECT_EQ(find_gpu_profile("NVIDIA A100-SXM4-40GB")->name, "A100-40GB");
  EXPECT_EQ(find_gpu_profile("NVIDIA A100-SXM4-80GB")->name, "A100-80GB");
  EXPECT_EQ(find_gpu_profile("a100", 40 * kGiB)->name, "A100-40GB");
  EXPECT_EQ(find_gpu_profile("NVIDIA H100 80GB HBM3")->name, "H100-80GB");
  EXPECT_EQ(find_gpu_profile("NVIDIA H200")->name, "H200");
  EXPECT_EQ(find_gpu_profile("NVIDIA L40S")->name, "L40S");
  EXPECT_EQ(find_gpu_profile("Tesla V100-SXM2-16GB")->name, "V100-16GB");
  EXPECT_FALSE(find_gpu_profile("GeForce GTX 480").has_value());
  EXPECT_EQ(nearest_gpu_profile_by_memory(40 * kGiB).name, "A100-40GB");
  EXPECT_EQ(nearest_gpu_profile_by_memory(141e9).name, "H200");
  EXPECT_EQ(nearest_gpu_profile_by_memory(80 * kGiB).name, "A100-80GB");
  for (const auto& p : gpu_profile_table()) {
    EXPECT_GT(p.achievable_flops("bf16"), 1e12) << p.name;
    EXPECT_LT(p.achievable_flops("bf16"), p.bf16_flops) << p.name;
  }
  test::TempDir dir;
  const std::map<std::string, std::string> env = {{"GTRAIN_PROFILE_DIR", dir.path()}, {"HOME", "/nonexistent"}};
  EXPECT_EQ(profile_dir(env), dir.path());
  EXPECT_EQ(profile_dir({{"HOME", "/home/u"}}), "/home/u/.cache/gtrain");
  const std::string path = profile_path(env, "box");
  EXPECT_FALSE(load_profile(path).has_value());
  EXPECT_EQ(local_cpu_profile(env, "box", 4).source, "default");
  HardwareProfile p = default_cpu_profile(4);
  p.fp32_flops = 123e9;
  p.source = "calibrated on box";
  p.reserved_bytes = 3e6;
  save_profile(p, path);
  const auto back = load_profile(path);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->fp32_flops, 123e9);
  EXPECT_EQ(back->reserved_bytes, 3e6);
  EXPECT_EQ(local_cpu_profile(env, "box", 4).source, "calibrated on box");
  test::write_file(path, "{\"kind\": \"cpu\", \"fp32_flops\": \"fast\"}");
  try {
    load_profile(path);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
  }
  test::write_file(path, "{not json");  // the parser's own words, without its exception tag
  try {
    load_profile(path);
    FAIL();
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind(path + ": not a valid hardware profile (parse error at line 1", 0), 0u) << what;
    EXPECT_EQ(what.find("json.exception"), std::string::npos) << what;
  }
}

// Ranks that share one GPU (more ranks than GPUs): each plans with its share of the memory, less
// its own CUDA context, and of the rates; their collectives go through host memory.
TEST(HardwareProfiles, RanksThatShareAGpuPlanWithTheirShare) {
  const HardwareProfile h100 = *find_gpu_profile("H100-80GB");
  const HardwareProfile same = shared_gpu_profile(h100, 1);
  EXPECT_EQ(same.name, h100.name);
  EXPECT_EQ(same.memory_bytes, h100.memory_bytes);
  const HardwareProfile quarter = shared_gpu_profile(h100, 4);
  EXPECT_EQ(quarter.name, "H100-80GB shared by 4 ranks");
  EXPECT_DOUBLE_EQ(quarter.usable_bytes(), h100.memory_bytes / 4 - h100.reserved_bytes);
  EXPECT_DOUBLE_EQ(quarter.bf16_flops, h100.bf16_flops / 4);
  EXPECT_DOUBLE_EQ(quarter.achievable_flops("bf16"), h100.achievable_flops("bf16") / 4);
  EXPECT_DOUBLE_EQ(quarter.memory_bw, h100.memory_bw / 4);
  EXPECT_LE(quarter.intra_node_bw, h100.host_link_rate() / 8);
  EXPECT_NE(quarter.note.find("shared by 4 ranks"), std::string::npos);

  // A ~1.3B GPT on 2 ranks: on one shared A100-40GB each has half the memory and half the compute,
  // so the step takes about twice as long as on two cards, and the plan fits the half it has.
  PlannerInput apart = gpt_input(24, 16, 2048, 2048, 64, 2, "A100-40GB");
  apart.caps = kRunCapabilities;
  PlannerInput shared = apart;
  shared.profile = shared_gpu_profile(apart.profile, 2);
  const Plan two = plan_job(apart), one = plan_job(shared);
  EXPECT_LE(one.est_memory_bytes, shared.profile.usable_bytes());
  EXPECT_GT(one.est_memory_bytes, 0.0);
  EXPECT_GT(two.est_memory_bytes, shared.profile.usable_bytes()) << "the test needs a plan that no longer fits";
  EXPECT_GT(one.est_step_seconds, 1.8 * two.est_step_seconds) << one.summary() << " vs " << two.summary();
  EXPECT_NE(one.profile.find("shared by 2 ranks"), std::string::npos);
}

TEST(PlanFlags, MemorySizesAndGpuCounts) {
  EXPECT_EQ(parse_memory_size("80GiB", "--gpu-mem"), 80 * kGiB);
  EXPECT_EQ(parse_memory_size("40GB", "--gpu-mem"), 40e9);
  EXPECT_EQ(parse_memory_size("81920MiB", "--gpu-mem"), 80 * kGiB);
  EXPECT_EQ(parse_memory_size("80", "--gpu-mem"), 80 * kGiB);
  EXPECT_EQ(parse_memory_size("0.5TiB", "--gpu-mem"), 512 * kGiB);
  for (const std::string bad : {"80XB", "", "GiB", "1.2.3G", "-4GiB", "1KiB"}) {
    try {
      parse_memory_size(bad, "--gpu-mem");
      ADD_FAILURE() << bad;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("--gpu-mem '" + bad + "'"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(parse_gpu_counts("8", "--gpus"), (std::vector<int64_t>{8}));
  EXPECT_EQ(parse_gpu_counts("1,2,4,8", "--gpus"), (std::vector<int64_t>{1, 2, 4, 8}));
  EXPECT_EQ(parse_gpu_counts("1-8", "--gpus"), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(parse_gpu_counts("1-3,16", "--gpus"), (std::vector<int64_t>{1, 2, 3, 16}));
  for (const std::string bad : {"0", "", "x", "1,,2", "-1", "2.5", "65537", "1000000", "8-1", "1-", "1-2-3", "1-3,2"}) {
    EXPECT_THROW(parse_gpu_counts(bad, "--gpus"), ConfigError) << bad;
  }
  try {
    parse_gpu_counts("1000000", "--gpus");
  } catch (const ConfigError& e) {  // the range is in the message
    EXPECT_EQ(std::string(e.what()),
              "--gpus '1000000': expected a GPU count from 1 to 65536 (e.g. 8), a list such as 1,2,4,8 or a "
              "range such as 1-8");
  }
}

}  // namespace
}  // namespace gtrain

namespace gtrain {
namespace {

// Blocks of the fused output layer + loss: within the budget (64 MiB of fp32 logits on CPU,
// 512 MiB on a GPU), the fewest that fit, balanced.
TEST(CostModel, FusedLossBlocksFitTheBudgetAndBalance) {
  const int64_t V = 50304, N = 16 * 1024;
  EXPECT_EQ(fused_loss_block_rows(N, V, true), 2341);  // 512 MiB fits 2668 rows: 7 blocks, not 6 + a sliver
  EXPECT_EQ(fused_loss_block_rows(N, V, false), 328);  // 64 MiB fits 333 rows: 50 blocks
  for (bool gpu : {false, true}) {
    for (int64_t n : {1, 7, 333, 334, 2668, 2669, 16384, 100000}) {
      const int64_t rows = fused_loss_block_rows(n, V, gpu);
      const int64_t most = static_cast<int64_t>(fused_loss_block_bytes(gpu) / (4.0 * V));
      const int64_t blocks = (n + rows - 1) / rows;
      EXPECT_LE(4.0 * V * rows, fused_loss_block_bytes(gpu)) << n;
      EXPECT_EQ(blocks, (n + most - 1) / most) << n;           // no more blocks than needed
      EXPECT_GT(n - (blocks - 1) * rows, rows - blocks) << n;  // the last block is nearly full
    }
  }
  EXPECT_EQ(fused_loss_block_rows(5, 1 << 30, true), 1);  // a row larger than the budget: one a block
}

// GPT-2 124M in bf16 on an H100 profile.
CostModelInput gpt2_bf16_on_h100() {
  CostModelInput in;
  in.model = gpt_stats(12, 12, 768, 1024, 50304, true);
  in.precision = "bf16";
  in.profile = *find_gpu_profile("H100-80GB");
  return in;
}

// On a GPU the flat gradient accumulators exist only when a step has more than one micro-batch
// (one micro-batch hands each gradient straight to its bucket).
TEST(CostModel, GpuAccumulatorsOnlyWithSeveralMicroBatches) {
  const CostModelInput in = gpt2_bf16_on_h100();
  ParallelLayout l;
  l.micro_batch = 8;
  const MemoryEstimate one = estimate_memory(in, l);
  l.grad_accum = 4;
  const MemoryEstimate four = estimate_memory(in, l);
  const double P = static_cast<double>(in.model.params);
  EXPECT_NEAR(four.grad_accumulators - one.grad_accumulators, 4.0 * P, 1.0);
  EXPECT_NEAR(one.grad_accumulators, 4.0 * 50304 * 768, 1.0);  // the largest parameter, the embedding
}

// The fused output layer + loss holds no whole logits: GPT-2 124M at micro-batch 16 in bf16 saves
// the [T, V] logits kept for backward and their gradient (4 T V elements per sample) less the
// blocks and gradients it holds instead; tensor parallelism keeps the vocabulary-parallel loss.
TEST(CostModel, FusedLossDropsTheWholeLogits) {
  CostModelInput in = gpt2_bf16_on_h100();
  ParallelLayout l;
  l.micro_batch = 16;
  const MemoryEstimate plain = estimate_memory(in, l);
  in.fused_loss = true;
  const MemoryEstimate fused = estimate_memory(in, l);
  const double T = 1024, V = 50304, C = 768, mb = 16;
  const double saved = 4.0 * T * V * 2.4 * mb;  // 2.4: the model's bytes per bf16 activation (with fp32 copies)
  // On a GPU, 7 blocks of 2341 rows for the 16384 rows, one at a time: its bf16 logits, which the
  // CUDA kernel turns into their gradient in place, and the weight gradient's bf16 product.
  const double held = 2.0 * V * 2341 + 2.0 * V * C + 6.0 * T * C * mb + 4.0 * V * C;
  EXPECT_NEAR(plain.activations - fused.activations, saved - held, 1e6);
  EXPECT_GT(plain.total() - fused.total(), 5e9);  // GiB-scale: what the GPU benchmark compares
  l.tp = 2;
  EXPECT_DOUBLE_EQ(estimate_memory(in, l).activations, [&] {
    in.fused_loss = false;
    return estimate_memory(in, l).activations;
  }());
}

}  // namespace
}  // namespace gtrain
