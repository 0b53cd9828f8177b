// test_reproducible.cpp: bitwise mode's pieces on one process: the canonical chunk tree (one rank
// or slices on several give the same bits, O(log N) values alive), the exact norm (any split of the
// elements, the same bits), the CPU optimizer loop (any split of the chunk, the same bits), the
// chunk layout's arithmetic, and the planner's choices and costs in bitwise mode.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "runtime/comm/communicator.h"
#include "runtime/core/errors.h"
#include "runtime/core/parallel_layout.h"
#include "strategies/planner/planner.h"
#include "strategies/reproducible.h"

namespace gtrain {
namespace {

// Leaves of wildly different magnitudes: float sums of them depend on the order.
std::vector<torch::Tensor> leaves(int64_t n, int64_t width, uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<torch::Tensor> out;
  for (int64_t i = 0; i < n; ++i) {
    out.push_back(torch::randn({width}) * std::pow(10.0, static_cast<double>(i % 7) - 3.0));
  }
  return out;
}

// The canonical tree written out recursively: node [lo, hi) of the power-of-two cover.
torch::Tensor reference_tree(const std::vector<torch::Tensor>& v, int64_t lo, int64_t size) {
  const int64_t n = static_cast<int64_t>(v.size());
  if (size == 1) return v[static_cast<size_t>(lo)].clone();
  const int64_t half = size / 2;
  auto left = reference_tree(v, lo, half);
  if (lo + half >= n) return left;
  return left + reference_tree(v, lo + half, half);
}

torch::Tensor reference_sum(const std::vector<torch::Tensor>& v) {
  int64_t size = 1;
  while (size < static_cast<int64_t>(v.size())) size *= 2;
  return reference_tree(v, 0, size);
}

TEST(ChunkTree, FoldIsTheCanonicalTreeAndKeepsLogNValues) {
  for (int64_t n = 1; n <= 17; ++n) {
    const auto v = leaves(n, 257, static_cast<uint64_t>(n));
    ChunkTree t;
    size_t most = 0;
    for (int64_t i = 0; i < n; ++i) {
      t.push(i, v[static_cast<size_t>(i)]);
      most = std::max(most, t.live());
    }
    EXPECT_LE(most, static_cast<size_t>(std::floor(std::log2(static_cast<double>(n)))) + 1) << n;
    EXPECT_TRUE(torch::equal(t.fold(), reference_sum(v))) << n << " chunks";
    EXPECT_EQ(t.live(), 0u);
  }
}

// Each "rank" owns one slice of every leaf and folds its own tree: the slices put together are the
// whole tree's bits, for any number of slices.
TEST(ChunkTree, SlicesOverAnyNumberOfRanksGiveTheSameBits) {
  const auto v = leaves(13, 240, 7);
  ChunkTree whole;
  for (int64_t i = 0; i < 13; ++i) whole.push(i, v[static_cast<size_t>(i)]);
  const auto expect = whole.fold();
  for (int64_t dp : {2, 3, 4, 5}) {
    const int64_t slice = 240 / dp;
    std::vector<torch::Tensor> parts;
    for (int64_t r = 0; r < dp; ++r) {
      ChunkTree t;
      for (int64_t i = 0; i < 13; ++i) t.push(i, v[static_cast<size_t>(i)].narrow(0, r * slice, slice));
      parts.push_back(t.fold());
    }
    EXPECT_TRUE(torch::equal(torch::cat(parts), expect.narrow(0, 0, slice * dp))) << dp << " slices";
  }
}

// What the tree buys: a left-to-right sum of the same leaves (one rank accumulating) differs.
TEST(ChunkTree, OtherOrdersRoundDifferently) {
  const auto v = leaves(12, 4096, 3);
  auto sequential = v[0].clone();
  for (size_t i = 1; i < v.size(); ++i) sequential += v[i];
  EXPECT_FALSE(torch::equal(sequential, reference_sum(v)));
  EXPECT_TRUE(torch::allclose(sequential, reference_sum(v), 1e-5, 1e-6));
}

TEST(ChunkTree, LeavesOutOfOrderAreAnError) {
  ChunkTree t;
  t.push(0, torch::ones({2}));
  EXPECT_THROW(t.push(2, torch::ones({2})), Error);
}

TEST(ExactNorm, AnySplitOfTheElementsGivesTheSameBits) {
  torch::manual_seed(11);
  auto g = torch::randn({100003});
  g.narrow(0, 0, 1000).mul_(1e-20);  // tiny elements next to large ones
  g.narrow(0, 5000, 10).mul_(1e6);
  const auto opts = torch::TensorOptions();
  const double one = exact_norm({g}, {}, opts).item<double>();
  const double three =
      exact_norm({g.narrow(0, 0, 7), g.narrow(0, 7, 60000), g.narrow(0, 60007, 40000 - 4)}, {}, opts).item<double>();
  const double reversed = exact_norm({g.narrow(0, 50000, 50003), g.narrow(0, 0, 50000)}, {}, opts).item<double>();
  EXPECT_EQ(one, three);
  EXPECT_EQ(one, reversed);
  const double reference = g.to(torch::kDouble).pow(2).sum().sqrt().item<double>();
  EXPECT_NEAR(one, reference, 1e-12 * reference);
  EXPECT_EQ(exact_norm({torch::zeros({5})}, {}, opts).item<double>(), 0.0);
  EXPECT_TRUE(std::isinf(exact_norm({torch::tensor({1.0f, INFINITY})}, {}, opts).item<double>()));
  EXPECT_TRUE(std::isnan(exact_norm({torch::tensor({1.0f, NAN})}, {}, opts).item<double>()));
}

TEST(BitwiseOptimizer, AdamWUpdateDoesNotDependOnWhereTheChunkIsCut) {
  torch::manual_seed(5);
  const int64_t n = 70001;
  const auto p0 = torch::randn({n}), g = torch::randn({n}) * 0.1;
  const std::vector<std::pair<int64_t, int64_t>> decayed = {{0, 40000}, {50001, n}};
  AdamWStep s{0.01, 0.9, 0.95, 1e-8, 0.1, 1};
  auto whole = p0.clone(), m = torch::zeros({n}), v = torch::zeros({n});
  for (int64_t step = 1; step <= 3; ++step) {
    s.step = step;
    adamw_update_cpu(whole, g, m, v, decayed, s);
  }
  // The same steps over three pieces cut at odd places (ZeRO shards).
  auto pieces = p0.clone(), m2 = torch::zeros({n}), v2 = torch::zeros({n});
  const std::vector<int64_t> cuts = {0, 13, 40007, n};
  for (int64_t step = 1; step <= 3; ++step) {
    s.step = step;
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      const int64_t lo = cuts[k], len = cuts[k + 1] - cuts[k];
      std::vector<std::pair<int64_t, int64_t>> local;
      for (const auto& r : decayed) {
        const int64_t a = std::max(r.first, lo), b = std::min(r.second, lo + len);
        if (a < b) local.emplace_back(a - lo, b - lo);
      }
      auto pp = pieces.narrow(0, lo, len), mm = m2.narrow(0, lo, len), vv = v2.narrow(0, lo, len);
      adamw_update_cpu(pp, g.narrow(0, lo, len), mm, vv, local, s);
    }
  }
  EXPECT_TRUE(torch::equal(whole, pieces));
  // And it is AdamW: torch::optim's result within float rounding.
  auto ref = p0.clone().requires_grad_(true);
  torch::optim::AdamW opt({ref}, torch::optim::AdamWOptions(0.01).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.0));
  auto nodecay = p0.clone(), m3 = torch::zeros({n}), v3 = torch::zeros({n});
  AdamWStep s0{0.01, 0.9, 0.95, 1e-8, 0.0, 1};
  for (int64_t step = 1; step <= 3; ++step) {
    ref.mutable_grad() = g.clone();
    opt.step();
    s0.step = step;
    adamw_update_cpu(nodecay, g, m3, v3, {}, s0);
  }
  EXPECT_TRUE(torch::allclose(nodecay, ref.detach(), 1e-5, 1e-6));
}

