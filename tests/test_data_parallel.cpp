// test_data_parallel.cpp: the data-parallel engine: overflow detection, ZeRO stages and buckets,
// the flat optimizers against torch::optim, gradients of partly used parameters, hooks.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "runtime/common/torch_compat.h"
#include "strategies/data_parallel.h"
#include "tests/support/adamw_reference.h"
#include "tests/support/test_util.h"
#include "tests/support/trainer_util.h"

namespace gtrain {
namespace {

// The engine unscales gradients, and refuses (leaving them) when any is inf/nan.
TEST(DataParallel, UnscaleDetectsOverflow) {
  auto w = torch::ones({3}, torch::requires_grad());
  DataParallelOptions o;
  DataParallelEngine e(std::make_shared<LocalCommunicator>(), {{"w", w}}, o);
  e.zero_grad();
  e.begin_micro_batch(true);
  (w * torch::tensor({2.0f, 4.0f, 6.0f})).sum().mul(8.0).backward();
  e.end_backward();
  EXPECT_NEAR(e.grad_norm(), 8.0 * std::sqrt(4.0 + 16.0 + 36.0), 1e-4);
  ASSERT_TRUE(e.unscale_gradients(1.0 / 8.0));
  EXPECT_NEAR(e.grad_norm(), std::sqrt(56.0), 1e-5);
  e.zero_grad();
  e.begin_micro_batch(true);
  (w * torch::tensor({1.0f, INFINITY, 1.0f})).sum().backward();
  e.end_backward();
  EXPECT_FALSE(e.unscale_gradients(0.5));
}

// ZeRO stages and bucket sizes change how gradients travel, not the result.
TEST(DataParallel, ZeroStagesAndBucketsMatchOnOneRank) {
  auto c = synthetic_mlp(5, 32);
  auto base = make_trainer(c);
  std::vector<double> losses;
  for (int s = 0; s < 5; ++s) losses.push_back(base->train_step().loss);
  for (int zero : {1, 2}) {
    auto z = c;
    z.parallel.mode = ParallelMode::given;
    z.parallel.zero = zero;
    z.parallel.bucket_mb = 0.001;  // ~250 floats: many buckets
    auto t = make_trainer(z);
    for (int s = 0; s < 5; ++s) EXPECT_NEAR(t->train_step().loss, losses[s], 1e-6 * losses[s]) << "zero " << zero;
    auto pa = params_of(*base), pb = params_of(*t);
    for (size_t i = 0; i < pa.size(); ++i) EXPECT_LE((pa[i] - pb[i]).abs().max().item<double>(), 1e-6);
  }
}

// Our flat AdamW/SGD follow torch::optim's arithmetic.
TEST(DataParallel, FlatOptimizersMatchTorchOptim) {
  for (std::string name : {"adamw", "sgd"}) {
    torch::manual_seed(0);
    auto w0 = torch::randn({4, 3}), b0 = torch::randn({3});
    auto w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
    auto tw = w0.clone().requires_grad_(), tb = b0.clone().requires_grad_();
    DataParallelOptions o;
    o.optimizer.name = name;
    o.optimizer.weight_decay = 0.1;
    o.optimizer.learning_rate = 0.05;
    DataParallelEngine e(std::make_shared<LocalCommunicator>(), {{"w", w}, {"b", b}}, o);
    std::unique_ptr<torch::optim::Optimizer> ref;
    if (name == "adamw") {
      std::vector<torch::optim::OptimizerParamGroup> groups;
      groups.emplace_back(std::vector<torch::Tensor>{tw}, std::make_unique<torch::optim::AdamWOptions>(
                                                              torch::optim::AdamWOptions(0.05).weight_decay(0.1)));
      groups.emplace_back(std::vector<torch::Tensor>{tb}, std::make_unique<torch::optim::AdamWOptions>(
                                                              torch::optim::AdamWOptions(0.05).weight_decay(0.0)));
      ref = std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(0.05));
    } else {
      std::vector<torch::optim::OptimizerParamGroup> groups;
      groups.emplace_back(
          std::vector<torch::Tensor>{tw},
          std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(0.1)));
      groups.emplace_back(std::vector<torch::Tensor>{tb},
                          std::make_unique<torch::optim::SGDOptions>(torch::optim::SGDOptions(0.05).momentum(0.9)));
      ref = std::make_unique<torch::optim::SGD>(groups, torch::optim::SGDOptions(0.05));
    }
    auto x = torch::randn({5, 4});
    for (int s = 0; s < 4; ++s) {
      e.zero_grad();
      e.begin_micro_batch(true);
      (torch::matmul(x, w) + b).pow(2).sum().backward();
      e.end_backward();
      e.step(0.05, 1.0);
      ref->zero_grad();
      (torch::matmul(x, tw) + tb).pow(2).sum().backward();
      ref->step();
    }
    EXPECT_TRUE(torch::allclose(w, tw, 1e-5, 1e-6)) << name;
    EXPECT_TRUE(torch::allclose(b, tb, 1e-5, 1e-6)) << name;
  }
}

