// stop_policy.h: when a stage stops early, saving first (torch-free). Each rank looks at what it can
// see: a stop signal it received; on rank 0 also the launcher's stop file and the deadline, which
// ends the stage early enough to take the next step and save before it. The ranks then agree on the
// strongest code (the trainer's max all-reduce), so every rank stops at the same step.
#pragma once

#include <string>

namespace gtrain {

class StopPolicy {
 public:
  struct Settings {
    std::string stop_file;        // the launcher writes "signal N" into it on a stop signal ("" = none)
    double deadline_unix = 0;     // stop early enough to save before this (0 = none)
    std::string deadline_source;  // "slurm end time", "--time-limit", "quota window"
    double save_safety = 2.0;     // schedule.save_safety: the lead counts this many longest saves
    double min_lead_s = 5.0;      // schedule.min_lead_s: and this many seconds more
  };
  // Codes, ordered by strength (the ranks agree on the largest).
  enum Code : int { kGoOn = 0, kSignal = 1, kDeadline = 2 };
  struct Decision {
    int code = kGoOn;
    std::string reason;  // "signal 15", the stop file's line, "deadline (--time-limit)"
    std::string detail;  // a deadline's: the time left and the lead it keeps ("" otherwise)
    int signal = 0;      // kSignal: the signal's number (0: not known)
  };

  StopPolicy(Settings settings, bool main_rank) : s_(std::move(settings)), main_rank_(main_rank) {}

  // This rank's view after a step of `last_step_s` seconds, `signal` being the stop signal received
  // (0 = none) and `longest_save_s` the longest save so far. Before the first step
  // (before_first_step) only a deadline already past counts: every stage that starts in time makes
  // progress (one step and a save) however short its limit.
  Decision decide(int signal, double now_unix, double last_step_s, double longest_save_s,
                  bool before_first_step = false) const;
  // What this rank reports once the ranks agreed on `agreed` (the largest code): "" = go on; its own
  // reason when it agrees, else the other ranks' (`agreed_signal`: the signal another rank got).
  std::string agreed_reason(const Decision& mine, int agreed, int agreed_signal = 0) const;

 private:
  Settings s_;
  bool main_rank_;
};

// Before a stage starts: why it should not, when its first step, estimated at `est_step_s`
// seconds, and one save of `save_s` (at least 1 s, StopPolicy's floor) do not fit in the `left_s`
// seconds before its deadline (`source`): it would end without a checkpoint, however often it is
// started again. "" when they fit, or when the estimate or the deadline is unknown (<= 0). The
// trainer's own lead (save_safety, min_lead_s) is not counted: a stage that fits one step and a
// save stops after them and saves (StopPolicy::decide), progress however short its limit.
std::string first_step_cannot_fit(double est_step_s, double save_s, double left_s, const std::string& source);

}  // namespace gtrain
