// sampler.cpp: deterministic sample order and the micro-batch layout of a global batch.
#include "runtime/data/sampler.h"

#include <numeric>

#include "runtime/core/errors.h"
#include "runtime/data/rng.h"

namespace gtrain {

SampleOrder::SampleOrder(int64_t dataset_size, uint64_t seed, bool random_windows)
    : size_(dataset_size), seed_(seed), random_(random_windows) {
  GT_CHECK(size_ > 0, "SampleOrder: empty dataset");
}

const std::vector<int64_t>& SampleOrder::permutation(int64_t epoch) const {
  // Caller holds mu_. Two slots: the current epoch and the next (batches straddle epochs).
  for (int s = 0; s < 2; ++s) {
    if (cached_epoch_[s] == epoch) return cached_[s];
  }
  int slot = (cached_epoch_[0] < cached_epoch_[1]) ? 0 : 1;
  auto& p = cached_[slot];
  p.resize(static_cast<size_t>(size_));
  std::iota(p.begin(), p.end(), int64_t{0});
  rng::Stream s(rng::hash(seed_, 0xe90c, static_cast<uint64_t>(epoch)));
  for (int64_t i = size_ - 1; i > 0; --i) {  // Fisher-Yates
    int64_t j = static_cast<int64_t>(s.below(static_cast<uint64_t>(i + 1)));
    std::swap(p[i], p[j]);
  }
  cached_epoch_[slot] = epoch;
  return p;
}

int64_t SampleOrder::dataset_index(int64_t g) const {
  if (random_) return static_cast<int64_t>(rng::hash(seed_, 0x3d0, static_cast<uint64_t>(g)) % size_);
  std::lock_guard<std::mutex> lock(mu_);
  return permutation(g / size_)[static_cast<size_t>(g % size_)];
}

int64_t first_sample(const ParallelLayout& l, int64_t step, int64_t dp_rank, int64_t micro_step) {
  return step * l.global_batch() + l.micro_batch_offset(dp_rank, micro_step);
}

std::vector<int64_t> micro_batch_indices(const SampleOrder& order, const ParallelLayout& l, int64_t step,
                                         int64_t dp_rank, int64_t micro_step) {
  const int64_t g0 = first_sample(l, step, dp_rank, micro_step);
  const int64_t n = l.micro_batch_size(dp_rank, micro_step);
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = order.dataset_index(g0 + i);
  return idx;
}

}  // namespace gtrain
