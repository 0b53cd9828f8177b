// plan.h: Plan, the validated parallel layout of one job (a ParallelDims-like value):
// dp x tp x pp ranks, ZeRO stage, micro-batch and gradient accumulation, with estimates.
#pragma once

#include <cstdint>
#include <string>

namespace gtrain {

struct Plan {
  int64_t world = 1;        // ranks in the job
  int64_t dp = 1;           // data-parallel replicas
  int64_t tp = 1;           // tensor-parallel ranks per replica
  int64_t pp = 1;           // pipeline stages per replica
  int64_t zero = 0;         // ZeRO stage on the dp dimension (0, 1, 2)
  int64_t micro_batch = 1;  // samples per rank per forward/backward
  int64_t grad_accum = 1;   // micro-batches per optimizer step on each rank
  bool recompute = false;   // activation recompute per block
  std::string precision = "fp32";
  int64_t nodes = 1;                   // nodes the ranks span
  int64_t gpus_per_node = 1;           // ranks per node
  int64_t requested_global_batch = 0;  // train.global_batch when a tolerance changed it (0 = kept)
  std::string profile;                 // hardware profile the estimates assume
  double est_memory_bytes = 0;         // per rank
  double est_tensor_bytes = 0;         // per rank, tensors only (comparable to torch's max allocated)
  double est_step_seconds = 0;         // per optimizer step (global batch)
  std::string reason;                  // why the planner chose it

  int64_t global_batch() const { return dp * micro_batch * grad_accum; }

  // Throws ConfigError listing every factor when world != dp*tp*pp or the batch does not compose.
  void validate(int64_t expected_world, int64_t expected_global_batch) const;
  std::string summary() const;           // "dp=2 tp=1 pp=1 zero=0 micro_batch=16 accum=2 ..."
  std::string estimate_summary() const;  // "est 3.21 GiB/rank, 0.512 s/step"
};

}  // namespace gtrain
