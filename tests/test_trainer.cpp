// test_trainer.cpp: the trainer learns; accumulation equals one big batch; same seed, same run;
// LR schedule; loss scaling; precision; the step profiler.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>

#include "runtime/core/errors.h"
#include "runtime/core/lr_schedule.h"
#include "runtime/metrics/step_profiler.h"
#include "tests/support/test_util.h"
#include "tests/support/trainer_util.h"

namespace gtrain {
namespace {

TEST(Trainer, LearnsASyntheticTask) {
  auto t = make_trainer(synthetic_mlp(150, 64));
  auto before = t->evaluate();
  auto summary = t->run();
  EXPECT_EQ(summary.steps, 150);
  EXPECT_LT(summary.eval.loss, 0.5 * before.loss) << "eval loss " << before.loss << " -> " << summary.eval.loss;
  EXPECT_GT(summary.eval.accuracy, 0.85);
  EXPECT_LT(before.accuracy, 0.5);
}

TEST(Trainer, GptLearnsSyntheticSequences) {
  JobConfig c;
  c.model.name = "gpt";
  c.model.n_layer = 2;
  c.model.n_head = 2;
  c.model.n_embd = 32;
  c.model.seq_len = 16;
  c.model.vocab = 16;
  c.data.kind = DataKind::synthetic;
  c.train.global_batch = 16;
  c.train.steps = 120;
  c.train.warmup_steps = 10;
  c.optimizer.learning_rate = 3e-3;
  c.log.progress = "none";
  auto t = make_trainer(c);
  auto first = t->train_step();
  EXPECT_NEAR(first.loss, std::log(16.0), 0.4);
  auto s = t->run();
  EXPECT_LT(s.final_loss, 0.5 * first.loss);
}

// One step of global batch B as 1 x B and as 4 x B/4 gives the same parameters.
TEST(Trainer, GradientAccumulationEqualsOneBigBatch) {
  auto c = synthetic_mlp(3, 32);
  c.train.grad_clip = 0.5;  // clipping sees the same global norm either way
  auto whole = make_trainer(c, 32);
  auto split = make_trainer(c, 8);
  ASSERT_EQ(whole->layout().grad_accum, 1);
  ASSERT_EQ(split->layout().grad_accum, 4);
  for (int s = 0; s < 3; ++s) {
    auto a = whole->train_step(), b = split->train_step();
    EXPECT_NEAR(a.loss, b.loss, 1e-6 * std::abs(a.loss));
    EXPECT_NEAR(a.grad_norm, b.grad_norm, 1e-6 * a.grad_norm);
  }
  auto pa = params_of(*whole), pb = params_of(*split);
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    EXPECT_LE((pa[i] - pb[i]).abs().max().item<double>(), 1e-6) << "parameter " << i;
  }
}

TEST(Trainer, SameSeedGivesBitwiseIdenticalLosses) {
  auto c = synthetic_mlp(12, 16);
  c.model.dropout = 0.2;  // dropout draws random numbers too
  auto a = make_trainer(c), b = make_trainer(c);
  c.train.seed = 4;
  auto other = make_trainer(c);
  bool any_diff = false;
  for (int s = 0; s < 12; ++s) {
    double la = a->train_step().loss, lb = b->train_step().loss, lo = other->train_step().loss;
    EXPECT_EQ(la, lb) << "step " << s;
    any_diff |= la != lo;
  }
  EXPECT_TRUE(any_diff) << "a different seed should change the run";
}

TEST(Trainer, SgdWithMomentumLearns) {
  auto c = synthetic_mlp(100, 64);
  c.optimizer.name = "sgd";
  c.optimizer.learning_rate = 0.1;
  auto s = make_trainer(c)->run();
  EXPECT_GT(s.eval.accuracy, 0.8);
}

TEST(Trainer, Bf16AutocastTracksFp32) {
  auto c = synthetic_mlp(30, 32);
  auto fp32 = make_trainer(c)->run();
  c.precision.dtype = "bf16";
  auto bf16 = make_trainer(c)->run();
  EXPECT_TRUE(std::isfinite(bf16.final_loss));
  EXPECT_NEAR(bf16.final_loss, fp32.final_loss, 0.1 * fp32.final_loss + 0.02);
}

TEST(Trainer, Fp16OnCpuIsAClearError) {
  auto c = synthetic_mlp(1, 8);
  c.precision.dtype = "fp16";
  try {
    make_trainer(c);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("precision.dtype = \"fp16\" needs a CUDA device"), std::string::npos);
  }
}

