// hardware_query.cpp: cores and host memory from the OS; GPUs from NVML (dlopen'ed at run time in
// CUDA builds, so no build needs the NVML library or headers).
#include "launcher/base/hardware_query.h"

#include <sched.h>
#include <unistd.h>

#include <fstream>

#ifdef GTRAIN_WITH_CUDA
#include <dlfcn.h>
#endif

namespace gtrain {
namespace {

int64_t host_available_memory() {
  std::ifstream f("/proc/meminfo");
  std::string key, unit;
  double kb = 0;
  while (f >> key >> kb >> unit) {
    if (key == "MemAvailable:") return static_cast<int64_t>(kb * 1024.0);
  }
  return 0;
}

#ifdef GTRAIN_WITH_CUDA
// The few NVML entry points used, declared by hand (ABI-stable since NVML 5).
using nvmlDevice_t = void*;
struct NvmlMemory {
  unsigned long long total, free, used;
};
constexpr int kNvmlSuccess = 0;
constexpr int kP2pCapsIndexNvlink = 2;  // NVML_P2P_CAPS_INDEX_NVLINK
constexpr int kP2pStatusOk = 0;         // NVML_P2P_STATUS_OK
constexpr unsigned kMaxNvLinks = 18;

void query_nvml(HardwareInfo* hw) {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    hw->gpu_note = "libnvidia-ml.so.1 not found (no NVIDIA driver on this machine)";
    return;
  }
  auto sym = [&](const char* name) { return dlsym(lib, name); };
  auto init = reinterpret_cast<int (*)()>(sym("nvmlInit_v2"));
  auto shutdown = reinterpret_cast<int (*)()>(sym("nvmlShutdown"));
  auto count = reinterpret_cast<int (*)(unsigned*)>(sym("nvmlDeviceGetCount_v2"));
  auto handle = reinterpret_cast<int (*)(unsigned, nvmlDevice_t*)>(sym("nvmlDeviceGetHandleByIndex_v2"));
  auto name = reinterpret_cast<int (*)(nvmlDevice_t, char*, unsigned)>(sym("nvmlDeviceGetName"));
  auto uuid = reinterpret_cast<int (*)(nvmlDevice_t, char*, unsigned)>(sym("nvmlDeviceGetUUID"));
  auto memory = reinterpret_cast<int (*)(nvmlDevice_t, NvmlMemory*)>(sym("nvmlDeviceGetMemoryInfo"));
  auto nvlink = reinterpret_cast<int (*)(nvmlDevice_t, unsigned, int*)>(sym("nvmlDeviceGetNvLinkState"));
  auto p2p = reinterpret_cast<int (*)(nvmlDevice_t, nvmlDevice_t, int, int*)>(sym("nvmlDeviceGetP2PStatus"));
  if (!init || !count || !handle || init() != kNvmlSuccess) {
    hw->gpu_note = "NVML did not initialise (driver not loaded?)";
    dlclose(lib);
    return;
  }
  unsigned n = 0;
  std::vector<nvmlDevice_t> devs;
  if (count(&n) == kNvmlSuccess) {
    for (unsigned i = 0; i < n; ++i) {
      nvmlDevice_t dev = nullptr;
      if (handle(i, &dev) != kNvmlSuccess) continue;
      devs.push_back(dev);
      GpuInfo g;
      g.index = static_cast<int>(i);
      char buf[128] = {0};
      if (name && name(dev, buf, sizeof(buf)) == kNvmlSuccess) g.name = buf;
      char ubuf[128] = {0};
      if (uuid && uuid(dev, ubuf, sizeof(ubuf)) == kNvmlSuccess) g.uuid = ubuf;
      NvmlMemory mem{};
      if (memory && memory(dev, &mem) == kNvmlSuccess) g.memory_bytes = static_cast<int64_t>(mem.total);
      for (unsigned l = 0; nvlink && l < kMaxNvLinks; ++l) {
        int active = 0;
        if (nvlink(dev, l, &active) != kNvmlSuccess) break;
        g.nvlink_links += active ? 1 : 0;
      }
      hw->gpus.push_back(g);
    }
  }
  for (size_t i = 0; p2p && i < devs.size(); ++i) {
    for (size_t j = 0; j < devs.size(); ++j) {
      int status = -1;
      if (i != j && p2p(devs[i], devs[j], kP2pCapsIndexNvlink, &status) == kNvmlSuccess && status == kP2pStatusOk) {
        ++hw->gpus[i].nvlink_peers;
      }
    }
  }
  if (hw->gpus.empty()) hw->gpu_note = "NVML reports no GPUs";
  if (shutdown) shutdown();
  dlclose(lib);
}
#endif

}  // namespace

HardwareInfo query_hardware() {
  HardwareInfo hw;
  char buf[256] = {0};
  if (gethostname(buf, sizeof(buf) - 1) == 0) hw.hostname = buf;
  // Cores this process may run on (a scheduler's cgroup or affinity mask), else all online cores.
  cpu_set_t set;
  CPU_ZERO(&set);
  const long online = sysconf(_SC_NPROCESSORS_ONLN);
  hw.cores = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : static_cast<int>(online);
  if (hw.cores < 1) hw.cores = 1;
  hw.memory_bytes = host_available_memory();
#ifdef GTRAIN_WITH_CUDA
  hw.cuda_build = true;
  query_nvml(&hw);
#else
  hw.gpu_note = "built without CUDA: each granted GPU is one CPU rank";
#endif
  return hw;
}

}  // namespace gtrain
