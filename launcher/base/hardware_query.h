// hardware_query.h: HardwareInfo, what this machine has: cores, memory, and (CUDA builds) the
// GPUs NVML reports (name, memory, NVLink links), read through a dlopen'ed libnvidia-ml.so.1.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gtrain {

struct GpuInfo {
  int index = 0;             // NVML index (physical order, not CUDA_VISIBLE_DEVICES order)
  std::string name;          // "NVIDIA H100 80GB HBM3"
  std::string uuid;          // "GPU-..."
  int64_t memory_bytes = 0;  // total device memory
  int nvlink_links = 0;      // active NVLink links (0 = PCIe only or unknown)
  int nvlink_peers = 0;      // other GPUs of this node it reaches over NVLink (P2P status OK)
};

struct HardwareInfo {
  std::string hostname;
  int cores = 1;              // online CPU cores
  int64_t memory_bytes = 0;   // host memory available (MemAvailable), 0 = unknown
  bool cuda_build = false;    // built with GTRAIN_WITH_CUDA: granted GPUs run CUDA ranks
  std::vector<GpuInfo> gpus;  // NVML's devices (CUDA builds only)
  std::string gpu_note;       // why there is no GPU information, when there is none
};

// Queries this machine. Never throws: a missing NVML library or driver leaves `gpus` empty and
// says why in `gpu_note`.
HardwareInfo query_hardware();

}  // namespace gtrain
