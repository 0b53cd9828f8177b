// startup.h: process start-up tuning measured on our machines (malloc thresholds) and memory probes;
// torch-free (torch thread pools: runtime/common/torch_threads.h).
#pragma once

#include <cstdint>

namespace gtrain {

// Keeps glibc malloc from returning memory to the OS on every free of a large tensor
// (measured ~5x slower training, ~10x slower 64 MB MPI allreduce without it).
void tune_malloc();

// OpenMP threads that sleep between parallel regions (OMP_WAIT_POLICY=passive) unless the user chose:
// set in the torch-free gtrain before it starts gtrain-worker or mpirun, whose LibTorch reads it when
// libgomp loads. Spinning threads (libgomp's default) fight OpenBLAS's own threads for the cores: a
// llama step at 2 threads on a 2-core machine took 651 ms spinning, 196 ms passive (326 ms at 1).
// Only with a LibTorch whose BLAS has its own threads (Debian's OpenBLAS, found by CMake): pip's
// wheels run MKL in the OpenMP threads, and there passive waits cost the step 25% (235 ms against
// 300 ms at 2 threads on the same machine).
void prefer_passive_openmp();

// A console that goes away (`gtrain run ... | head`, a tee or an ssh session that ends) must not end
// the process: SIGPIPE is ignored (also in the processes it starts, mpirun and the ranks), so a write
// to a closed pipe fails with EPIPE instead, and the streams stop writing while training, its
// metrics, checkpoints and ledger go on.
void ignore_closed_console();

// While alive, blocks of 64 KiB and more come straight from the OS (mmap) and go back on free.
// Building a job allocates the whole model and then keeps a part of it in flat buffers: without
// this the freed tensors stay resident as holes in the heap that later, larger tensors cannot use.
// Restores tune_malloc's threshold on destruction (training reuses heap blocks at full speed).
class BuildAllocationScope {
 public:
  BuildAllocationScope();
  ~BuildAllocationScope();
  BuildAllocationScope(const BuildAllocationScope&) = delete;
  BuildAllocationScope& operator=(const BuildAllocationScope&) = delete;
};

// Usable memory of this machine in bytes (MemAvailable), 0 when unknown.
double available_memory_bytes();

// This process's resident memory now and its high-water mark (VmRSS / VmHWM), in bytes.
double resident_bytes();
double peak_resident_bytes();
// Restarts the high-water mark at the current resident size (Linux clear_refs 5).
void reset_peak_resident();

}  // namespace gtrain