TEST(ChunkLayout, ChunksGoRoundRobinAndCoverTheBatch) {
  ParallelLayout l;
  l.dp = 4;
  l.split_chunks(20, 2);
  EXPECT_EQ(l.chunks(), 10);
  EXPECT_EQ(l.grad_accum, 3);
  EXPECT_EQ(l.micro_batch, 2);
  EXPECT_EQ(l.replica_chunks(0), 3);
  EXPECT_EQ(l.replica_chunks(1), 3);
  EXPECT_EQ(l.replica_chunks(2), 2);
  EXPECT_EQ(l.replica_chunks(3), 2);
  EXPECT_EQ(l.shares(), "6, 6, 4, 4");
  EXPECT_FALSE(l.even());
  std::vector<int> seen(20, 0);
  for (int64_t r = 0; r < 4; ++r) {
    for (int64_t i = 0; i < l.micro_batches(r); ++i) {
      EXPECT_EQ(l.micro_batch_size(r, i), 2);
      const int64_t off = l.micro_batch_offset(r, i);
      EXPECT_EQ(off, (i * 4 + r) * 2);
      for (int64_t k = 0; k < 2; ++k) ++seen[static_cast<size_t>(off + k)];
    }
    EXPECT_EQ(l.micro_batch_size(r, l.micro_batches(r)), 0);  // past its last chunk
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), 20);
  l.validate(4, 20);
  ParallelLayout bad = l;
  bad.tp = 2;
  bad.dp = 2;
  bad.split_chunks(20, 2);
  EXPECT_THROW(bad.validate(4, 20), ConfigError);
}

