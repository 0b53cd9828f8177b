// sweep_ledger.h: a sweep directory's files and its one ledger, sweep.json: the search (method,
// metric, rungs), every trial (its config values, state, results per rung, rank-seconds, failure)
// and the promotions in the order they were made. Written whole through a rename after every
// change, so a sweep killed at any moment continues from the last decision it recorded; a trial
// caught running is its own checkpoint (its run directory) and simply runs again.
//
// SWEEP_DIR/sweep.json        the ledger (SweepLedger)
// SWEEP_DIR/trials/tNNN/      each trial's run directory (`gtrain run` resumes it)
// SWEEP_DIR/logs/tNNN.log     each trial's console output, appended stage after stage
// SWEEP_DIR/best.toml         the best trial's job: the sweep file's job with its values set
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/sweep/asha.h"
#include "launcher/sweep/search_space.h"

namespace gtrain {

enum class TrialState {
  pending,  // not started
  running,  // a `gtrain run` of it is under way (or was, when the sweep stopped)
  paused,   // at a rung, its checkpoint saved: waiting for the rung's ranking, or for ranks
  stopped,  // out of the search at its rung
  done,     // reached the last rung
  failed,   // its run failed; `failure` says why
};
const char* name_of(TrialState s);

struct TrialRecord {
  int64_t id = 0;
  std::vector<std::pair<std::string, nlohmann::json>> params;  // its space values
  TrialState state = TrialState::pending;
  std::vector<std::optional<double>> results;  // the metric at each rung reached
  int64_t steps = 0;                           // the steps its run directory holds
  int64_t target_rung = 0;                     // the rung it runs (or last ran) towards
  double rank_seconds = 0;                     // ranks x wall seconds of its runs
  double pause_rank_seconds = 0;               // of them, its runs' start-up and save (pause and resume)
  int64_t runs = 0;                            // `gtrain run` stages it took
  std::string failure;                         // why it failed ("" = it did not)
  std::string name() const;                    // "t007"
  int64_t reached_rung() const { return highest_rung(results); }  // -1 = no result yet
  std::string reached_result() const;  // its metric at that rung as tables show it ("%.6g"; "-" = none)
};

struct Promotion {
  int64_t trial = 0;
  int64_t to_rung = 0;
};

struct SweepLedger {
  int version = 1;
  std::string sweep_file;  // absolute path of the sweep file
  std::string method, metric, mode;
  int64_t eta = 3;
  std::vector<Rung> rungs;
  std::vector<TrialRecord> trials;
  std::vector<Promotion> promotions;  // in the order made
  int64_t failures = 0;
  int64_t best = -1;        // the best trial so far (-1 = none)
  bool finished = false;    // every trial stopped, done or failed (or max_failures reached)
  std::string stop_reason;  // why the sweep ended early ("" = it did not)

  nlohmann::json to_json() const;
  static SweepLedger from_json(const nlohmann::json& j, const std::string& path);

  // The trials' results as asha.h takes them.
  std::vector<TrialResults> results() const;

  // What the sweep's status, report and last line say of it as a whole.
  struct Totals {
    std::map<std::string, int64_t> counts;  // trials by state name (every state present, 0 or more)
    double rank_s = 0;                      // rank-seconds of every trial's runs
    double outside_s = 0;                   // of them outside training steps (start-up, resume, saves)
  };
  Totals totals() const;
  // "1/3/9/27 steps holding 27, 9, 3, 1": the rungs' lengths and sizes.
  std::string rungs_text() const;
};

// A fresh ledger for `f`'s search: its trials (make_trials) all pending.
SweepLedger new_ledger(const SweepFile& f);

std::string sweep_ledger_path(const std::string& sweep_dir);
std::string trial_run_dir(const std::string& sweep_dir, const TrialRecord& t);
std::string trial_log_path(const std::string& sweep_dir, const TrialRecord& t);

// The ledger in `sweep_dir`, or nullopt when there is none. ConfigError naming the file when it is
// not one (damaged, or another program's).
std::optional<SweepLedger> read_sweep_ledger(const std::string& sweep_dir);
void write_sweep_ledger(const std::string& sweep_dir, const SweepLedger& l);

}  // namespace gtrain
