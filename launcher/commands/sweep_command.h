// sweep_command.h: `gtrain sweep SWEEP.toml`: runs or continues a hyper-parameter search
// (launcher/sweep/), prints its outcome, and with --best the best trial's job as TOML.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace gtrain {

struct SweepCommandOptions {
  std::string file;               // the sweep file (a job config plus [search], [sweep])
  std::string dir;                // --dir: the sweep directory
  std::vector<std::string> sets;  // --set, for every trial's job
  int64_t ranks = 0;              // --ranks: the pool (0 = the granted GPUs, or one CPU rank)
  bool quiet = false;             // --quiet
  bool best = false;              // --best: print the best trial's job (no training)
  std::string time_limit;         // --time-limit: the sweep's wall time (its trials saved by then)
  bool preview = false;           // --preview: rungs, runs, trial-steps, rank-hours and finish (no training)
};

int sweep_command(const SweepCommandOptions& o);

// `gtrain sweep SWEEP.toml --preview`: the rungs (steps, trials), the runs and trial-steps, the
// planner's layout and step time for one trial, the rank-hours (GPU-hours) of steps, the wall time
// with the pool's trials side by side, and with the file's [[schedule.window]] when it finishes.
void print_sweep_preview(const SweepCommandOptions& o, std::ostream& out);

// Whether `dir` is a sweep directory (it has a sweep ledger).
bool is_sweep_dir(const std::string& dir);

// `gtrain status SWEEP_DIR`: the search, its counts, the best trial and a table of every trial
// (state, rung, steps, metric, runs, rank-seconds, values); --json: the ledger with those counts.
void print_sweep_status(const std::string& dir, bool json, std::ostream& out);

// The best trial's job as a ready TOML: a header naming the trial and its result, then the sweep
// file's job with the trial's values set (every key resolved). "" when no trial has a result yet.
std::string best_trial_toml(const std::string& sweep_dir, const std::vector<std::string>& sets);

}  // namespace gtrain
