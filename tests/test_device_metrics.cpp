// test_device_metrics.cpp: the memory and utilisation figures of metrics.jsonl's train records.
#include <gtest/gtest.h>

#include "runtime/metrics/device_metrics.h"

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

}  // namespace
}  // namespace gtrain
