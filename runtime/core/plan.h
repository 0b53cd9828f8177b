// plan.h: Plan, the parallel layout the planner chose for one job (runtime/core/parallel_layout.h)
// with where it runs and what it is estimated to cost.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/core/parallel_layout.h"

namespace gtrain {

struct Plan : ParallelLayout {
  int64_t world = 1;    // ranks in the job (dp * tp * pp once validated)
  int64_t granted = 0;  // ranks granted: more than world when the plan leaves some idle (0 = world)
  std::string precision = "fp32";
  int64_t nodes = 1;                   // nodes the ranks span
  int64_t gpus_per_node = 1;           // ranks per node
  int64_t requested_global_batch = 0;  // train.global_batch when a tolerance changed it (0 = kept)
  std::string profile;                 // hardware profile the estimates assume
  double est_memory_bytes = 0;         // per rank
  double est_tensor_bytes = 0;         // per rank, tensors only (comparable to torch's max allocated)
  double est_step_seconds = 0;         // per optimizer step (global batch)
  double flops_per_step = 0;           // model FLOPs of one optimizer step (forward + backward, no recompute)
  double peak_flops = 0;               // the devices' peak FLOP/s together (GPU: x GPUs; CPU: the host's x hosts)
  std::string reason;                  // why the planner chose it

  // "dp=2 tp=1 pp=1 zero=0 micro_batch=16 grad_accum=2 ...", with " shares 11, 11, 10" when uneven
  std::string summary() const;
  // Granted ranks the plan leaves idle (faster on fewer: the planner says why in `reason`).
  int64_t idle_ranks() const { return granted > world ? granted - world : 0; }
  std::string estimate_summary() const;  // "est 3.21 GiB/rank, 0.512 s/step"
};

}  // namespace gtrain
