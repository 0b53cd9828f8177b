// test_device_metrics.cpp: the memory and utilisation figures of metrics.jsonl's train records, and
// TensorMeter, which counts a step's tensors on CPU ranks.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <string>
#include <vector>

#include "runtime/metrics/device_metrics.h"
#include "runtime/metrics/tensor_meter.h"

namespace gtrain {
namespace {

constexpr double kMb = 1 << 20;

TEST(DeviceMetrics, CudaFiguresBesideThePlannersEstimates) {
  cuda::MemoryStats m;
  m.max_allocated = 300 * kMb;
  m.reserved = 400 * kMb;
  m.max_reserved = 512 * kMb;
  cuda::NvmlSample n;  // not valid: no NVML figures
  nlohmann::json rec;
  add_cuda_metrics(rec, m, n, {250 * kMb, 600 * kMb});
  EXPECT_EQ(rec, (nlohmann::json{{"cuda_max_allocated_mb", 300.0},
                                 {"cuda_reserved_mb", 400.0},
                                 {"cuda_max_reserved_mb", 512.0},
                                 {"peak_mem_mb", 300.0},
                                 {"est_mem_mb", 250.0},
                                 {"est_device_mem_mb", 600.0}}));
  n.valid = true;
  n.gpu_util = 87;
  n.mem_util = 40;
  n.used_bytes = 1024 * kMb;
  n.total_bytes = 81920 * kMb;
  add_cuda_metrics(rec, m, n, {250 * kMb, 600 * kMb});
  EXPECT_EQ(rec.at("gpu_util"), 87.0);
  EXPECT_EQ(rec.at("gpu_mem_util"), 40.0);
  EXPECT_EQ(rec.at("gpu_mem_used_mb"), 1024.0);
  EXPECT_EQ(rec.at("gpu_mem_total_mb"), 81920.0);
}

TEST(DeviceMetrics, HostMemoryAboveTheBaseline) {
  nlohmann::json rec = nlohmann::json::object();
  add_host_memory_metrics(rec, 900 * kMb, 0, {1, 2});
  EXPECT_TRUE(rec.empty());  // no baseline: nothing to compare
  add_host_memory_metrics(rec, 900 * kMb, 100 * kMb, {10 * kMb, 700 * kMb});
  EXPECT_EQ(rec, (nlohmann::json{{"peak_mem_mb", 800.0}, {"est_mem_mb", 700.0}}));
  // A CPU rank's source without a baseline adds nothing either.
  nlohmann::json cpu = nlohmann::json::object();
  DeviceMetrics(-1, -1, {}).add_to(cpu);
  EXPECT_TRUE(cpu.empty());
}

// The highest net bytes a stretch allocates, not what was live before it; and freeing tensors from
// before it (every step frees the last one's) prints nothing, though c10 warns of such frees
// every 1000th time while its memory-reporting hook is installed.
TEST(TensorMeter, CountsWhatAStretchAllocatesAndStaysQuiet) {
  std::vector<torch::Tensor> earlier;
  for (int i = 0; i < 2500; ++i) earlier.push_back(torch::ones({64}));
  TensorMeter meter;
  testing::internal::CaptureStderr();
  ASSERT_TRUE(meter.start());
  earlier.clear();  // 2500 frees of blocks the hook never saw allocated
  {
    auto a = torch::empty({1 << 20});  // 4 MiB
    auto b = torch::empty({1 << 19});  // 2 MiB, live with a
  }
  auto c = torch::empty({1 << 18});  // 1 MiB, after both were freed
  const double peak = meter.stop();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_GE(peak, 6.0 * kMb);
  EXPECT_LT(peak, 6.0 * kMb + 64 * 1024) << "only the two tensors, not what was live before";
  EXPECT_EQ(err.find("unknown size"), std::string::npos) << err;
  EXPECT_FALSE(meter.active());
  // A second stretch starts from zero.
  ASSERT_TRUE(meter.start());
  { auto d = torch::empty({1 << 16}); }
  EXPECT_NEAR(meter.stop(), 256.0 * 1024, 1024.0);
}

}  // namespace
}  // namespace gtrain
