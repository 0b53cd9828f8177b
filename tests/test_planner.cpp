// test_planner.cpp: planner invariants for every world size 1..1024, the reference cases (GPT-2 on
// 8 x 80 GB, 13B on 8 x 40 GB, a model that cannot fit), explicit layouts, the cost model's
// formulas, and hardware profiles.
#include <gtest/gtest.h>

#include <cmath>
#include <regex>

#include "launcher/commands/plan_command.h"
#include "runtime/core/errors.h"
#include "strategies/planner/planner.h"
#include "strategies/planner/stage_split.h"
#include "tests/support/test_util.h"

namespace gtrain {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

PlannerInput gpt_input(int64_t layers, int64_t heads, int64_t hidden, int64_t seq, int64_t batch, int64_t world,
                       const std::string& gpu, double mem_gib = 0) {
  PlannerInput in;
  in.model = gpt_stats(layers, heads, hidden, seq, 50257, true);
  in.model_name = "gpt";
  in.train.global_batch = batch;
  in.train.steps = 1000;
  in.precision.dtype = "bf16";
  in.world = world;
  in.gpus_per_node = 8;
  in.profile = *find_gpu_profile(gpu);
  if (mem_gib > 0) in.profile.memory_bytes = mem_gib * kGiB;
  return in;
}

PlannerInput gpt2_on(int64_t world) {
  return gpt_input(12, 12, 768, 1024, 512, world, "A100-80GB");
}

std::string error_of(const PlannerInput& in) {
  try {
    plan_job(in);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

void check_invariants(const PlannerInput& in, const std::vector<RankedPlan>& all) {
  const int64_t gpn = std::min(in.gpus_per_node, in.world);
  const double usable = usable_memory_bytes(in);
  const int64_t B = in.train.global_batch;
  int64_t expect_rank = 1;
  double last_time = 0;
  for (const auto& r : all) {
    const Plan& p = r.plan;
    EXPECT_EQ(p.dp * p.tp * p.pp, in.world) << p.summary();
    if (!r.feasible) {
      EXPECT_EQ(r.rank, 0);
      EXPECT_FALSE(r.why.empty());
      continue;
    }
    EXPECT_EQ(r.rank, expect_rank++) << "feasible plans come first, ranked 1..n";
    EXPECT_GE(r.time.total() + 1e-12, last_time) << "ranked by time";
    last_time = r.time.total();
    EXPECT_EQ(p.dp * p.micro_batch * p.grad_accum, p.global_batch());
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
    EXPECT_LE(p.tp, gpn);
    EXPECT_EQ(gpn % p.tp, 0) << "tp stays within a node";
    EXPECT_LE(r.memory.total(), usable) << p.summary();
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
  // 512 = 2^9: every world whose dp can split it has a plan (all powers of two up to 512, ...).
  EXPECT_GE(feasible_worlds, 10);
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
  EXPECT_EQ(p.zero, 0);
  EXPECT_FALSE(p.recompute);
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
  // gtrain run executes tensor and pipeline parallel: auto mode picks them because data
  // parallel with ZeRO alone does not fit.
  in.caps = kRunCapabilities;
  const Plan run = plan_job(in);
  EXPECT_GT(run.tp * run.pp, 1) << run.summary();
  EXPECT_LE(run.est_memory_bytes, 40 * kGiB);
  for (const auto& r : all) {
    if (r.plan.tp == 1 && r.plan.pp == 1) {
      EXPECT_FALSE(r.feasible) << r.plan.summary() << ": " << r.why;
    }
  }
}

TEST(PlannerReference, ModelThatCannotFitSaysHowMuchIsMissing) {
  PlannerInput in = gpt_input(96, 96, 12288, 2048, 1024, 8, "A100-40GB");  // ~175B
  const std::string e = error_of(in);
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(e, m, std::regex("needs ([0-9.]+) GiB per GPU, 40\\.0 GiB usable: ([0-9.]+) GiB missing")))
      << e;
  EXPECT_NEAR(std::stod(m[1]) - 40.0, std::stod(m[2]), 0.11);
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
  EXPECT_NE(error_of(in).find("nearest valid global batches: 63 or 66"), std::string::npos) << error_of(in);
  in.parallel.batch_tolerance = 0.05;
  const Plan p = plan_job(in);
  EXPECT_EQ(p.global_batch(), 63);
  EXPECT_EQ(p.requested_global_batch, 64);
  in.parallel.batch_tolerance = 0.01;  // 63 is 1.6% away
  EXPECT_FALSE(error_of(in).empty());
}

// When no layout of the ranks works, the error names why each one with tp or pp was ruled out too
// (it named only data parallelism's reason).
TEST(PlannerBatch, NoLayoutNamesEveryLayoutsReason) {
  PlannerInput in = gpt_input(2, 4, 128, 64, 32, 3, "A100-80GB");
  const std::string e = error_of(in);
  EXPECT_EQ(e,
            "train.global_batch = 32 cannot be split evenly over dp = 3 data-parallel ranks; nearest valid global "
            "batches: 30 or 33 (or allow a change with parallel.batch_tolerance); other layouts: tp 1 x pp 3: pp=3 "
            "exceeds the 2 blocks (a stage needs one); tp 3 x pp 1: tp=3 does not divide the 4 attention heads");
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

  // 4 blocks on 3 ranks: the planner now finds pp = 3 where dp = 3 cannot split 32 samples.
  PlannerInput in = gpt_input(4, 4, 128, 64, 32, 3, "A100-80GB");
  const Plan p = plan_job(in);
  EXPECT_EQ(p.dp * p.tp * p.pp, 3) << p.summary();
  EXPECT_EQ(p.global_batch(), 32) << p.summary();
  in.parallel.mode = "explicit";
  in.parallel.pp = 3;
  const Plan pp3 = plan_job(in);
  EXPECT_EQ(pp3.pp, 3);
  EXPECT_EQ(pp3.dp, 1);
  // The most loaded stage holds 2 of the 4 blocks: more than a quarter of the model's parameters.
  EXPECT_GT(params_per_device(in.model, 1, 3), 2.0 * static_cast<double>(in.model.params_per_block));
}

TEST(PlannerExplicit, EveryWrongFactorIsNamed) {
  PlannerInput in = gpt2_on(8);
  in.parallel.mode = "explicit";
  in.parallel.dp = 3;
  in.parallel.tp = 5;
  in.parallel.pp = 13;
  const std::string e = error_of(in);
  EXPECT_NE(e.find("dp=3 tp=5 pp=13"), std::string::npos) << e;
  EXPECT_NE(e.find("dp*tp*pp = 195 must equal the 8 granted ranks"), std::string::npos) << e;
  EXPECT_NE(e.find("tp = 5 must divide the 12 attention heads"), std::string::npos) << e;
  EXPECT_NE(e.find("pp = 13 must not exceed the 12 blocks (a stage needs one)"), std::string::npos) << e;
  EXPECT_NE(e.find("must be divisible by dp = 3"), std::string::npos) << e;

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
  big.parallel.mode = "explicit";
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
  save_profile(p, path);
  const auto back = load_profile(path);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->fp32_flops, 123e9);
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
  for (const std::string bad : {"0", "", "x", "1,,2", "-1", "2.5", "65537", "1000000"}) {
    EXPECT_THROW(parse_gpu_counts(bad, "--gpus"), ConfigError) << bad;
  }
  try {
    parse_gpu_counts("1000000", "--gpus");
  } catch (const ConfigError& e) {  // the range is in the message
    EXPECT_EQ(std::string(e.what()),
              "--gpus '1000000': expected a GPU count from 1 to 65536 (e.g. 8) or a list such as 1,2,4,8");
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
  // A GPU block: 7 blocks of 2341 rows for the 16384 rows (471 MB of fp32 logits each).
  const double held = 2.0 * 4.0 * V * 2341 + 6.0 * T * C * mb + 4.0 * V * C;
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
