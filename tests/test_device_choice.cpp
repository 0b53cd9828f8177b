// test_device_choice.cpp: each rank's device from train.device, the visible CUDA devices,
// CUDA_VISIBLE_DEVICES and the allocation's granted GPUs (pure rules, no GPU needed); the CUDA
// ordinal -> NVML index mapping.
#include <gtest/gtest.h>

#include "launcher/launch/device_choice.h"
#include "launcher/launch/run_launch.h"
#include "launcher/scheduler/allocation.h"
#include "runtime/common/cuda_device.h"
#include "runtime/core/config/job_config.h"
#include "runtime/core/errors.h"
#include "strategies/planner/hardware_profile.h"

namespace gtrain {
namespace {

DeviceChoiceInput gpus(int count, int local_rank, int local_size) {
  DeviceChoiceInput in;
  in.cuda_build = true;
  in.device_count = count;
  in.local_rank = local_rank;
  in.local_size = local_size;
  return in;
}

std::string message_of(const DeviceChoiceInput& in) {
  try {
    choose_device(in);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(DeviceChoice, CpuWhenAskedOrWithoutCuda) {
  auto in = gpus(4, 1, 4);
  in.requested = DeviceRequest::cpu;
  EXPECT_FALSE(choose_device(in).cuda);
  EXPECT_EQ(choose_device(in).str(), "cpu");

  DeviceChoiceInput cpu_build;  // auto on a CPU-only build
  EXPECT_FALSE(choose_device(cpu_build).cuda);
  EXPECT_NE(choose_device(cpu_build).reason.find("built without CUDA"), std::string::npos);

  auto none = gpus(0, 0, 1);  // CUDA build, no device visible
  EXPECT_FALSE(choose_device(none).cuda);
  EXPECT_NE(choose_device(none).reason.find("no CUDA device"), std::string::npos);
}

TEST(DeviceChoice, CudaRequestedWithoutDeviceIsAnErrorNamingTheKey) {
  DeviceChoiceInput in;
  in.requested = DeviceRequest::cuda;
  EXPECT_NE(message_of(in).find("train.device = \"cuda\" but this gtrain was built without CUDA"), std::string::npos);
  auto none = gpus(0, 0, 1);
  none.requested = DeviceRequest::cuda;
  EXPECT_NE(message_of(none).find("no CUDA device is visible"), std::string::npos);
}

TEST(DeviceChoice, LocalRankIndexesTheVisibleDevices) {
  // CUDA_VISIBLE_DEVICES=4,5,6,7 (granted by the scheduler): the process sees ordinals 0..3.
  for (int r = 0; r < 4; ++r) {
    auto in = gpus(4, r, 4);
    in.visible_set = true;
    in.granted = {4, 5, 6, 7};  // physical indices: ignored, the visible list already remaps them
    const auto c = choose_device(in);
    EXPECT_TRUE(c.cuda);
    EXPECT_EQ(c.index, r);
    EXPECT_EQ(c.str(), "cuda:" + std::to_string(r));
  }
  // One GPU bound to each task (srun --gpu-bind): every rank sees its own as ordinal 0.
  auto bound = gpus(1, 3, 4);
  bound.visible_set = true;
  EXPECT_EQ(choose_device(bound).index, 0);
  // More ranks than visible GPUs: they share them in turn, and the reason says so.
  auto over = gpus(2, 2, 3);
  over.visible_set = true;
  EXPECT_EQ(choose_device(over).index, 0);
  EXPECT_EQ(choose_device(over).reason, "local rank 2 -> visible GPU 0, shared (3 ranks on 2 GPUs)");
  over.local_rank = 0;  // its partner on GPU 0 shares it too
  EXPECT_EQ(choose_device(over).reason, "local rank 0 -> visible GPU 0, shared (3 ranks on 2 GPUs)");
  over.local_rank = 1;
  EXPECT_EQ(choose_device(over).reason, "local rank 1 -> visible GPU 1, shared (3 ranks on 2 GPUs)");
}

TEST(DeviceChoice, GrantedIndicesWhenNothingIsHidden) {
  // The allocation granted GPUs 2 and 3 of 4 and CUDA_VISIBLE_DEVICES is unset: ordinals are physical.
  auto r0 = gpus(4, 0, 2), r1 = gpus(4, 1, 2);
  r0.granted = r1.granted = {2, 3};
  EXPECT_EQ(choose_device(r0).index, 2);
  EXPECT_EQ(choose_device(r1).index, 3);
  EXPECT_NE(choose_device(r1).reason.find("granted GPU 3"), std::string::npos);
  // A granted index the process cannot see.
  auto hidden = gpus(2, 0, 1);
  hidden.granted = {5};
  EXPECT_NE(message_of(hidden).find("grants GPU 5 but this process sees 2 CUDA devices"), std::string::npos);
  // More ranks than granted GPUs: 4 ranks on GPUs 6 and 7 take 6, 7, 6, 7.
  for (int r = 0; r < 4; ++r) {
    auto over = gpus(8, r, 4);
    over.granted = {6, 7};
    EXPECT_EQ(choose_device(over).index, 6 + r % 2);
  }
  auto over = gpus(8, 3, 4);
  over.granted = {6, 7};
  EXPECT_EQ(choose_device(over).reason, "local rank 3 -> granted GPU 7, shared (4 ranks on 2 GPUs)");
}

// gtrain run --include node2:2,3 with CUDA_VISIBLE_DEVICES listing node2's whole grant: the ranks
// take the included GPUs' positions among the visible ones.
TEST(DeviceChoice, IncludedGpusAreTakenByTheirPositionAmongTheVisible) {
  auto r0 = gpus(4, 0, 2), r1 = gpus(4, 1, 2);
  r0.visible_set = r1.visible_set = true;
  r0.positions = r1.positions = {2, 3};
  EXPECT_EQ(choose_device(r0).index, 2);
  EXPECT_EQ(choose_device(r1).index, 3);
  EXPECT_NE(choose_device(r1).reason.find("included GPU at position 3"), std::string::npos);
  auto over = gpus(4, 2, 3);
  over.visible_set = true;
  over.positions = {2, 3};
  EXPECT_NE(message_of(over).find("3 ranks on this node but 2 GPUs included"), std::string::npos);
  auto hidden = gpus(2, 0, 1);
  hidden.visible_set = true;
  hidden.positions = {3};
  EXPECT_NE(message_of(hidden).find("position 3 but CUDA_VISIBLE_DEVICES shows 2 GPUs"), std::string::npos);
}

TEST(DeviceChoice, NoAllocationFallsBackToTheLocalRank) {
  EXPECT_EQ(choose_device(gpus(8, 5, 8)).index, 5);
  EXPECT_EQ(choose_device(gpus(1, 0, 1)).index, 0);
  EXPECT_EQ(choose_device(gpus(1, 1, 2)).index, 0);  // one GPU shared by two ranks
  EXPECT_EQ(choose_device(gpus(2, 3, 4)).index, 1);  // 4 ranks on 2 GPUs: 0, 1, 0, 1
  EXPECT_EQ(choose_device(gpus(2, 2, 4)).index, 0);
}

// Before the ranks start, the launcher plans for the first granted GPU and, when --ranks asks for
// more ranks than GPUs, for the most ranks that take one in turn.
TEST(DeviceChoice, LauncherPlansForTheSharedGpu) {
  Allocation alloc;
  alloc.cuda_build = true;
  alloc.nodes = {NodeAllocation{"n1", {3, 5}, 0, 0}};
  JobConfig cfg;
  PlanDevice d = launch_plan_device(cfg, alloc);
  EXPECT_EQ(d.nvml_index, 3);
  EXPECT_EQ(d.ranks_on_device, 1);
  alloc.ranks_override = 5;  // 5 ranks on 2 GPUs: 3, 2
  EXPECT_EQ(launch_plan_device(cfg, alloc).ranks_on_device, 3);
  alloc.ranks_override = 1;
  EXPECT_EQ(launch_plan_device(cfg, alloc).ranks_on_device, 1);
  cfg.train.device = DeviceRequest::cpu;  // CPU ranks plan with the host's profile
  d = launch_plan_device(cfg, alloc);
  EXPECT_EQ(d.nvml_index, -1);
  EXPECT_EQ(d.ranks_on_device, 1);
  alloc.cuda_build = false;
  cfg.train.device = DeviceRequest::automatic;
  EXPECT_EQ(launch_plan_device(cfg, alloc).nvml_index, -1);
}

// What a CUDA rank plans with, from its GPU's NVML name and memory, alone or shared.
TEST(DeviceChoice, GpuRankProfileFromNvmlSplitAmongItsRanks) {
  GpuInfo h200;
  h200.name = "NVIDIA H200";
  h200.memory_bytes = int64_t{143771} * 1024 * 1024;  // nvidia-smi's total on the lent H200
  const HardwareProfile alone = gpu_rank_profile(h200, 1);
  EXPECT_EQ(alone.name, "H200");
  EXPECT_EQ(alone.memory_bytes, static_cast<double>(h200.memory_bytes));
  const HardwareProfile quarter = gpu_rank_profile(h200, 4);
  EXPECT_EQ(quarter.name, "H200 shared by 4 ranks");
  EXPECT_DOUBLE_EQ(quarter.usable_bytes(), static_cast<double>(h200.memory_bytes) / 4 - alone.reserved_bytes);
  EXPECT_DOUBLE_EQ(quarter.achievable_flops("bf16"), alone.achievable_flops("bf16") / 4);
  GpuInfo unknown;  // a name the table lacks: the entry nearest by memory, with the card's total
  unknown.name = "NVIDIA RTX 9000";
  unknown.memory_bytes = int64_t{40} << 30;
  EXPECT_EQ(gpu_rank_profile(unknown, 1).name, "A100-40GB");
  EXPECT_EQ(gpu_rank_profile(unknown, 2).memory_bytes, static_cast<double>(int64_t{20} << 30));
}

TEST(CudaDevice, NvmlIndexFollowsCudaVisibleDevices) {
  EXPECT_EQ(cuda::nvml_index_for(1, {}), 1);
  EXPECT_EQ(cuda::nvml_index_for(0, {{"CUDA_VISIBLE_DEVICES", "6,2"}}), 6);
  EXPECT_EQ(cuda::nvml_index_for(1, {{"CUDA_VISIBLE_DEVICES", "6,2"}}), 2);
  EXPECT_EQ(cuda::nvml_index_for(2, {{"CUDA_VISIBLE_DEVICES", "6,2"}}), -1);
  EXPECT_EQ(cuda::nvml_index_for(0, {{"CUDA_VISIBLE_DEVICES", "GPU-8f6c2a1e"}}), -1);
  // Without a GPU (or NVML) a sample is simply not valid; it never throws.
  EXPECT_NO_THROW(cuda::nvml_sample(0));
  if (!cuda::built_with_cuda()) {
    EXPECT_EQ(cuda::device_count(), 0);
    EXPECT_EQ(cuda::memory_stats(0).max_allocated, 0.0);
    EXPECT_THROW(cuda::set_device(0), Error);
  }
}

}  // namespace
}  // namespace gtrain
