// torch_threads.cpp: torch intra/inter-op and OpenBLAS thread counts.
#include "runtime/common/torch_threads.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>

#include <ATen/Parallel.h>

namespace gtrain {

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

}  // namespace gtrain
