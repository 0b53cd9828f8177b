// sweep_runner.h: `gtrain sweep`'s loop: the trials of a sweep file as `gtrain run` stages on a pool
// of ranks (or GPUs), each paused at its rungs (schedule.stop_at_step) and promoted, stopped or run on
// by asha.h's decisions, the ledger (sweep_ledger.h) written after every change. A stop signal
// (TERM, INT, USR1) asks the running trials to save and stop, records them paused and exits 3: the
// same command continues, on any number of ranks.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

namespace gtrain {

struct Allocation;

struct SweepRunOptions {
  std::string sweep_file;         // the sweep file
  std::string dir;                // the sweep directory ("" = <log.root>/<the file's stem>)
  std::vector<std::string> sets;  // --set: for the job of every trial
  int64_t ranks = 0;              // --ranks: the pool (0 = the granted GPUs, or 1 CPU rank)
  bool quiet = false;             // --quiet: only errors and the final line
  double time_limit_s = 0;        // --time-limit: the sweep ends by then, its trials saved (0 = none)
  std::string executable;         // the gtrain that runs each trial ("" = this program)
  // Whether the job's planner finds a layout on N ranks (GPUs): sweep.gpus_per_trial = 0 takes the
  // fewest N, 1, 2, 4, ..., that fits (unset: 1).
  std::function<bool(int64_t)> fits;
};

// The ranks (GPUs) each trial runs on: sweep.gpus_per_trial, else the fewest of 1, 2, 4, ... up to
// `pool` that `fits` (nullopt-like 0: none fits).
int64_t ranks_per_trial(int64_t gpus_per_trial, int64_t pool, const std::function<bool(int64_t)>& fits);

// One place a trial runs: some of this machine's GPUs, or GPUs of other nodes of the grant.
struct TrialPlace {
  std::string devices;  // CUDA_VISIBLE_DEVICES for the trial ("" = leave it)
  std::string include;  // the trial's `gtrain run --include` ("" = none: a single-node grant)
  std::string where;    // for the console: "2 rank(s)", "GPU 0,1", "node2 GPU 0,1", "node1@node2"
};

// The places for trials of `per_trial` GPUs on the grant `a` (its first `limit` GPUs, this node's
// first; 0 = all): several within a node while a node has that many, else runs of whole nodes. On a
// single-node grant a place is a CUDA_VISIBLE_DEVICES (this process's entries, which may be UUIDs);
// on several nodes a `--include` that has the trial's gtrain run start its ranks there.
// `busiest_node_ranks` (when given) gets the most trial ranks one node runs at once.
std::vector<TrialPlace> trial_places(const Allocation& a, const std::map<std::string, std::string>& env, int64_t limit,
                                     int64_t per_trial, int64_t* busiest_node_ranks = nullptr);

// Runs (or continues) the sweep. Returns the exit code: 0 = finished, 3 = stopped by a signal or
// its time limit with its trials saved (run the same command to continue), 1 = max_failures reached. Throws ConfigError
// for a bad sweep file, or a directory holding another sweep.
int run_sweep(const SweepRunOptions& o, const std::map<std::string, std::string>& env);

// The sweep directory `o` names (its --dir, else from the sweep file's job).
std::string sweep_directory(const SweepRunOptions& o, const std::map<std::string, std::string>& env);

}  // namespace gtrain
