// test_planner_fit.cpp: the planner keeps the global batch, shrinks the micro-batch to fit memory,
// and names impossible requests.
#include <gtest/gtest.h>

#include "runtime/core/errors.h"
#include "strategies/planner/planner.h"

namespace gtrain {
namespace {

PlannerInput planner_input(int64_t world, int64_t batch, double mem) {
  PlannerInput in;
  in.model.params = 1000000;
  in.model.activation_bytes_per_sample = 10e6;
  in.model.recompute_bytes_per_sample = 2e6;
  in.train.global_batch = batch;
  in.world = world;
  in.memory_bytes = mem;
  // A model of no FLOPs is fastest on one rank; these tests are about fitting `world` ranks.
  in.use_fewer_ranks = false;
  return in;
}

TEST(Planner, KeepsGlobalBatchAndShrinksMicroBatchToFit) {
  auto plan = plan_job(planner_input(1, 64, 0));
  EXPECT_EQ(plan.micro_batch, 64);
  EXPECT_EQ(plan.grad_accum, 1);
  // 16 MB of weights/grads/Adam + 64 MB workspace + 10 MB per sample: 200 MB fits 12 samples -> 8.
  auto tight = plan_job(planner_input(1, 64, 200e6));
  EXPECT_EQ(tight.micro_batch, 8);
  EXPECT_EQ(tight.grad_accum, 8);
  EXPECT_EQ(tight.global_batch(), 64);
  EXPECT_LE(tight.est_memory_bytes, 200e6);
  auto two = plan_job(planner_input(2, 64, 0));
  EXPECT_EQ(two.dp, 2);
  EXPECT_EQ(two.micro_batch * two.grad_accum, 32);
}

TEST(Planner, ImpossibleRequestsAreClearErrors) {
  // Three ranks split 64 samples 22, 21, 21: no longer an error.
  const Plan three = plan_job(planner_input(3, 64, 0));
  EXPECT_EQ(three.dp, 3);
  EXPECT_EQ(three.global_batch(), 64);
  EXPECT_EQ(three.shares(), "22, 21, 21");
  // More ranks than samples, every one of them to be used: one line that says so.
  auto tiny = planner_input(3, 2, 0);
  tiny.use_fewer_ranks = false;
  try {
    plan_job(tiny);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("train.global_batch = 2 is smaller than the 3 data-parallel ranks"),
              std::string::npos)
        << e.what();
  }
  try {
    plan_job(planner_input(1, 64, 50e6));
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("no layout fits"), std::string::npos) << e.what();
  }
  // parallel.micro_batch bounds the micro-batch: 64 samples at most 10 at a time are 7 micro-batches
  // of 10 and 9 (it need not divide the share).
  auto in = planner_input(1, 64, 0);
  in.parallel.micro_batch = 10;
  const Plan bounded = plan_job(in);
  EXPECT_EQ(bounded.micro_batch, 10);
  EXPECT_EQ(bounded.grad_accum, 7);
  EXPECT_EQ(bounded.micro_batch_size(0, 0), 10);
  EXPECT_EQ(bounded.micro_batch_size(0, 6), 9);
  // A micro-batch so small that the smaller replicas would run an empty one is refused, by name.
  auto starved = planner_input(3, 4, 0);  // shares 2, 1, 1
  starved.use_fewer_ranks = false;
  starved.parallel.micro_batch = 1;
  try {
    plan_job(starved);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("parallel.micro_batch = 1 makes 2 micro-batches per step, more than the 1 "
                                         "samples of the smallest replica"),
              std::string::npos)
        << e.what();
  }
  Plan p;
  p.dp = 2;
  p.tp = 2;
  p.micro_batch = 4;
  p.grad_accum = 2;
  try {
    p.validate(8, 16);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("dp=2 tp=2 pp=1 (dp*tp*pp=4), world=8; micro_batch=4 grad_accum=2"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace gtrain
