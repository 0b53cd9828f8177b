// torch_threads.h: sizing torch's (and OpenBLAS's) thread pools for the ranks sharing a machine.
#pragma once

#include <cstdint>

namespace gtrain {

// Sets torch intra-op threads (`threads` > 0) or cores / local_ranks, and one inter-op thread.
// Returns the intra-op thread count in use.
int set_torch_threads(int64_t threads, int local_ranks);

}  // namespace gtrain