// The step CUDA runs take (device-side norm and clipping divisor; the fused AdamW kernel where
// LibTorch has it), run on CPU: it follows torch::optim::AdamW with clip_grad_norm_, over several
// buckets whose owned ranges alternate between decayed matrices and undecayed biases. With
// LibTorch >= 2.4 the fused kernel itself runs here (its CPU version); with 1.13 the flat update.
TEST(DataParallel, DeviceStepMatchesTorchOptimWithClipping) {
  for (int zero : {0, 2}) {
    for (bool fused : {true, false}) {
      torch::manual_seed(0);
      test::SmallMlp m(0.05, 0.1);
      DataParallelEngine e(std::make_shared<LocalCommunicator>(), m.named, test::device_step_options(zero, fused));
      EXPECT_EQ(e.num_buckets(), 3);
      EXPECT_EQ(e.fused_adamw(), fused && compat::kHaveFusedAdamWCpu);
      int clipped = 0;
      for (int s = 0; s < 6; ++s) {
        auto x = torch::randn({8, 6});
        const double clip = s % 2 ? 0.5 : 1e6;  // clip every other step
        e.zero_grad();
        e.begin_micro_batch(true);
        test::SmallMlp::loss(m.params, x).backward();
        e.end_backward();
        const double norm = e.clip_and_step(0.05, clip).item<double>();
        const double ref_norm = m.ref_step(x, clip);
        EXPECT_NEAR(norm, ref_norm, 1e-5 * ref_norm) << "zero " << zero << " fused " << fused << " step " << s;
        clipped += ref_norm > clip;
      }
      EXPECT_EQ(clipped, 3);
      m.expect_matches_reference("zero " + std::to_string(zero) + " fused " + std::to_string(fused));
    }
  }
  // Without device_step a CPU engine keeps the host-side step.
  auto w = torch::ones({2, 2}, torch::requires_grad());
  DataParallelOptions o;
  DataParallelEngine plain(std::make_shared<LocalCommunicator>(), {{"w", w}}, o);
  EXPECT_FALSE(plain.fused_adamw());
}

// Gradients reach the buckets whichever micro-batches use a parameter: all, only earlier ones (the
// accumulator), only the last, or none (zero, not the previous step's). Plain SGD with lr 1: each
// step subtracts exactly the summed gradient.
TEST(DataParallel, GradientsOfParametersUsedInSomeMicroBatchesOnly) {
  auto w = torch::zeros({2, 2}, torch::requires_grad()), u = torch::zeros({3}, torch::requires_grad());
  DataParallelOptions o;
  o.optimizer.name = "sgd";
  o.optimizer.momentum = 0.0;
  o.optimizer.weight_decay = 0.0;
  o.bucket_bytes = 16;  // w and u in separate buckets
  DataParallelEngine e(std::make_shared<LocalCommunicator>(), {{"w", w}, {"u", u}}, o);
  torch::manual_seed(3);
  auto ew = torch::zeros({2, 2}), eu = torch::zeros({3});  // expected values
  // Per step, per micro-batch: whether w and u take part.
  const std::vector<std::vector<std::pair<bool, bool>>> steps = {
      {{true, true}, {true, false}},   // u only before the last micro-batch
      {{true, false}},                 // u unused: its gradient is zero this step
      {{true, false}, {false, true}},  // u only in the last one, w only before it
      {{true, false}, {true, false}},  // u unused over two micro-batches
      {{true, true}}};
  for (size_t s = 0; s < steps.size(); ++s) {
    e.zero_grad();
    for (size_t k = 0; k < steps[s].size(); ++k) {
      auto x = torch::randn({2, 2}), y = torch::randn({3});
      auto loss = torch::zeros({});
      if (steps[s][k].first) loss = loss + (w * x).sum(), ew -= x;
      if (steps[s][k].second) loss = loss + (u * y).sum(), eu -= y;
      e.begin_micro_batch(k + 1 == steps[s].size());
      loss.backward();
    }
    e.end_backward();
    e.step(1.0, 1.0);
    EXPECT_TRUE(torch::allclose(w.detach(), ew, 1e-6, 1e-6)) << "step " << s << "\n" << w << "\n" << ew;
    EXPECT_TRUE(torch::allclose(u.detach(), eu, 1e-6, 1e-6)) << "step " << s << "\n" << u << "\n" << eu;
    EXPECT_FALSE(w.grad().defined());  // gradients live in the buckets only
  }
}

// The engine's hooks sit on the parameters' AccumulateGrad nodes and go with the engine: a later
// engine over the same parameters (a resharded stage) is the only one they call.
TEST(DataParallel, HooksGoWithTheEngine) {
  auto w = torch::ones({4}, torch::requires_grad());
  auto node = torch::autograd::impl::grad_accumulator(w);
  DataParallelOptions o;
  o.optimizer.name = "sgd";
  {
    DataParallelEngine a(std::make_shared<LocalCommunicator>(), {{"w", w}}, o);
    EXPECT_EQ(node->post_hooks().size(), 1u);
  }
  EXPECT_EQ(node->post_hooks().size(), 0u);
  DataParallelEngine b(std::make_shared<LocalCommunicator>(), {{"w", w}}, o);
  EXPECT_EQ(node->post_hooks().size(), 1u);
  b.zero_grad();
  b.begin_micro_batch(true);
  (w * 2.0).sum().backward();
  b.end_backward();
  b.step(0.5, 1.0);
  EXPECT_TRUE(torch::allclose(w.detach(), torch::zeros({4})));  // 1 - 0.5 * 2
}

}  // namespace
}  // namespace gtrain