PlannerInput bitwise_input(int64_t world) {
  PlannerInput in;
  in.model.params = 1000000;
  in.model.flops_per_sample = 1e9;
  in.model.activation_bytes_per_sample = 1e5;
  in.model.blocks = 4;
  in.model.heads = 4;
  in.model.supports_tp = true;
  in.model.supports_pp = true;
  in.train.global_batch = 24;
  in.train.reproducible = Reproducible::bitwise;
  in.world = world;
  in.use_fewer_ranks = false;
  return in;
}

TEST(BitwisePlanner, ChoosesAChunkThatLeavesRoomForEightRanksAndShowsItsCost) {
  const Plan p = plan_job(bitwise_input(2));
  EXPECT_GT(p.chunk, 0);
  EXPECT_EQ(24 % p.chunk, 0);
  EXPECT_GE(24 / p.chunk, 8);
  EXPECT_EQ(p.tp, 1);
  EXPECT_EQ(p.micro_batch, p.chunk);
  for (const auto& r : plan_candidates(bitwise_input(4))) {
    if (r.plan.tp > 1) {
      EXPECT_FALSE(r.feasible);
      EXPECT_NE(r.why.find("runs tp = 1 only"), std::string::npos) << r.why;
    } else if (r.feasible) {
      EXPECT_GT(r.time.reproducible, 0) << r.plan.summary();
      EXPECT_GT(r.time.off_total, 0);
      EXPECT_GT(r.time.total(), r.time.off_total * 0.99) << r.plan.summary();
    }
  }
}

TEST(BitwisePlanner, AChunkThatDoesNotDivideTheBatchIsNamed) {
  PlannerInput in = bitwise_input(2);
  in.train.reproducible_chunk = 5;
  try {
    plan_job(in);
    FAIL() << "a chunk of 5 in a batch of 24 was planned";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("train.reproducible_chunk = 5 does not divide the global batch 24"),
              std::string::npos)
        << e.what();
  }
  in.parallel.mode = ParallelMode::given;
  in.parallel.tp = 2;
  in.train.reproducible_chunk = 2;
  try {
    plan_job(in);
    FAIL() << "tp = 2 was planned in bitwise mode";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("runs tp = 1 only"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace gtrain
