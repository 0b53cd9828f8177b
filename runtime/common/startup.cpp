// startup.cpp: malloc tuning, thread counts, memory probe.
#include "runtime/common/startup.h"

#include <dlfcn.h>
#include <malloc.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

#include <ATen/Parallel.h>

namespace gtrain {

namespace {
constexpr int kTrainingMmapThreshold = 32 << 20;
constexpr int kBuildMmapThreshold = 64 << 10;
}  // namespace

void tune_malloc() {
  mallopt(M_MMAP_THRESHOLD, kTrainingMmapThreshold);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

BuildAllocationScope::BuildAllocationScope() { mallopt(M_MMAP_THRESHOLD, kBuildMmapThreshold); }
BuildAllocationScope::~BuildAllocationScope() { mallopt(M_MMAP_THRESHOLD, kTrainingMmapThreshold); }

int set_torch_threads(int64_t threads, int local_ranks) {
  int n = static_cast<int>(threads);
  if (n <= 0) {
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    n = static_cast<int>(std::max<long>(1, cores / std::max(1, local_ranks)));
  }
  at::set_num_threads(n);
  // OpenBLAS keeps its own pool (sized from the environment at load time); two ranks each with a
  // pool as large as the machine spin against each other. Size it like torch's.
  using SetThreads = void (*)(int);
  if (auto f = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) f(n);
  static bool interop_set = false;  // may be set only once per process, before inter-op work
  if (!interop_set) {
    interop_set = true;
    try {
      at::set_num_interop_threads(1);
    } catch (...) {
    }
  }
  return n;
}

double available_memory_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  double kb;
  std::string unit;
  while (f >> key >> kb >> unit) {
    if (key == "MemAvailable:") return kb * 1024.0;
  }
  return 0;
}

}  // namespace gtrain

namespace gtrain {
namespace {
double status_kb(const char* key) {
  std::ifstream f("/proc/self/status");
  std::string k;
  while (f >> k) {
    if (k == key) {
      double kb = 0;
      f >> kb;
      return kb * 1024.0;
    }
    std::getline(f, k);
  }
  return 0;
}
}  // namespace

double resident_bytes() { return status_kb("VmRSS:"); }
double peak_resident_bytes() { return status_kb("VmHWM:"); }
void reset_peak_resident() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
}

}  // namespace gtrain
