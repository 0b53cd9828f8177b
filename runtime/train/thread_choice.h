// thread_choice.h: train.threads = 0 (auto) on CPU ranks: the intra-op thread count a rank trains
// fastest with, measured on the stage's first training steps rather than assumed from the cores
// (OpenMP's spinning pool, OpenBLAS's and the data workers can make the cores' share several times
// slower than one thread).
#pragma once

#include <string>
#include <vector>

namespace gtrain {

class Communicator;

// The counts worth trying up to `most`: 1, 2, 4, ... and `most` itself (at most 6 of them).
std::vector<int> thread_candidates(int most);

// Runs the stage's first steps at each candidate count in turn (one step to settle, then
// `timed_steps` timed, their mean counting), then keeps the fastest, or fewer threads when within 5%
// of it; a count whose steps are already 1.5x slower than an earlier count's is dropped early. The
// slowest rank's time counts (an allreduce after each timed step), so every rank decides alike.
// These are real training steps: nothing is spent but the slower counts' extra time.
class ThreadTuner {
 public:
  ThreadTuner(int most, int local_ranks, int timed_steps = 4);
  bool active() const { return index_ < counts_.size(); }
  // The count the next step runs at (set_torch_threads), while measuring.
  void before_step();
  // The step's seconds; true once the choice is made (the chosen count is then set).
  bool after_step(double seconds, Communicator& comm);
  int chosen() const { return chosen_; }
  // "1 thread(s): 31.2 ms, 2: 95.0 ms" (mean step times), "" before the choice.
  const std::string& measured() const { return measured_; }

 private:
  std::vector<int> counts_;
  std::vector<double> best_;
  int local_ranks_;
  int timed_steps_;
  size_t index_ = 0;
  int step_in_count_ = 0;    // steps run at counts_[index_]
  double seconds_here_ = 0;  // the timed steps' seconds at counts_[index_]
  int chosen_ = 0;
  std::string measured_;
};

}  // namespace gtrain
