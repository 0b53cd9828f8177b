// cuda_device.h: what a rank needs from CUDA, as plain functions that exist in every build (CPU-only
// builds answer "no device"): device count, the current device, waiting for it, the caching
// allocator's memory statistics, and NVML's utilisation and memory of a device.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace gtrain::cuda {

// Built against a LibTorch with CUDA (GTRAIN_WITH_CUDA).
bool built_with_cuda();
// CUDA devices this process sees (after CUDA_VISIBLE_DEVICES); 0 without CUDA.
int device_count();
// Makes `index` the current device of this thread. Throws Error without CUDA.
void set_device(int index);
// Device `index`'s PCI bus id ("0000:65:00.0"): the same for every process that sees that GPU,
// whatever its CUDA ordinal there. "" without CUDA or when the runtime cannot say.
std::string device_bus_id(int index);
// Waits for every stream of device `index`.
void synchronize(int index);

// The caching allocator's figures for a device (bytes); all 0 without CUDA.
struct MemoryStats {
  double allocated = 0, max_allocated = 0;  // tensors (torch.cuda.max_memory_allocated)
  double reserved = 0, max_reserved = 0;    // segments held from the driver
};
MemoryStats memory_stats(int index);
void reset_peak_memory(int index);

// NVML's view of a device. `valid` is false when libnvidia-ml.so.1 or the device is not there.
struct NvmlSample {
  bool valid = false;
  double gpu_util = 0;  // percent of the last sample period a kernel ran
  double mem_util = 0;  // percent of it device memory was read or written
  double used_bytes = 0, total_bytes = 0;
};
// `cuda_index` is a CUDA ordinal; `nvml_index` maps it (see nvml_index_for).
NvmlSample nvml_sample(int nvml_index);

// The NVML (physical) index of CUDA ordinal `cuda_index` given CUDA_VISIBLE_DEVICES from `env`:
// its entry when it lists indices, else the ordinal itself. -1 when it lists UUIDs (not mapped).
int nvml_index_for(int cuda_index, const std::map<std::string, std::string>& env);

}  // namespace gtrain::cuda
