// sampler.h: which samples form global batch k, as a pure function of (seed, k), and which part
// of it each data-parallel rank takes at each micro-step.
//
// Global sample g (0, 1, 2, ... over the whole run) maps to a dataset index: a per-epoch
// permutation for finite datasets, a hashed random window for token streams. Global batch k is
// g in [k*B, (k+1)*B). With dp ranks, micro-batch m and accumulation a (dp*m*a == B), rank r at
// micro-step i takes g = k*B + (i*dp + r)*m + [0, m). When dp does not split B evenly
// (ParallelLayout::micro_batch_offset), micro-step i still holds every replica's i-th micro-batch
// in replica order, each of its own size. The union over (r, i) is the whole batch for any dp, m
// and a, so a run resumed on another world size sees exactly the same samples.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/core/parallel_layout.h"

namespace gtrain {

class SampleOrder {
 public:
  SampleOrder(int64_t dataset_size, uint64_t seed, bool random_windows);
  int64_t dataset_index(int64_t global_sample) const;
  int64_t dataset_size() const { return size_; }

 private:
  const std::vector<int64_t>& permutation(int64_t epoch) const;
  int64_t size_;
  uint64_t seed_;
  bool random_;
  mutable std::mutex mu_;
  mutable int64_t cached_epoch_[2] = {-1, -1};
  mutable std::vector<int64_t> cached_[2];
};

// First global sample index of (step, dp rank, micro-step).
int64_t first_sample(const ParallelLayout& l, int64_t step, int64_t dp_rank, int64_t micro_step);

// Dataset indices of that micro-batch.
std::vector<int64_t> micro_batch_indices(const SampleOrder& order, const ParallelLayout& l, int64_t step,
                                         int64_t dp_rank, int64_t micro_step);

}  // namespace gtrain