TEST(Trainer, EpochsAndTokensSetTheStepCount) {
  TrainConfig t;
  t.global_batch = 100;
  t.epochs = 2.5;
  EXPECT_EQ(compute_total_steps(t, 1000, 0), 25);
  t.epochs = 0;
  t.tokens = 10001;
  EXPECT_EQ(compute_total_steps(t, 1000, 10), 11);
  // A length past int64 is refused by name (it used to wrap to one step, and the run "finished").
  t.tokens = 0;
  t.epochs = 1e18;
  try {
    compute_total_steps(t, 1000, 0);
    FAIL() << "accepted train.epochs = 1e18";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "train.epochs = 1e+18 makes 1e+19 optimizer steps (more than 2^62)");
    EXPECT_EQ(e.hint(), "give a realistic length");
  }
  t.epochs = 1e14;
  EXPECT_EQ(compute_total_steps(t, 1000, 0), 1000000000000000ll);
}

TEST(LrSchedule, WarmupThenCosineToFloor) {
  TrainConfig t;
  t.warmup_steps = 10;
  t.min_lr_ratio = 0.1;
  EXPECT_NEAR(lr_at(t, 1.0, 0, 110), 0.1, 1e-12);
  EXPECT_NEAR(lr_at(t, 1.0, 9, 110), 1.0, 1e-12);
  EXPECT_NEAR(lr_at(t, 1.0, 10, 110), 1.0, 1e-12);
  EXPECT_NEAR(lr_at(t, 1.0, 109, 110), 0.1, 1e-12);
  EXPECT_NEAR(lr_at(t, 1.0, 10 + 99 / 2.0, 110), 0.55, 0.02);
  t.lr_schedule = LrSchedule::linear;
  EXPECT_NEAR(lr_at(t, 1.0, 109, 110), 0.1, 1e-12);
  t.lr_schedule = LrSchedule::constant;
  EXPECT_NEAR(lr_at(t, 1.0, 100, 110), 1.0, 1e-12);
}

TEST(LossScaler, OverflowHalvesAndCleanWindowDoubles) {
  DynamicLossScaler s(1024, 3);
  s.update(false);
  s.update(true);
  EXPECT_EQ(s.scale(), 512);
  s.update(false);
  s.update(false);
  EXPECT_EQ(s.scale(), 512);
  s.update(false);
  EXPECT_EQ(s.scale(), 1024);
}

// A profiler that cannot start costs the profile, never the run: here a second one while the first
// records (one per thread) reports why once, then stays quiet, and the first one's profile is whole.
TEST(StepProfiler, FailureToStartIsReportedAndTrainingGoesOn) {
  test::TempDir dir;
  StepProfiler first(1, 2, dir.file("a"), 0, /*cuda=*/false), second(1, 1, dir.file("b"), 0, /*cuda=*/false);
  first.before_step(1);
  ASSERT_TRUE(first.active());
  second.before_step(1);
  EXPECT_FALSE(second.active());
  const std::string why = second.after_step(1);
  EXPECT_EQ(why.rfind("profile: the profiler did not start (", 0), 0u) << why;
  EXPECT_NE(why.find("training goes on"), std::string::npos) << why;
  EXPECT_EQ(why.find('\n'), std::string::npos) << why;
  EXPECT_EQ(second.after_step(2), "");
  auto x = torch::randn({64, 64}, torch::requires_grad());
  torch::mm(x, x).sum().backward();
  EXPECT_EQ(first.after_step(1), "");  // steps 1-2: not done yet
  EXPECT_EQ(first.after_step(2), "profile of the steps written: " + dir.file("a") + "/profile-rank0.txt");
  EXPECT_FALSE(first.active());
  EXPECT_NE(test::read_file(dir.file("a") + "/profile-rank0.txt").find("aten::mm"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(dir.file("b")));
  // Off (start 0, or no run directory): nothing happens.
  StepProfiler off(0, 3, dir.file("c"), 0, false), nowhere(1, 1, "", 0, false);
  off.before_step(1);
  nowhere.before_step(1);
  EXPECT_FALSE(off.active() || nowhere.active());
  EXPECT_EQ(nowhere.after_step(1), "");
}

}  // namespace
}  // namespace gtrain
