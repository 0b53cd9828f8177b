// test_cost_model_cpu.cpp: the step-time model of CPU ranks on a per-thread calibrated host
// (HardwareProfile::per_thread): threads per rank, ranks sharing a host's cores, a block's terms,
// and the profile fields that carry the calibration (older profiles stay valid without them).
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/core/errors.h"
#include "strategies/planner/cost_model.h"
#include "strategies/planner/hardware_profile.h"
#include "tests/support/test_util.h"

namespace gtrain {
namespace {

// A 2-core host as `gtrain plan --calibrate` describes one (figures of this project's CI VM).
HardwareProfile two_core_host() {
  HardwareProfile p = default_cpu_profile(2);
  p.cores = 2;
  p.fp32_flops = 300e9;
  p.fp32_flops_1thread = 170e9;
  p.matmul_half_size = 40;
  p.matmul_half_size_all = 200;
  p.attention_flops_1thread = 100e9;
  p.elementwise_bw = 13e9;
  p.norm_s = 1e-9;
  p.activation_s = 7e-9;
  p.softmax_s = 1.5e-9;
  p.optimizer_s = 2.2e-9;
  p.memory_bound_speedup = 1.5;
  p.block_remainder_s = 30e-9;
  p.block_speedup = 1.4;
  p.memory_bw = 13e9;
  p.intra_node_bw = 6.5e9;
  return p;
}

CostModelInput gpt_on(const HardwareProfile& p, int64_t ranks, int64_t threads) {
  CostModelInput in;
  in.model = gpt_stats(6, 4, 256, 128, 512, true);
  in.profile = p;
  in.topology = {ranks, ranks, 1};
  in.threads_per_rank = threads;
  cache_stage_blocks(&in);
  return in;
}

ParallelLayout layout(int64_t dp, int64_t tp = 1, int64_t pp = 1) {
  ParallelLayout l;
  l.dp = dp;
  l.tp = tp;
  l.pp = pp;
  l.micro_batch = 16 / dp;
  l.grad_accum = 1;
  return l;
}

TEST(CpuCostModel, ThreadsAndSharedCoresPriceTheStep) {
  const HardwareProfile p = two_core_host();
  ASSERT_TRUE(p.per_thread());
  const double one = estimate_time(gpt_on(p, 1, 1), layout(1)).total();
  const double two_threads = estimate_time(gpt_on(p, 1, 2), layout(1)).total();
  // Two threads: faster, by at most the block's and the memory-bound layers' measured speed-ups.
  EXPECT_LT(two_threads, one);
  EXPECT_GT(two_threads, one / 1.6);
  // "auto" threads on one rank take both cores.
  EXPECT_DOUBLE_EQ(estimate_time(gpt_on(p, 1, 0), layout(1)).total(), two_threads);
  // Two ranks of one thread each split the batch: about half the one-rank step (plus the allreduce).
  const double dp2 = estimate_time(gpt_on(p, 2, 1), layout(2)).total();
  EXPECT_NEAR(dp2 / (one / 2.0), 1.0, 0.1) << dp2 << " against " << one;
  // Two ranks asking for two threads each share the two cores: no faster than one thread each.
  EXPECT_GE(estimate_time(gpt_on(p, 2, 2), layout(2)).total(), dp2 * 0.99);
  // Four ranks of one thread on two cores: each gets half a core, the step is no faster than dp2.
  CostModelInput four = gpt_on(p, 4, 1);
  ParallelLayout l4 = layout(4);
  EXPECT_GE(estimate_time(four, l4).total(), dp2 * 0.99);
  // Without the per-thread figures the old model (peak x efficiency) prices it, threads unseen.
  HardwareProfile plain = default_cpu_profile(2);
  EXPECT_FALSE(plain.per_thread());
  EXPECT_DOUBLE_EQ(estimate_time(gpt_on(plain, 1, 1), layout(1)).total(),
                   estimate_time(gpt_on(plain, 1, 2), layout(1)).total());
}

TEST(CpuCostModel, BlockPriceIsTheSumOfItsTerms) {
  const HardwareProfile p = two_core_host();
  BlockShape b = BlockShape::gpt(128, 256, 4);
  EXPECT_EQ(b.head_dim, 64);
  EXPECT_EQ(b.mlp, 1024);
  const double with = cpu_block_seconds(p, b, 16, 1), without = cpu_block_seconds(p, b, 16, 1, false);
  EXPECT_NEAR(with - without, 16.0 * 128 * 256 * p.block_remainder_s, 1e-12);
  // Linear layers: 6 x tokens x 12 C^2 FLOPs at the rate of a 361-wide matmul on one thread.
  const double tokens = 16.0 * 128, n = 3.0 / (1.0 / tokens + 2.0 / 256);
  const double linear = 6.0 * tokens * 12.0 * 256 * 256 / (p.fp32_flops_1thread * n / (n + p.matmul_half_size));
  EXPECT_GT(without, linear);
  EXPECT_LT(without, 2.0 * linear);
  // On both cores: the measured block speed-up, nothing else.
  EXPECT_NEAR(cpu_block_seconds(p, b, 16, 2), with / p.block_speedup, 1e-12);
  // Tensor parallel halves the split terms (heads, MLP), not the norms and residual adds.
  b.tp = 2;
  const double tp2 = cpu_block_seconds(p, b, 16, 1);
  EXPECT_LT(tp2, with);
  EXPECT_GT(tp2, with / 2.0);
  // A matmul's rate: from the one-thread curve on one thread to the every-core curve on all.
  EXPECT_NEAR(p.matmul_rate(1024, 2), p.fp32_flops, 1e-3 * p.fp32_flops);
  EXPECT_NEAR(p.matmul_rate(40, 1), p.fp32_flops_1thread / 2.0, 1e-6 * p.fp32_flops_1thread);
}

TEST(CpuCostModel, ProfileFieldsRoundTripAndOlderProfilesStayValid) {
  test::TempDir dir;
  const HardwareProfile p = two_core_host();
  save_profile(p, dir.file("p.json"));
  const auto back = load_profile(dir.file("p.json"));
  ASSERT_TRUE(back.has_value());
  EXPECT_TRUE(back->per_thread());
  EXPECT_EQ(back->cores, 2);
  EXPECT_DOUBLE_EQ(back->block_remainder_s, p.block_remainder_s);
  EXPECT_DOUBLE_EQ(back->matmul_half_size_all, p.matmul_half_size_all);
  // A profile saved before these fields existed: loads, and prices as before.
  nlohmann::json old = profile_to_json(default_cpu_profile(2));
  for (const char* k : {"cores", "fp32_flops_1thread", "matmul_half_size", "matmul_half_size_all",
                        "attention_flops_1thread", "elementwise_bw", "norm_s", "activation_s", "softmax_s",
                        "optimizer_s", "memory_bound_speedup", "block_remainder_s", "block_speedup"}) {
    old.erase(k);
  }
  test::write_file(dir.file("old.json"), old.dump());
  const auto loaded = load_profile(dir.file("old.json"));
  ASSERT_TRUE(loaded.has_value());
  EXPECT_FALSE(loaded->per_thread());
  // A negative figure names the file and the field.
  nlohmann::json bad = profile_to_json(p);
  bad["block_speedup"] = -1;
  test::write_file(dir.file("bad.json"), bad.dump());
  try {
    load_profile(dir.file("bad.json"));
    FAIL() << "a negative block_speedup was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("bad.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("block_speedup"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gtrain
