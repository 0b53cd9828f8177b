// device_metrics.cpp: allocator, NVML and resident-memory figures for metrics.jsonl.
#include "runtime/metrics/device_metrics.h"

#include <time.h>

#include "runtime/core/startup.h"

namespace gtrain {
namespace {
constexpr double kMb = 1 << 20;
}

void add_cuda_metrics(nlohmann::json& rec, const cuda::MemoryStats& m, const cuda::NvmlSample& n,
                      const PlannedMemory& est) {
  rec["cuda_max_allocated_mb"] = m.max_allocated / kMb;
  rec["cuda_reserved_mb"] = m.reserved / kMb;
  rec["cuda_max_reserved_mb"] = m.max_reserved / kMb;
  // The planner's estimate of the tensors is compared with what torch allocated on the device at
  // most; its whole figure (plus the CUDA context, library workspaces and the caching allocator's
  // slack) with what the device had in use.
  rec["peak_mem_mb"] = m.max_allocated / kMb;
  rec["est_mem_mb"] = est.tensor_bytes / kMb;
  rec["est_device_mem_mb"] = est.device_bytes / kMb;
  if (n.valid) {
    rec["gpu_util"] = n.gpu_util;
    rec["gpu_mem_util"] = n.mem_util;
    rec["gpu_mem_used_mb"] = n.used_bytes / kMb;
    rec["gpu_mem_total_mb"] = n.total_bytes / kMb;
  }
}

void add_host_memory_metrics(nlohmann::json& rec, double peak_resident, double baseline, const PlannedMemory& est) {
  if (baseline <= 0) return;
  // CPU: the job's resident high-water mark above the baseline.
  rec["peak_mem_mb"] = (peak_resident - baseline) / kMb;
  rec["est_mem_mb"] = est.device_bytes / kMb;
}

void DeviceMetrics::add_to(nlohmann::json& rec) const {
  if (cuda_index_ >= 0) {
    add_cuda_metrics(rec, cuda::memory_stats(cuda_index_), cuda::nvml_sample(nvml_index_), est_);
  } else {
    if (baseline_ > 0) add_host_memory_metrics(rec, peak_resident_bytes(), baseline_, est_);
    // The cores this process kept busy since the previous record (all its threads' CPU time).
    timespec cpu{}, wall{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
    clock_gettime(CLOCK_MONOTONIC, &wall);
    const double cpu_s = static_cast<double>(cpu.tv_sec) + 1e-9 * static_cast<double>(cpu.tv_nsec);
    const double wall_s = static_cast<double>(wall.tv_sec) + 1e-9 * static_cast<double>(wall.tv_nsec);
    if (last_wall_s_ > 0 && wall_s > last_wall_s_) rec["cpu_util"] = (cpu_s - last_cpu_s_) / (wall_s - last_wall_s_);
    last_cpu_s_ = cpu_s;
    last_wall_s_ = wall_s;
  }
}

}  // namespace gtrain
