// search_space.h: a sweep file's [search] and [sweep] tables (`gtrain sweep`): the method, the
// space of config keys and how each is drawn, the metric, ASHA's rungs and how trials share the
// ranks; and the trial list each method makes from its seed alone.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/core/config/job_config.h"

namespace gtrain {

// One key of [search.space]: "optimizer.learning_rate" = { log_uniform = [1e-4, 1e-1] }.
struct SearchDimension {
  enum class Kind { choice, uniform, log_uniform, integer };
  std::string key;                      // a job config key, "section.key"
  Kind kind = Kind::choice;             // how values are drawn
  std::vector<nlohmann::json> choices;  // choice: the values (numbers, strings, booleans)
  double lo = 0, hi = 0;                // uniform / log_uniform: [lo, hi); integer: lo..hi inclusive
};

struct SearchConfig {
  std::string method = "random";       // grid | random | asha
  int64_t trials = 0;                  // random / asha: trials drawn (grid: every combination)
  std::string metric = "eval_loss";    // eval_loss | eval_accuracy | train_loss, at a rung's last step
  std::string mode = "min";            // min | max: which way is better
  uint64_t seed = 0;                   // the draws (random, asha)
  int64_t eta = 3;                     // asha: 1 / eta of a rung's trials go on to the next
  int64_t min_steps = 0;               // asha: the first rung's steps (0 = max_steps / eta^3, at least 1)
  int64_t max_steps = 0;               // the last rung's (0 = train.steps)
  std::vector<SearchDimension> space;  // in key order
};

struct SweepOptions {
  int64_t gpus_per_trial = 0;  // GPUs (CPU ranks without GPUs) a trial runs on (0 = the fewest its plan fits)
  int64_t trials_per_gpu = 1;  // trials side by side on one GPU (processes sharing it)
  int64_t max_failures = 3;    // failed trials after which the sweep stops (0 = no limit)
};

struct SweepFile {
  std::string path;  // the sweep file
  JobConfig base;    // its job, as `gtrain run` reads it (with the command's --set)
  SearchConfig search;
  SweepOptions sweep;
};

// Reads `path`: the job (every `gtrain run` key, with `sets` and `env` applied) and its [search] and
// [sweep] tables. ConfigError naming the file, line and key for a table or value that is wrong: a
// space key that is not a job config key or whose values the job refuses, an empty range, eta < 2.
SweepFile load_sweep_file(const std::string& path, const std::vector<std::string>& sets,
                          const std::map<std::string, std::string>& env);

// One trial: its number and the value of each space key.
struct TrialSpec {
  int64_t id = 0;
  std::vector<std::pair<std::string, nlohmann::json>> params;  // in the space's key order
};

// Every trial of the search, from the configuration alone: grid = the product of the choices (an
// integer range counts as its values), in key order with the last key varying fastest; random and
// asha = `trials` draws from a Mersenne Twister seeded by `seed` (the same on every machine).
std::vector<TrialSpec> make_trials(const SearchConfig& search);

// "key=value" for `gtrain run --set`, the value as a TOML literal (strings quoted, numbers exact).
std::string set_argument(const std::string& key, const nlohmann::json& value);

}  // namespace gtrain
