// step_profiler.h: StepProfiler, which records a few training steps with LibTorch's profiler and
// writes where their time went: per operator (host) and per GPU kernel, plus a Kineto trace.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gtrain {

// One row of a profile summary: all events of one name on one side (host op or GPU kernel).
struct ProfileRow {
  std::string name;
  int64_t calls = 0;
  double total_us = 0;
};

// A profile's summary: the top host operators and GPU kernels by total time, and the steps' wall time.
struct ProfileSummary {
  int64_t first_step = 0, last_step = 0;  // 1-based, inclusive
  double wall_us = 0;                     // the profiled steps, end to end
  double host_us = 0, gpu_us = 0;         // all host-op time (nested ops counted once each) and kernel time
  std::vector<ProfileRow> host, gpu;      // sorted by total time, longest first
  // Per device ("cpu", "cuda:0"): the most tensor bytes live at once beyond those live when the
  // profile began (activations and temporaries; parameters and optimizer state were live already).
  std::map<std::string, double> peak_tensor_bytes;
  std::string trace;  // the Kineto trace written beside it ("" = none: no Kineto here)
  nlohmann::json to_json() const;
  std::string to_text(size_t rows = 25) const;
};

// Profiles steps [start, start + count) (1-based) of one rank. start = 0 disables it.
class StepProfiler {
 public:
  // `dir`: where the summary (profile-rank<r>.txt / .json) and the trace go ("" = nowhere: off).
  StepProfiler(int64_t start, int64_t count, std::string dir, int rank, bool cuda);
  ~StepProfiler();
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  // Around each training step (`step` = the 1-based number of the step about to run / just run).
  void before_step(int64_t step);
  // A line for the console once the last profiled step is done (or the stage ends, `stage_ends`,
  // inside the profiled steps: the profile of those done is written), or when profiling failed
  // (which never stops training); "" otherwise.
  std::string after_step(int64_t step, bool stage_ends = false);
  bool active() const { return active_; }

 private:
  ProfileSummary stop(int64_t last_step);
  int64_t start_, count_;
  std::string dir_;
  int rank_;
  bool cuda_;
  bool active_ = false;
  double t0_us_ = 0;
  std::string failure_;  // why the profiler did not start, reported once
};

}  // namespace gtrain
