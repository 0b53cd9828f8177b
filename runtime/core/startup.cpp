// startup.cpp: malloc tuning and memory probes (torch-free: the launcher uses them too).
#include "runtime/core/startup.h"

#include <malloc.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <thread>

namespace gtrain {

namespace {
constexpr int kTrainingMmapThreshold = 32 << 20;
constexpr int kBuildMmapThreshold = 64 << 10;
}  // namespace

void tune_malloc() {
  mallopt(M_MMAP_THRESHOLD, kTrainingMmapThreshold);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

void ignore_closed_console() {
  ::signal(SIGPIPE, SIG_IGN);
}

BuildAllocationScope::BuildAllocationScope() {
  mallopt(M_MMAP_THRESHOLD, kBuildMmapThreshold);
}
BuildAllocationScope::~BuildAllocationScope() {
  mallopt(M_MMAP_THRESHOLD, kTrainingMmapThreshold);
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

double resident_bytes() {
  return status_kb("VmRSS:");
}
double peak_resident_bytes() {
  return status_kb("VmHWM:");
}
void reset_peak_resident() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
}

void prefer_passive_openmp() {
#ifndef GTRAIN_OMP_SPIN_OK
  setenv("OMP_WAIT_POLICY", "passive", /*overwrite=*/0);
#endif
}

}  // namespace gtrain
