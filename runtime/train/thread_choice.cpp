// thread_choice.cpp: timing the first training steps at a few intra-op thread counts.
#include "runtime/train/thread_choice.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>

#include "runtime/comm/communicator.h"
#include "runtime/common/torch_threads.h"

namespace gtrain {
namespace {

constexpr double kWithin = 1.05;  // fewer threads win when this close to the fastest

std::string ms(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f ms", s * 1e3);
  return buf;
}

}  // namespace

std::vector<int> thread_candidates(int most) {
  most = std::max(1, most);
  std::vector<int> out;
  for (int n = 1; n < most && out.size() < 5; n *= 2) out.push_back(n);
  out.push_back(most);
  return out;
}

ThreadTuner::ThreadTuner(int most, int local_ranks, int timed_steps)
    : counts_(thread_candidates(most)), local_ranks_(local_ranks), timed_steps_(std::max(1, timed_steps)) {
  best_.assign(counts_.size(), 0.0);
  chosen_ = counts_.back();
  if (counts_.size() == 1) index_ = counts_.size();  // one core a rank: nothing to choose
}

void ThreadTuner::before_step() {
  if (active() && step_in_count_ == 0) set_torch_threads(counts_[index_], local_ranks_);
}

bool ThreadTuner::after_step(double seconds, Communicator& comm) {
  if (!active()) return false;
  // The first step at a count settles its pool (threads started, caches warm): not timed. The
  // mean, not the fastest, of the rest: spinning pools make steps bimodal (38 ms, then 200 ms).
  if (step_in_count_++ > 0) seconds_here_ += seconds;
  if (step_in_count_ <= timed_steps_) return false;
  double slowest = seconds_here_ / timed_steps_;
  if (comm.size() > 1) {
    auto t = torch::tensor({slowest}, torch::kDouble);
    comm.allreduce(t, ReduceOp::kMax);
    slowest = t.item<double>();
  }
  best_[index_++] = slowest;
  step_in_count_ = 0;
  seconds_here_ = 0;
  if (active()) return false;
  const double fastest = *std::min_element(best_.begin(), best_.end());
  size_t pick = 0;
  while (best_[pick] > fastest * kWithin) ++pick;
  chosen_ = set_torch_threads(counts_[pick], local_ranks_);
  measured_.clear();
  for (size_t i = 0; i < counts_.size(); ++i)
    measured_ += (i ? ", " : "") + std::to_string(counts_[i]) + (i ? ": " : " thread(s): ") + ms(best_[i]);
  return true;
}

}  // namespace gtrain
