// test_trainer.cpp: the trainer learns; accumulation equals one big batch; same seed, same run;
// LR schedule; loss scaling; precision; planner; checkpoints.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <thread>

#include "launcher/run_command.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/common/errors.h"
#include "runtime/common/torch_compat.h"
#include "runtime/metrics/step_profiler.h"
#include "runtime/train/lr_schedule.h"
#include "runtime/train/schedule.h"
#include "strategies/data_parallel.h"
#include "strategies/planner.h"
#include "tests/adamw_reference.h"
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
  auto comm = std::make_shared<LocalCommunicator>();
  auto parts = assemble_job(cfg, 1, comm);
  return std::make_unique<Trainer>(cfg, parts.plan, comm, parts.model, parts.data, std::move(parts.engine), paths);
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
  // A length past int64 is refused by name (it used to wrap to one step, and the run "finished").
  t.tokens = 0;
  t.epochs = 1e18;
  try {
    compute_total_steps(t, 1000, 0);
    FAIL() << "accepted train.epochs = 1e18";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "train.epochs = 1e+18 makes 1e+19 optimizer steps (more than 2^62); give a realistic length");
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
  t.lr_schedule = "linear";
  EXPECT_NEAR(lr_at(t, 1.0, 109, 110), 0.1, 1e-12);
  t.lr_schedule = "constant";
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
    z.parallel.mode = "explicit";
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
  CheckpointReader ck(all[1].path);
  EXPECT_TRUE(ck.verify().empty());
  EXPECT_EQ(ck.read("optimizer.step").item<int64_t>(), 10);
  // A fresh trainer resumed from it holds the same parameters and optimizer state.
  auto fresh = make_trainer(c);
  fresh->resume(all[1].path);
  EXPECT_EQ(fresh->steps_done(), 10);
  auto a = params_of(*t), b = params_of(*fresh);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i]));
  auto sa = t->engine().state_shards(), sb = fresh->engine().state_shards();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) EXPECT_TRUE(torch::equal(sa[i].data, sb[i].data)) << sa[i].name;
  // A half-written checkpoint (no manifest) is not listed.
  std::filesystem::create_directories(paths.checkpoints + "/step_00000011");
  EXPECT_EQ(list_checkpoints(paths.checkpoints).size(), 2u);
}

// Resuming mid-run on the same layout continues bitwise identically.
TEST(Checkpoint, ResumeIsBitwiseIdentical) {
  test::TempDir dir;
  auto c = synthetic_mlp(12, 16);
  c.model.dropout = 0.1;
  std::vector<double> ref;
  {
    auto t = make_trainer(c);
    for (int s = 0; s < 12; ++s) ref.push_back(t->train_step().loss);
  }
  TrainerPaths paths;
  paths.checkpoints = dir.file("ckpt");
  auto first = make_trainer(c, 0, paths);
  for (int s = 0; s < 5; ++s) EXPECT_EQ(first->train_step().loss, ref[s]);
  first->save_checkpoint_now();
  first->finish_saves();
  auto second = make_trainer(c, 0, paths);
  second->resume(find_latest_valid_checkpoint(paths.checkpoints, nullptr));
  for (int s = 5; s < 12; ++s) EXPECT_EQ(second->train_step().loss, ref[s]) << "step " << s;
}

// Runs `c` to its end, saving into dir/<name>; returns the final checkpoint's path.
std::string finished_run_checkpoint(const test::TempDir& dir, const JobConfig& c, const std::string& name) {
  TrainerPaths paths;
  paths.checkpoints = dir.file(name);
  make_trainer(c, 0, paths)->run();
  return find_latest_valid_checkpoint(paths.checkpoints, nullptr);
}

TEST(Checkpoint, ChangedModelOrBatchIsRefused) {
  test::TempDir dir;
  auto c = synthetic_mlp(2, 16);
  const std::string path = finished_run_checkpoint(dir, c, "ckpt");
  auto wider = c;
  wider.model.hidden = {48};
  try {
    make_trainer(wider)->resume(path);
    FAIL();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("different model (model.hidden [32] -> [48])"), std::string::npos) << e.what();
  }
  auto bigger = c;
  bigger.train.global_batch = 32;
  EXPECT_THROW(make_trainer(bigger)->resume(path), ResumeMismatchError);
}

