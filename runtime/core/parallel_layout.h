// parallel_layout.h: ParallelLayout, the one set of parallel factors of a job (dp x tp x pp ranks,
// ZeRO stage, micro-batch, gradient accumulation, recompute, pipeline schedule), validated in one
// place with an error naming every factor, and the rank arithmetic over it.
//
// Rank order (Megatron): tp varies fastest, so a tensor-parallel group is adjacent ranks;
//   rank = (dp_index * pp + pp_index) * tp + tp_index.
#pragma once

#include <cstdint>
#include <string>

namespace gtrain {

struct ParallelLayout {
  int64_t dp = 1;           // data-parallel replicas
  int64_t tp = 1;           // tensor-parallel ranks per replica
  int64_t pp = 1;           // pipeline stages per replica
  int64_t zero = 0;         // ZeRO stage on the dp dimension (0, 1, 2)
  int64_t micro_batch = 1;  // samples per rank per forward/backward
  int64_t grad_accum = 1;   // micro-batches per optimizer step on each rank
  bool recompute = false;   // activation recompute per block
  bool gpipe = false;       // pipeline schedule: GPipe (every micro-batch in flight) instead of 1F1B

  int64_t ranks() const { return dp * tp * pp; }
  int64_t global_batch() const { return dp * micro_batch * grad_accum; }

  // Throws ConfigError listing every factor when a factor is < 1, dp*tp*pp != `world`,
  // dp*micro_batch*grad_accum != `global_batch`, or zero is not 0, 1 or 2.
  void validate(int64_t world, int64_t global_batch) const;
  // "dp=2 tp=1 pp=1 (dp*tp*pp=2), world=2; micro_batch=16 grad_accum=2 (...=64), global_batch=64"
  std::string factors(int64_t world, int64_t global_batch) const;

  int64_t dp_index(int64_t rank) const { return rank / (tp * pp); }
  int64_t pp_index(int64_t rank) const { return (rank / tp) % pp; }
  int64_t tp_index(int64_t rank) const { return rank % tp; }
  int64_t rank_of(int64_t dp_idx, int64_t pp_idx, int64_t tp_idx) const { return (dp_idx * pp + pp_idx) * tp + tp_idx; }
};

}  // namespace gtrain
