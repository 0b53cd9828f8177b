// thread_choice.cpp: timing the first training steps at a few intra-op thread counts.
#include "runtime/train/thread_choice.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>

#include "runtime/comm/communicator.h"
#include "runtime/common/torch_threads.h"

namespace gtrain {
namespace {

constexpr double kWithin = 1.05;   // fewer threads win when this close to the fastest
constexpr double kHopeless = 1.5;  // a count this much slower than an earlier one stops being timed

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
  // The first step at a count settles its pool (threads started, caches warm): not timed.
  if (step_in_count_++ == 0) return false;
  // Every rank decides from the same figures: the slowest rank's step.
  if (comm.size() > 1) {
    auto t = torch::tensor({seconds}, torch::kDouble);
    comm.allreduce(t, ReduceOp::kMax);
    seconds = t.item<double>();
  }
  // The mean, not the fastest, of the timed steps: spinning pools make steps bimodal (38 ms, then
  // 200 ms). A count already far slower than one tried before is not worth its remaining steps.
  seconds_here_ += seconds;
  const int timed = step_in_count_ - 1;
  const double mean = seconds_here_ / timed;
  const double best_before = index_ > 0 ? *std::min_element(best_.begin(), best_.begin() + index_) : 0.0;
  const bool hopeless = index_ > 0 && mean > kHopeless * best_before;
  if (timed < timed_steps_ && !hopeless) return false;
  best_[index_++] = mean;
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