// Only the keys that shape the model's parameters must stay: keys the model does not read may
// change, model.vocab = 0 is the data's vocabulary, and a changed dropout resumes (it changes the
// trajectory, not the tensors).
TEST(Checkpoint, ResumeComparesTheKeysThatShapeTheModel) {
  test::TempDir dir;
  auto c = synthetic_mlp(2, 16);
  const std::string mlp_ckpt = finished_run_checkpoint(dir, c, "ckpt");
  auto unused = c;
  unused.model.channels = {8};
  unused.model.n_layer = 9;
  unused.model.init_std = 0.5;
  unused.model.dropout = 0.2;
  auto t = make_trainer(unused);
  EXPECT_NO_THROW(t->resume(mlp_ckpt));
  EXPECT_EQ(t->steps_done(), 2);

  // A byte-level gpt saved with model.vocab = 0 (256 from the data) resumes with vocab = 256.
  std::string text;
  for (int i = 0; i < 400; ++i) text += "the quick brown fox " + std::to_string(i) + "\n";
  test::write_file(dir.file("t.txt"), text);
  JobConfig g;
  g.model.name = "gpt";
  g.model.n_layer = 1;
  g.model.n_head = 2;
  g.model.n_embd = 16;
  g.model.seq_len = 8;
  g.data.kind = "text_bytes";
  g.data.path = dir.file("t.txt");
  g.train.global_batch = 4;
  g.train.steps = 2;
  g.log.progress = "none";
  const std::string gpt_ckpt = finished_run_checkpoint(dir, g, "gpt");
  auto explicit_vocab = g;
  explicit_vocab.model.vocab = 256;
  explicit_vocab.model.hidden = {7};
  EXPECT_NO_THROW(make_trainer(explicit_vocab)->resume(gpt_ckpt));
  auto other_vocab = g;
  other_vocab.model.vocab = 512;
  try {
    make_trainer(other_vocab)->resume(gpt_ckpt);
    FAIL() << "a different vocabulary resumed";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("different model (model.vocab 256 -> 512)"), std::string::npos) << e.what();
  }
}

// A deadline inside the save lead still lets a stage run one step and save (every stage makes
// progress); one already past when the stage starts ends it before its first step, saving nothing.
TEST(Checkpoint, DeadlineBeforeTheFirstStep) {
  test::TempDir dir;
  auto c = synthetic_mlp(50, 16);
  TrainerPaths paths;
  paths.checkpoints = dir.file("ckpt");
  StageOptions close;
  close.ledger = dir.file("stages.jsonl");
  close.deadline_unix = unix_now() + 0.5;  // inside the lead (min_lead_s 5)
  close.deadline_source = "--time-limit";
  auto first = make_trainer(c, 0, paths);
  first->set_stage(close);
  auto s1 = first->run();
  EXPECT_TRUE(s1.stopped_early);
  EXPECT_EQ(s1.stage_steps, 1);
  ASSERT_EQ(list_checkpoints(paths.checkpoints).size(), 1u);

  StageOptions past = close;
  past.deadline_unix = unix_now() - 1.0;
  auto second = make_trainer(c, 0, paths);
  second->resume(find_latest_valid_checkpoint(paths.checkpoints, nullptr));
  second->set_stage(past);
  auto s2 = second->run();
  EXPECT_TRUE(s2.stopped_early);
  EXPECT_EQ(s2.stage_steps, 0);
  EXPECT_EQ(s2.steps, 1);
  EXPECT_EQ(s2.stop_reason, "deadline (--time-limit)");
  const auto all = list_checkpoints(paths.checkpoints);
  ASSERT_EQ(all.size(), 1u);  // nothing new saved
  EXPECT_EQ(all[0].step, 1);
  const auto ledger = test::lines(test::read_file(dir.file("stages.jsonl")));
  ASSERT_EQ(ledger.size(), 2u);
  const auto row = nlohmann::json::parse(ledger[1]);
  EXPECT_EQ(row.at("step_from"), 1);
  EXPECT_EQ(row.at("step_to"), 1);
  EXPECT_EQ(row.at("exit").get<std::string>().rfind("resumable: deadline", 0), 0u) << row.dump();
}

