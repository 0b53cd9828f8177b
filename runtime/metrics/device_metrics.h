// device_metrics.h: the memory and utilisation figures a train record of metrics.jsonl carries.
// CUDA ranks: the caching allocator's peaks beside the planner's estimates, and NVML's utilisation
// and memory when it is there. CPU ranks: the job's resident high-water mark above the resident
// memory before the job was built, beside the planner's estimate, and cpu_util: the cores the
// process kept busy since the previous record.
#pragma once

#include <nlohmann/json.hpp>

#include "runtime/common/cuda_device.h"

namespace gtrain {

// The planner's per-rank estimates (Plan::est_tensor_bytes, est_memory_bytes).
struct PlannedMemory {
  double tensor_bytes = 0;  // tensors only (comparable with torch's max allocated)
  double device_bytes = 0;  // everything the rank holds
};

// Adds cuda_max_allocated_mb, cuda_reserved_mb, cuda_max_reserved_mb, peak_mem_mb, est_mem_mb and
// est_device_mem_mb; and gpu_util, gpu_mem_util, gpu_mem_used_mb, gpu_mem_total_mb when `nvml` is valid.
void add_cuda_metrics(nlohmann::json& rec, const cuda::MemoryStats& memory, const cuda::NvmlSample& nvml,
                      const PlannedMemory& est);
// Adds peak_mem_mb (`peak_resident` above `baseline`, bytes) and est_mem_mb; nothing when baseline <= 0.
void add_host_memory_metrics(nlohmann::json& rec, double peak_resident, double baseline, const PlannedMemory& est);

// One rank's source of those figures: CUDA device `cuda_index` (NVML index `nvml_index`, -1 =
// none), or the process when cuda_index < 0.
class DeviceMetrics {
 public:
  DeviceMetrics() = default;
  DeviceMetrics(int cuda_index, int nvml_index, PlannedMemory est)
      : cuda_index_(cuda_index), nvml_index_(nvml_index), est_(est) {}
  void set_memory_baseline(double bytes) { baseline_ = bytes; }
  // Reads the device (or the process) now and adds its figures to `rec` (CPU: the utilisation since
  // the previous call).
  void add_to(nlohmann::json& rec) const;

 private:
  int cuda_index_ = -1;
  int nvml_index_ = -1;
  PlannedMemory est_;
  double baseline_ = 0;
  mutable double last_cpu_s_ = 0, last_wall_s_ = 0;  // CPU ranks: the previous record's process CPU and wall time
};

}  // namespace gtrain
