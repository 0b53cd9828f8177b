// test_trainer.cpp: the trainer learns; accumulation equals one big batch; same seed, same run;
// LR schedule; loss scaling; precision; planner; checkpoints.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>

#include "launcher/run_command.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/common/errors.h"
#include "runtime/train/lr_schedule.h"
#include "strategies/planner.h"
#include "tests/test_util.h"

namespace gtrain {
namespace {

JobConfig synthetic_mlp(int64_t steps, int64_t batch) {
  JobConfig c;
  c.model.name = "mlp";
  c.model.hidden = {32};
  c.data.kind = "synthetic";
  c.data.synthetic_samples = 4096;
  c.data.synthetic_features = 16;
  c.data.synthetic_classes = 4;
  c.train.global_batch = batch;
  c.train.steps = steps;
  c.train.seed = 3;
  c.log.progress = "none";
  c.optimizer.learning_rate = 3e-3;
  return c;
}

std::unique_ptr<Trainer> make_trainer(const JobConfig& c, int64_t micro_batch = 0, TrainerPaths paths = {}) {
  JobConfig cfg = c;
  cfg.parallel.micro_batch = micro_batch;
  validate_job_config(cfg);
  auto parts = assemble_job(cfg, 1);
  return std::make_unique<Trainer>(cfg, parts.plan, std::make_shared<LocalCommunicator>(), parts.model, parts.data,
                                   paths);
}

std::vector<torch::Tensor> params_of(Trainer& t) {
  std::vector<torch::Tensor> out;
  for (auto& p : t.model().parameters()) out.push_back(p.detach().clone());
  return out;
}

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
  c.data.kind = "synthetic";
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
  ASSERT_EQ(whole->layout().accum, 1);
  ASSERT_EQ(split->layout().accum, 4);
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
  t.lr_schedule = "linear";
  EXPECT_NEAR(lr_at(t, 1.0, 109, 110), 0.1, 1e-12);
  t.lr_schedule = "constant";
  EXPECT_NEAR(lr_at(t, 1.0, 100, 110), 1.0, 1e-12);
}

TEST(LossScaler, SkipsOverflowHalvesAndGrows) {
  DynamicLossScaler s(1024, 3);
  auto p = torch::ones({4}, torch::requires_grad());
  p.mutable_grad() = torch::full({4}, 2048.0);
  EXPECT_TRUE(s.unscale({p}));
  EXPECT_TRUE(torch::allclose(p.grad(), torch::full({4}, 2.0)));
  s.update(false);
  p.mutable_grad() = torch::tensor({1.0f, INFINITY, 0.f, 0.f});
  EXPECT_FALSE(s.unscale({p}));
  s.update(true);
  EXPECT_EQ(s.scale(), 512);
  for (int i = 0; i < 3; ++i) s.update(false);
  EXPECT_EQ(s.scale(), 1024);
}

PlannerInput planner_input(int64_t world, int64_t batch, double mem) {
  PlannerInput in;
  in.model.params = 1000000;
  in.model.activation_bytes_per_sample = 10e6;
  in.model.recompute_bytes_per_sample = 2e6;
  in.train.global_batch = batch;
  in.world = world;
  in.memory_bytes = mem;
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
  try {
    plan_job(planner_input(3, 64, 0));
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("nearest valid global batches: 63 or 66"), std::string::npos) << e.what();
  }
  try {
    plan_job(planner_input(1, 64, 50e6));
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("no layout fits"), std::string::npos) << e.what();
  }
  auto in = planner_input(1, 64, 0);
  in.parallel.micro_batch = 10;
  EXPECT_THROW(plan_job(in), ConfigError);
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

TEST(Checkpoint, PeriodicSavesKeepNewestAndReload) {
  test::TempDir dir;
  auto c = synthetic_mlp(10, 16);
  c.checkpoint.interval = 3;
  c.checkpoint.keep = 2;
  TrainerPaths paths;
  paths.checkpoints = dir.file("ckpt");
  paths.metrics = dir.file("metrics.jsonl");
  auto t = make_trainer(c, 0, paths);
  t->run();
  auto all = list_checkpoints(paths.checkpoints);
  ASSERT_EQ(all.size(), 2u);  // saved at 3, 6, 9 and the end (10); the newest two remain
  EXPECT_EQ(all[0].step, 9);
  EXPECT_EQ(all[1].step, 10);
  EXPECT_EQ(all[1].consumed_samples, 160);
  auto fresh = make_trainer(c);
  auto info = load_checkpoint(all[1].path, fresh->model(), fresh->optimizer());
  EXPECT_EQ(info.step, 10);
  auto a = params_of(*t), b = params_of(*fresh);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i]));
  // A half-written checkpoint (no meta.json) is not listed.
  std::filesystem::create_directories(paths.checkpoints + "/step_00000011");
  EXPECT_EQ(list_checkpoints(paths.checkpoints).size(), 2u);
}

}  // namespace
}  // namespace gtrain
