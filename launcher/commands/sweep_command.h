// sweep_command.h: `gtrain sweep SWEEP.toml`: runs or continues a hyper-parameter search
// (launcher/sweep/), prints its outcome, and with --best the best trial's job as TOML.
#pragma once

#include <cstdint>
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
};

int sweep_command(const SweepCommandOptions& o);

// The best trial's job as a ready TOML: a header naming the trial and its result, then the sweep
// file's job with the trial's values set (every key resolved). "" when no trial has a result yet.
std::string best_trial_toml(const std::string& sweep_dir, const std::vector<std::string>& sets);

}  // namespace gtrain
