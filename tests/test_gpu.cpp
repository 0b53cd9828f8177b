// test_gpu.cpp (label gpu, CUDA builds only): a tiny GPT trains on cuda:0 in bf16, fp16 (dynamic loss
// scaling skips overflowing steps) and fp32 (close to the CPU run); checkpoints written from the GPU
// resume onto it; CUDA and NVML figures reach metrics.jsonl; NCCL on one rank reduces CUDA tensors
// and names what it refuses.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <fstream>

#include "launcher/commands/run_command.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/comm/comm_errors.h"
#include "runtime/common/cuda_device.h"
#include "runtime/common/torch_compat.h"
#include "runtime/models/fused_loss.h"
#include "runtime/models/keyed_dropout.h"
#include "runtime/train/fused_adamw.h"
#include "strategies/data_parallel.h"
#include "tests/support/test_util.h"
#ifdef GTRAIN_WITH_NCCL
#include "runtime/comm/nccl_communicator.h"
#endif

namespace gtrain {
namespace {

const torch::Device kGpu(torch::kCUDA, 0);

JobConfig tiny_gpt(const std::string& dtype, int64_t steps) {
  JobConfig c;
  c.model.name = "gpt";
  c.model.n_layer = 2;
  c.model.n_head = 2;
  c.model.n_embd = 64;
  c.model.seq_len = 32;
  c.model.vocab = 512;
  c.data.kind = DataKind::synthetic;
  c.data.synthetic_samples = 1024;
  c.train.global_batch = 16;
  c.train.steps = steps;
  c.train.eval_batches = 1;
  c.train.device = DeviceRequest::cuda;
  c.precision.dtype = dtype;
  c.optimizer.learning_rate = 3e-3;
  c.log.progress = "none";
  c.log.metrics_interval = 1;  // read every step's loss (CUDA reads only logged steps)
  return c;
}

std::unique_ptr<Trainer> make_trainer(const JobConfig& c, torch::Device device, TrainerPaths paths = {}) {
  JobConfig cfg = c;
  validate_job_config(cfg);
  auto comm = std::make_shared<LocalCommunicator>();
  auto parts = assemble_job(cfg, 1, comm, 1, device);
  return std::make_unique<Trainer>(cfg, parts.plan, comm, parts.model, parts.data, std::move(parts.engine), paths,
                                   device);
}

class Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

// gtrain's AdamW kernel with the clip folded in (GTRAIN_FUSED_ADAMW_CLIP) steps the trainer where
// LibTorch has at::_fused_adamw_, and with the switch at 0 the latter runs: the same losses.
TEST_F(Gpu, FusedAdamWClipSwitchKeepsTheTrajectory) {
  if (!compat::kHaveFusedAdamW) GTEST_SKIP() << "no at::_fused_adamw_ in this LibTorch";
  std::vector<double> losses[2];
  for (int k = 0; k < 2; ++k) {
    if (k == 1) ::setenv("GTRAIN_FUSED_ADAMW_CLIP", "0", 1);
    const int64_t before = fused_adamw_clip_launches();
    JobConfig c = tiny_gpt("fp32", 6);
    c.train.grad_clip = 0.05;  // clipping on most steps
    auto t = make_trainer(c, kGpu);
    for (int s = 0; s < 6; ++s) losses[k].push_back(t->train_step().loss);
    if (k == 0) {
      EXPECT_GT(fused_adamw_clip_launches(), before);
    } else {
      EXPECT_EQ(fused_adamw_clip_launches(), before);
    }
    ::unsetenv("GTRAIN_FUSED_ADAMW_CLIP");
  }
  for (size_t s = 0; s < losses[0].size(); ++s) EXPECT_NEAR(losses[0][s], losses[1][s], 1e-4) << "step " << s;
}

TEST_F(Gpu, Bf16GptLearnsAndLogsDeviceMemory) {
  test::TempDir dir;
  TrainerPaths paths;
  paths.metrics = dir.file("metrics.jsonl");
  auto t = make_trainer(tiny_gpt("bf16", 40), kGpu, paths);
  EXPECT_TRUE(t->model().parameters()[0].is_cuda());
  auto* dp = dynamic_cast<DataParallelEngine*>(&t->engine());
  ASSERT_NE(dp, nullptr);
  EXPECT_EQ(dp->fused_adamw(), compat::kHaveFusedAdamW);
  const double first = t->train_step().loss;
  EXPECT_NEAR(first, std::log(512.0), 0.3);
  const auto s = t->run();
  EXPECT_LT(s.final_loss, first - 1.0);
  std::ifstream f(paths.metrics);
  std::string line, last;
  while (std::getline(f, line)) {
    if (line.find("\"train\"") != std::string::npos) last = line;
  }
  auto j = nlohmann::json::parse(last);
  EXPECT_GT(j.at("cuda_max_allocated_mb").get<double>(), 0.0);
  EXPECT_EQ(j.at("peak_mem_mb").get<double>(), j.at("cuda_max_allocated_mb").get<double>());
  // The tensor estimate is what max allocated measures; the whole-GPU one adds the reserve.
  EXPECT_GT(j.at("est_mem_mb").get<double>(), 0.0);
  EXPECT_GT(j.at("est_device_mem_mb").get<double>(), j.at("est_mem_mb").get<double>());
}

// log.profile_start on CUDA: the profiled steps' kernels are listed with GPU time, and the CUDA
// allocator's events give the step's tensor memory on the device.
TEST_F(Gpu, ProfileListsKernelsAndDeviceMemory) {
  test::TempDir dir;
  TrainerPaths paths;
  paths.metrics = dir.file("metrics.jsonl");
  auto c = tiny_gpt("bf16", 6);
  c.log.profile_start = 3;
  c.log.profile_steps = 2;
  auto t = make_trainer(c, kGpu, paths);
  t->run();
  std::ifstream f(dir.file("profile/profile-rank0.json"));
  ASSERT_TRUE(f.good());
  nlohmann::json j;
  f >> j;
  ASSERT_FALSE(j.at("gpu").empty()) << j.dump();
  EXPECT_GT(j.at("gpu_us").get<double>(), 0.0);
  EXPECT_LE(j.at("gpu_us").get<double>(), 2.0 * j.at("wall_us").get<double>());
  EXPECT_GT(j.at("peak_tensor_mb").value("cuda:0", 0.0), 0.0) << j.dump();
}

// The fused output layer + loss on CUDA under bf16 autocast: the loss and the input's gradient
// agree with the plain layer to bf16 accuracy, with several row blocks.
TEST_F(Gpu, FusedLossMatchesThePlainLayerInBf16) {
  torch::manual_seed(2);
  const auto opts = torch::TensorOptions().device(kGpu);
  auto x = torch::randn({300, 64}, opts).requires_grad_(true);
  auto w = (torch::randn({1000, 64}, opts) * 0.1).requires_grad_(true);
  auto t = torch::randint(0, 1000, {300}, opts.dtype(torch::kLong));
  auto xr = x.detach().clone().requires_grad_(true);
  compat::set_autocast(c10::DeviceType::CUDA, true, torch::kBFloat16);
  auto fused = linear_cross_entropy_sum(x, w, t, 64);
  auto plain =
      torch::nn::functional::cross_entropy(torch::mm(xr, w.detach().t()).to(torch::kFloat), t,
                                           torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
  compat::set_autocast(c10::DeviceType::CUDA, false, torch::kBFloat16);
  EXPECT_NEAR(fused.item<double>(), plain.item<double>(), 1e-2 * std::abs(plain.item<double>()));
  fused.backward();
  plain.backward();
  EXPECT_LT((x.grad() - xr.grad()).abs().max().item<double>(), 2e-2);
  EXPECT_TRUE(w.grad().defined());
}

// The fused loss's CUDA kernel (softmax_xent.cu) against the same layer through ATen's ops: in fp32
// to fp32 rounding and under bf16 autocast to bf16's, for a vocabulary the 16-byte loads divide
// (1024) and one they do not (1001, the element-wise path), with targets at both ends of it; the
// gradient of the weight too, and several row blocks.
TEST_F(Gpu, FusedLossKernelMatchesTheAtenOps) {
  ASSERT_TRUE(fused_loss_cuda_kernel_enabled());
  for (const int64_t V : {1024, 1001}) {
    for (const bool bf16 : {false, true}) {
      SCOPED_TRACE("vocab " + std::to_string(V) + (bf16 ? " bf16" : " fp32"));
      torch::manual_seed(3);
      const auto opts = torch::TensorOptions().device(kGpu);
      const auto x0 = torch::randn({300, 64}, opts), w0 = torch::randn({V, 64}, opts) * 0.1;
      auto t = torch::randint(0, V, {300}, opts.dtype(torch::kLong));
      t[0] = 0;
      t[1] = V - 1;
      torch::Tensor loss[2], gx[2], gw[2];
      for (int k = 0; k < 2; ++k) {
        auto x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
        if (bf16) compat::set_autocast(c10::DeviceType::CUDA, true, torch::kBFloat16);
        loss[k] = linear_cross_entropy_sum(x, w, t, 64, k == 0 ? FusedLossKernel::automatic : FusedLossKernel::aten);
        if (bf16) compat::set_autocast(c10::DeviceType::CUDA, false, torch::kBFloat16);
        loss[k].backward();
        gx[k] = x.grad();
        gw[k] = w.grad();
      }
      const double tol = bf16 ? 1e-2 : 1e-5;
      EXPECT_NEAR(loss[0].item<double>(), loss[1].item<double>(), tol * std::abs(loss[1].item<double>()));
      EXPECT_LT((gx[0] - gx[1]).abs().max().item<double>(), tol * gx[1].abs().max().item<double>() + 1e-7);
      EXPECT_LT((gw[0] - gw[1]).abs().max().item<double>(), tol * gw[1].abs().max().item<double>() + 1e-7);
      EXPECT_TRUE(std::isfinite(loss[0].item<double>()));
    }
  }
}

// Keyed dropout on CUDA (Philox reseeded per row and head): a micro-batch or a head shard draws
// exactly the masks the whole batch draws there, at the expected rate.
TEST_F(Gpu, KeyedDropoutMasksDoNotDependOnTheSplit) {
  torch::Tensor whole, part;
  {
    DropoutRowsScope rows(9, 40);
    whole = keyed_drop_mask({4, 6, 32, 32}, 0.25, 1, kGpu, /*head_offset=*/0);
  }
  {
    DropoutRowsScope rows(9, 42);
    part = keyed_drop_mask({2, 3, 32, 32}, 0.25, 1, kGpu, /*head_offset=*/3);
  }
  EXPECT_TRUE(torch::equal(part, whole.slice(0, 2, 4).slice(1, 3, 6)));
  EXPECT_NEAR(whole.to(torch::kDouble).mean().item<double>(), 0.25, 0.015);  // 5 standard deviations
}

TEST_F(Gpu, Fp16SkipsOverflowingStepsAndHalvesTheScale) {
  auto c = tiny_gpt("fp16", 30);
  // Overflows fp16 gradients at first: this model's largest gradients (about 0.011 at its
  // initialisation, measured in fp32) pass fp16's 65504 above a scale of about 2^22.5, so some ten
  // steps are skipped while the scale halves, then the rest train (2^60 would skip all 30).
  c.precision.loss_scale_init = std::ldexp(1.0, 32);
  c.precision.loss_scale_window = 1000;
  auto t = make_trainer(c, kGpu);
  int skipped = 0;
  double first = NAN, last = NAN;
  for (int s = 0; s < 30; ++s) {
    auto r = t->train_step();
    skipped += r.skipped ? 1 : 0;
    if (s == 0) first = r.loss;
    last = r.loss;
  }
  EXPECT_GT(skipped, 0);
  EXPECT_LT(skipped, 30);
  EXPECT_LT(last, first);
}

TEST_F(Gpu, Fp32OnCudaFollowsTheCpuRun) {
  auto c = tiny_gpt("fp32", 8);
  c.train.deterministic = true;
  auto cpu = make_trainer(c, torch::kCPU), gpu = make_trainer(c, kGpu);
  for (int s = 0; s < 8; ++s) {
    const double a = cpu->train_step().loss, b = gpu->train_step().loss;
    EXPECT_NEAR(a, b, 2e-3 * std::abs(a)) << "step " << s;
  }
}

TEST_F(Gpu, CheckpointFromTheGpuResumesOntoIt) {
  test::TempDir dir;
  auto c = tiny_gpt("bf16", 12);
  TrainerPaths paths;
  paths.checkpoints = dir.file("ckpt");
  auto first = make_trainer(c, kGpu, paths);
  for (int s = 0; s < 6; ++s) first->train_step();
  first->save_checkpoint_now();
  first->finish_saves();
  auto second = make_trainer(c, kGpu, paths);
  second->resume(find_latest_valid_checkpoint(paths.checkpoints, nullptr));  // checks the probe loss
  EXPECT_EQ(second->steps_done(), 6);
  for (auto& p : second->model().parameters()) EXPECT_TRUE(p.is_cuda());
  const double a = first->train_step().loss, b = second->train_step().loss;
  EXPECT_NEAR(a, b, 1e-3 * std::abs(a));
}

#ifdef GTRAIN_WITH_NCCL
// Bootstrapped over the local communicator, so a build without MPI tests it too.
TEST_F(Gpu, NcclWorldOfOneReducesCudaTensorsAndRefusesOthers) {
  NcclCommunicator nccl(std::make_shared<LocalCommunicator>(), 0);
  EXPECT_EQ(nccl.size(), 1);
  EXPECT_GE(NcclCommunicator::version(), 20000);
  auto t = torch::full({4}, 2.0, torch::TensorOptions().device(kGpu));
  nccl.allreduce(t, ReduceOp::kSum);
  EXPECT_TRUE(torch::equal(t.cpu(), torch::full({4}, 2.0)));
  // bf16 (the dtype a bf16 run could reduce in) and a split communicator work too.
  auto h = torch::full({3}, 1.5, torch::TensorOptions().dtype(torch::kBFloat16).device(kGpu));
  auto sub = nccl.split(0, 0);
  EXPECT_EQ(sub->backend(), "nccl");
  sub->allreduce(h, ReduceOp::kMax);
  sub->barrier();
  EXPECT_TRUE(torch::equal(h.cpu(), torch::full({3}, 1.5, torch::kBFloat16)));
  auto cpu = torch::ones({4});
  try {
    nccl.allreduce(cpu, ReduceOp::kSum);
    ADD_FAILURE() << "a CPU tensor was accepted";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("backend nccl does not support cpu tensors"), std::string::npos) << e.what();
  }
  auto flags = torch::ones({4}, torch::TensorOptions().dtype(torch::kBool).device(kGpu));
  try {
    nccl.allreduce(flags, ReduceOp::kSum);
    ADD_FAILURE() << "a bool tensor was accepted";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("does not support dtype Bool"), std::string::npos) << e.what();
  }
}
#endif

}  // namespace
}  // namespace gtrain
