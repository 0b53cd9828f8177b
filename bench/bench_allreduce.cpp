// bench_allreduce.cpp: allreduce bus bandwidth of MpiCommunicator against plain MPI_Allreduce on
// the same buffers, 1 / 16 / 64 MB, side by side in one run. Run: mpirun -np 2 build/bench_allreduce
#include <mpi.h>

#include <chrono>
#include <cstdio>

#include "runtime/comm/mpi_communicator.h"
#include "runtime/core/startup.h"

using Clock = std::chrono::steady_clock;

int main() {
  gtrain::tune_malloc();
  auto comm = gtrain::MpiCommunicator::world({});
  const int n = comm->size();
  if (comm->rank() == 0) std::printf("%-8s %14s %14s %8s\n", "size", "gtrain GB/s", "MPI GB/s", "ratio");
  for (int64_t mb : {1, 16, 64}) {
    const int64_t elems = mb * (1 << 20) / 4;
    auto t = torch::ones({elems});
    const int iters = mb >= 64 ? 10 : 30;
    auto bus = [&](double secs) { return 2.0 * (n - 1) / n * static_cast<double>(elems * 4) * iters / secs / 1e9; };
    // Warm up both paths.
    comm->allreduce(t, gtrain::ReduceOp::kSum);
    MPI_Allreduce(MPI_IN_PLACE, t.data_ptr(), static_cast<int>(elems), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double ours = 0, raw = 0;
    for (int rep = 0; rep < 3; ++rep) {  // interleave to share the machine's noise
      MPI_Barrier(MPI_COMM_WORLD);
      auto t0 = Clock::now();
      for (int i = 0; i < iters; ++i) comm->allreduce(t, gtrain::ReduceOp::kSum);
      ours += std::chrono::duration<double>(Clock::now() - t0).count();
      MPI_Barrier(MPI_COMM_WORLD);
      t0 = Clock::now();
      for (int i = 0; i < iters; ++i) {
        MPI_Allreduce(MPI_IN_PLACE, t.data_ptr(), static_cast<int>(elems), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      }
      raw += std::chrono::duration<double>(Clock::now() - t0).count();
    }
    if (comm->rank() == 0) {
      std::printf("%-8s %14.2f %14.2f %8.3f\n", (std::to_string(mb) + " MB").c_str(), bus(ours / 3), bus(raw / 3),
                  bus(ours / 3) / bus(raw / 3));
    }
  }
  comm.reset();
  gtrain::MpiCommunicator::finalize();
  return 0;
}