// A 4-step run of the small MLP that saves at steps 2 and 4 into dir/ckpt (paths->checkpoints).
std::vector<CheckpointInfo> two_checkpoints(const test::TempDir& dir, TrainerPaths* paths) {
  auto c = synthetic_mlp(4, 16);
  c.checkpoint.interval = 2;
  paths->checkpoints = dir.file("ckpt");
  make_trainer(c, 0, *paths)->run();
  return list_checkpoints(paths->checkpoints);
}

// A flipped byte is caught by its checksum and the previous checkpoint is used, with a warning
// naming the file.
TEST(Checkpoint, CorruptShardFallsBackToPrevious) {
  test::TempDir dir;
  TrainerPaths paths;
  const auto all = two_checkpoints(dir, &paths);
  ASSERT_EQ(all.size(), 2u);
  const std::string shard = all[1].path + "/shard_0.bin";
  std::string bytes = test::read_file(shard);
  bytes[bytes.size() / 2] ^= 0x20;
  test::write_file(shard, bytes);
  std::vector<std::string> warnings;
  EXPECT_EQ(find_latest_valid_checkpoint(paths.checkpoints, &warnings), all[0].path);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("shard_0.bin: checksum mismatch"), std::string::npos) << warnings[0];
}

// Pieces written with ZeRO chunks and tensor-parallel-like regions assemble into global tensors.
TEST(Checkpoint, ShardsAssembleFromRegionsAndFlatRanges) {
  test::TempDir dir;
  auto global = torch::arange(24, torch::kFloat).reshape({4, 6});
  // Two "tp" ranks own column halves; each half is split in two flat "ZeRO" chunks.
  auto part = [&](int rank) {
    SaveRequest r;
    r.dir = dir.file("ck");
    r.step = 1;
    r.rank = rank;
    r.world = 2;
    r.token = "t";
    if (rank == 0) r.meta = CheckpointMeta{};  // the model key alone
    auto half = global.narrow(1, rank * 3, 3).contiguous().view({-1});
    r.shards.push_back({"w", {4, 6}, {0, rank * 3}, {4, 3}, 0, half.narrow(0, 0, 5), true});
    r.shards.push_back({"w", {4, 6}, {0, rank * 3}, {4, 3}, 5, half.narrow(0, 5, 7), true});
    return r;
  };
  std::thread other([&] { write_checkpoint(part(1)); });
  write_checkpoint(part(0));  // rank 0 commits once rank 1's part is there
  other.join();
  CheckpointReader ck(dir.file("ck/step_00000001"));
  EXPECT_TRUE(torch::equal(ck.read("w"), global));
  EXPECT_TRUE(ck.verify().empty());
}

