// cuda_device.cpp: device count, current device and memory statistics through c10/cuda (CUDA
// builds), NVML through a dlopen'ed libnvidia-ml.so.1 (every build: no NVML header or link needed).
#include "runtime/common/cuda_device.h"

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>
#include <sstream>
#include <vector>

#include <torch/cuda.h>

#ifdef GTRAIN_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

#include "runtime/core/errors.h"

namespace gtrain::cuda {

bool built_with_cuda() {
#ifdef GTRAIN_WITH_CUDA
  return true;
#else
  return false;
#endif
}

int device_count() {
#ifdef GTRAIN_WITH_CUDA
  return static_cast<int>(torch::cuda::device_count());
#else
  return 0;
#endif
}

void set_device(int index) {
#ifdef GTRAIN_WITH_CUDA
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
#else
  throw Error("CUDA device " + std::to_string(index) + " requested but this gtrain was built without CUDA",
              "build against a CUDA LibTorch (CMAKE_PREFIX_PATH), or set train.device = \"cpu\"");
#endif
}

std::string device_bus_id(int index) {
#ifdef GTRAIN_WITH_CUDA
  char id[64] = {0};
  if (cudaDeviceGetPCIBusId(id, static_cast<int>(sizeof id), index) != cudaSuccess) {
    (void)cudaGetLastError();  // clear it: the next CUDA call must not see it
    return "";
  }
  return id;
#else
  (void)index;
  return "";
#endif
}

void synchronize(int index) {
#ifdef GTRAIN_WITH_CUDA
  torch::cuda::synchronize(index);
#else
  (void)index;
#endif
}

MemoryStats memory_stats(int index) {
  MemoryStats m;
#ifdef GTRAIN_WITH_CUDA
  // Index 0 of each statistic array is the aggregate over pool types (StatType::AGGREGATE), in
  // LibTorch 1.13 and 2.x alike (the enum moved namespaces, the layout did not).
  const auto s = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(index));
  m.allocated = static_cast<double>(s.allocated_bytes[0].current);
  m.max_allocated = static_cast<double>(s.allocated_bytes[0].peak);
  m.reserved = static_cast<double>(s.reserved_bytes[0].current);
  m.max_reserved = static_cast<double>(s.reserved_bytes[0].peak);
#else
  (void)index;
#endif
  return m;
}

void reset_peak_memory(int index) {
#ifdef GTRAIN_WITH_CUDA
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(index));
#else
  (void)index;
#endif
}

namespace {

// The few NVML entry points used, declared here (no nvml.h needed).
struct Nvml {
  using Device = void*;
  struct Utilization {
    unsigned gpu, memory;
  };
  struct Memory {
    unsigned long long total, free, used;
  };
  int (*init)() = nullptr;
  int (*handle)(unsigned, Device*) = nullptr;
  int (*utilization)(Device, Utilization*) = nullptr;
  int (*memory)(Device, Memory*) = nullptr;
  bool ok = false;
};

const Nvml& nvml() {
  static Nvml n;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return;
    n.init = reinterpret_cast<int (*)()>(dlsym(lib, "nvmlInit_v2"));
    n.handle = reinterpret_cast<int (*)(unsigned, Nvml::Device*)>(dlsym(lib, "nvmlDeviceGetHandleByIndex_v2"));
    n.utilization =
        reinterpret_cast<int (*)(Nvml::Device, Nvml::Utilization*)>(dlsym(lib, "nvmlDeviceGetUtilizationRates"));
    n.memory = reinterpret_cast<int (*)(Nvml::Device, Nvml::Memory*)>(dlsym(lib, "nvmlDeviceGetMemoryInfo"));
    n.ok = n.init && n.handle && n.utilization && n.memory && n.init() == 0;  // NVML_SUCCESS
  });
  return n;
}

}  // namespace

NvmlSample nvml_sample(int nvml_index) {
  NvmlSample s;
  if (nvml_index < 0) return s;
  const Nvml& n = nvml();
  if (!n.ok) return s;
  Nvml::Device dev = nullptr;
  if (n.handle(static_cast<unsigned>(nvml_index), &dev) != 0) return s;
  Nvml::Utilization u{};
  Nvml::Memory m{};
  if (n.utilization(dev, &u) != 0 || n.memory(dev, &m) != 0) return s;
  s.valid = true;
  s.gpu_util = u.gpu;
  s.mem_util = u.memory;
  s.used_bytes = static_cast<double>(m.used);
  s.total_bytes = static_cast<double>(m.total);
  return s;
}

int nvml_index_for(int cuda_index, const std::map<std::string, std::string>& env) {
  auto it = env.find("CUDA_VISIBLE_DEVICES");
  if (it == env.end() || it->second.empty()) return cuda_index;
  std::vector<int> ids;
  std::stringstream ss(it->second);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || !end || *end != '\0') return -1;  // UUIDs or MIG names: not mapped
    ids.push_back(static_cast<int>(v));
  }
  return cuda_index >= 0 && cuda_index < static_cast<int>(ids.size()) ? ids[static_cast<size_t>(cuda_index)] : -1;
}

}  // namespace gtrain::cuda
