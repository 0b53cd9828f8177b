// startup.h: process start-up tuning measured on our machines (malloc thresholds) and memory probes;
// torch-free (torch thread pools: runtime/common/torch_threads.h).
#pragma once

#include <cstdint>

namespace gtrain {

// Keeps glibc malloc from returning memory to the OS on every free of a large tensor
// (measured ~5x slower training, ~10x slower 64 MB MPI allreduce without it).
void tune_malloc();

// Usable memory of this machine in bytes (MemAvailable), 0 when unknown.
double available_memory_bytes();

// This process's resident memory now and its high-water mark (VmRSS / VmHWM), in bytes.
double resident_bytes();
double peak_resident_bytes();
// Restarts the high-water mark at the current resident size (Linux clear_refs 5).
void reset_peak_resident();

}  // namespace gtrain