// A small committed checkpoint (one 2x3 tensor) at `step`, written with `keep`.
void tiny_checkpoint(const std::string& dir, int64_t step, int64_t keep, const std::string& token = "t") {
  SaveRequest r;
  r.dir = dir;
  r.step = step;
  r.consumed_samples = step * 4;
  r.keep = keep;
  r.token = token;
  r.meta = CheckpointMeta{};  // the model key alone
  auto w = torch::arange(6, torch::kFloat).reshape({2, 3}) + static_cast<double>(step);
  r.shards.push_back({"w", {2, 3}, {0, 0}, {2, 3}, 0, w.view({-1}), true});
  write_checkpoint(r);
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Pruning deletes only checkpoints older than the one just committed: newer ones (another
// trajectory's) are not its to delete, and must not push its own out of `keep`.
TEST(Checkpoint, PruningOnlyDeletesOlderCheckpoints) {
  test::TempDir dir;
  const std::string ck = dir.file("ck");
  tiny_checkpoint(ck, 0, 10);
  tiny_checkpoint(ck, 1, 10);
  tiny_checkpoint(ck, 7, 10);
  tiny_checkpoint(ck, 2, 2);  // keeps itself and step 1; step 7 is not older, so untouched
  EXPECT_EQ(entries(ck), (std::vector<std::string>{"step_00000001", "step_00000002", "step_00000007"}));
  EXPECT_EQ(CheckpointReader(ck + "/step_00000002").read("w")[0][0].item<float>(), 2.0f);
  EXPECT_EQ(CheckpointReader(ck + "/step_00000007").step(), 7);
}

// A crash while pruning leaves a half-deleted step directory (no manifest) or a *.tmp-* rename of
// one; the next commit removes both.
TEST(Checkpoint, CommitCleansIncompleteStepDirectories) {
  test::TempDir dir;
  const std::string ck = dir.file("ck");
  tiny_checkpoint(ck, 1, 5);
  std::filesystem::create_directories(ck + "/step_00000009");
  test::write_file(ck + "/step_00000009/shard_1.json", "[]");
  std::filesystem::create_directories(ck + "/step_00000003.tmp-retired-old");
  test::write_file(ck + "/step_00000003.tmp-retired-old/shard_0.bin", "x");
  tiny_checkpoint(ck, 2, 5);
  EXPECT_EQ(entries(ck), (std::vector<std::string>{"step_00000001", "step_00000002"}));
  // Pruned directories leave nothing behind either.
  tiny_checkpoint(ck, 3, 1);
  EXPECT_EQ(entries(ck), (std::vector<std::string>{"step_00000003"}));
}

// Checkpoints newer than the resume step are moved aside, never deleted.
TEST(Checkpoint, SupersedeMovesNewerCheckpointsAside) {
  test::TempDir dir;
  const std::string ck = dir.file("ck");
  for (int s = 1; s <= 4; ++s) tiny_checkpoint(ck, s, 10);
  auto moved = supersede_checkpoints(ck, 2, ck + "/step_00000002");
  EXPECT_EQ(moved.steps, (std::vector<int64_t>{3, 4}));
  ASSERT_EQ(moved.folder.rfind(ck + "/superseded-", 0), 0u) << moved.folder;
  EXPECT_EQ(entries(moved.folder), (std::vector<std::string>{"step_00000003", "step_00000004"}));
  EXPECT_EQ(CheckpointReader(moved.folder + "/step_00000004").step(), 4);
  ASSERT_EQ(list_checkpoints(ck).size(), 2u);
  EXPECT_EQ(list_checkpoints(ck).back().step, 2);
  EXPECT_TRUE(supersede_checkpoints(ck, 2).steps.empty());
  // A later commit keeps the superseded folder (not a leftover to clean).
  tiny_checkpoint(ck, 3, 1);
  EXPECT_TRUE(std::filesystem::exists(moved.folder + "/step_00000004/manifest.json"));
  // Starting over: every checkpoint goes, into a second folder when the first name is taken.
  auto all = supersede_checkpoints(ck, -1);
  EXPECT_EQ(all.steps, (std::vector<int64_t>{3}));
  EXPECT_NE(all.folder, moved.folder);
  EXPECT_TRUE(list_checkpoints(ck).empty());
}

// Manifests that parse but have the wrong shape are refused with the manifest's path and the key,
// and auto-resume falls back to the previous checkpoint (as it does for a checksum mismatch).
TEST(Checkpoint, MalformedManifestIsRefusedAndSkipped) {
  test::TempDir dir;
  TrainerPaths paths;
  const auto all = two_checkpoints(dir, &paths);
  ASSERT_EQ(all.size(), 2u);
  const std::string manifest = all[1].path + "/manifest.json";
  const std::string pristine = test::read_file(manifest);
  const auto good = nlohmann::json::parse(pristine);
  const std::string t0 = good.at("tensors").begin().key();
  const std::string p0 = "tensors." + t0 + ".pieces[0]";
  using J = nlohmann::json;
  struct Case {
    std::string key;
    std::function<void(J&)> change;
  };
  const std::vector<Case> cases = {
      {"must be a JSON object",
       [](J& m) {
         m = J::array({1, 2});
       }},
      {"'step'", [](J& m) { m["step"] = "5"; }},
      {"'step'", [](J& m) { m["step"] = -1; }},
      {"'consumed_samples'", [](J& m) { m.erase("consumed_samples"); }},
      {"'consumed_samples'", [](J& m) { m["consumed_samples"] = 1.5; }},
      {"'model'", [](J& m) { m["model"] = nullptr; }},
      {"'model'", [](J& m) { m["model"] = J::array(); }},
      {"'tensors'", [](J& m) { m["tensors"] = J::object(); }},
      {"'tensors'", [](J& m) { m["tensors"] = J::array({1}); }},
      {"'tensors." + t0 + ".dtype'", [&](J& m) { m["tensors"][t0]["dtype"] = 3; }},
      {"'tensors." + t0 + ".shape'", [&](J& m) { m["tensors"][t0]["shape"] = J::array({-1}); }},
      {"'tensors." + t0 + ".pieces'", [&](J& m) { m["tensors"][t0]["pieces"] = J::object(); }},
      {"'" + p0 + ".file'", [&](J& m) { m["tensors"][t0]["pieces"][0]["file"] = "../../../etc/passwd"; }},
      {"'" + p0 + ".file'", [&](J& m) { m["tensors"][t0]["pieces"][0]["file"] = "/etc/passwd"; }},
      {"'" + p0 + ".file'", [&](J& m) { m["tensors"][t0]["pieces"][0]["file"] = 7; }},
      {"'" + p0 + ".offset'", [&](J& m) { m["tensors"][t0]["pieces"][0]["offset"] = -4; }},
      {"'" + p0 + ".nbytes'", [&](J& m) { m["tensors"][t0]["pieces"][0]["nbytes"] = "8"; }},
      {"'" + p0 + ".crc32c'", [&](J& m) { m["tensors"][t0]["pieces"][0]["crc32c"] = -1; }},
      {"'" + p0 + ".crc32c'", [&](J& m) { m["tensors"][t0]["pieces"][0]["crc32c"] = 1ll << 33; }},
      {"'" + p0 + ".region_offsets'",
       [&](J& m) {
         m["tensors"][t0]["pieces"][0]["region_offsets"] = J::array({0, 0, 0, 0, 0});
       }},
      {"'" + p0 + ".region_shape'", [&](J& m) { m["tensors"][t0]["pieces"][0]["region_shape"] = "x"; }},
      {"'train_samples'", [](J& m) { m["train_samples"] = "2382"; }},
      {"'train_samples'", [](J& m) { m["train_samples"] = -5; }},
      {"'probe_indices'", [](J& m) { m["probe_indices"] = J::array(); }},
      {"'probe_indices'",
       [](J& m) {
         m["probe_indices"] = J::array({1, -2});
       }},
      {"'probe_indices'", [](J& m) { m["probe_indices"] = "abc"; }},
      {"'vocab_from_data'", [](J& m) { m["vocab_from_data"] = 1; }},
      {"'train_data'", [](J& m) { m["train_data"] = "s_*.bin"; }},
      // Consistent in type, not in value: nothing here may be allocated or trusted.
      {"'consumed_samples'", [](J& m) { m["consumed_samples"] = m["consumed_samples"].get<int64_t>() + 1; }},
      {"'tensors." + t0 + ".shape'",
       [&](J& m) {
         m["tensors"][t0]["shape"] = J::array({10000000000ll, 10000000000ll});
       }},
      {"'tensors." + t0 + ".pieces'",  // a shape larger than its pieces (verify used to zero-fill it)
       [&](J& m) {
         auto shape = m["tensors"][t0]["shape"].get<std::vector<int64_t>>();
         shape[0] *= 1000;
         m["tensors"][t0]["shape"] = shape;
       }},
      {"'" + p0 + ".nbytes'",
       [&](J& m) {
         m["tensors"][t0]["pieces"][0]["nbytes"] = m["tensors"][t0]["pieces"][0]["nbytes"].get<int64_t>() + 4;
       }},
  };
  for (const auto& k : cases) {
    J m = good;
    k.change(m);
    test::write_file(manifest, m.dump());
    try {
      CheckpointReader r(all[1].path);
      ADD_FAILURE() << "accepted a manifest with a bad " << k.key;
    } catch (const CheckpointError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(manifest), std::string::npos) << what;
      EXPECT_NE(what.find(k.key), std::string::npos) << what;
      EXPECT_EQ(what.find("json.exception"), std::string::npos) << what;
    }
    std::vector<std::string> warnings;
    EXPECT_EQ(find_latest_valid_checkpoint(paths.checkpoints, &warnings), all[0].path) << k.key;
    ASSERT_EQ(warnings.size(), 1u) << k.key;
    EXPECT_NE(warnings[0].find(k.key), std::string::npos) << warnings[0];
  }
  // Manifests that open but cannot be resumed from: skipped too, and verify does not say OK.
  const std::vector<Case> unusable = {
      {"has no tensor '" + t0 + "', which shard_0.json lists", [&](J& m) { m["tensors"].erase(t0); }},
      {"key 'probe_loss' is missing", [](J& m) { m.erase("probe_loss"); }},
  };
  for (const auto& k : unusable) {
    J m = good;
    k.change(m);
    test::write_file(manifest, m.dump());
    std::vector<std::string> warnings;
    EXPECT_EQ(find_latest_valid_checkpoint(paths.checkpoints, &warnings), all[0].path) << k.key;
    ASSERT_EQ(warnings.size(), 1u) << k.key;
    EXPECT_NE(warnings[0].find(k.key), std::string::npos) << warnings[0];
  }
  {
    J m = good;
    m["tensors"].erase(t0);
    test::write_file(manifest, m.dump());
    auto v = test::run_command(GTRAIN_BINARY " ckpt verify " + all[1].path);
    EXPECT_NE(v.exit_code, 0) << v.output;
    EXPECT_NE(v.output.find("has no tensor '" + t0 + "'"), std::string::npos) << v.output;
  }
  // The tools: inspect prints one clear line (no half report); verify of 0 tensors is not OK.
  J m = good;
  m["tensors"][t0]["pieces"][0]["nbytes"] = "8";
  test::write_file(manifest, m.dump());
  auto inspect = test::run_command(GTRAIN_BINARY " ckpt inspect " + all[1].path);
  EXPECT_NE(inspect.exit_code, 0) << inspect.output;
  EXPECT_EQ(test::lines(inspect.output).size(), 1u) << inspect.output;
  EXPECT_NE(inspect.output.find(manifest + ": key '" + p0 + ".nbytes'"), std::string::npos) << inspect.output;
  m = good;
  m["tensors"] = J::object();
  test::write_file(manifest, m.dump());
  auto verify = test::run_command(GTRAIN_BINARY " ckpt verify " + all[1].path);
  EXPECT_NE(verify.exit_code, 0) << verify.output;
  EXPECT_EQ(verify.output.find("OK"), std::string::npos) << verify.output;
  // Given the checkpoint directory, verify takes the newest committed one, malformed or not: it
  // does not pass over it to an older one and say OK.
  verify = test::run_command(GTRAIN_BINARY " ckpt verify " + paths.checkpoints);
  EXPECT_NE(verify.exit_code, 0) << verify.output;
  EXPECT_NE(verify.output.find(manifest), std::string::npos) << verify.output;
  EXPECT_EQ(verify.output.find("OK"), std::string::npos) << verify.output;
  // Restored, it is the newest valid one again.
  test::write_file(manifest, pristine);
  EXPECT_EQ(find_latest_valid_checkpoint(paths.checkpoints, nullptr), all[1].path);
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
