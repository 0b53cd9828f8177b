// runs_command.h: `gtrain runs [DIR...]` lists the runs in run directories (identity, status,
// stages, steps, best eval loss, GPU-hours, where; a run repeating a finished one is marked), and
// `gtrain runs diff A B` shows what differs between two runs' identities (torch-free).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gtrain {

struct RunsOptions {
  std::vector<std::string> dirs;  // run directories, or folders of them ("" = runs/, log.root's default)
  bool json = false;              // one JSON array instead of the table
};

// One run directory as `gtrain runs` lists it.
struct RunRow {
  std::string dir;
  std::string id;      // identity.json's id ("" = none: a run of an older gtrain, or one never started)
  std::string status;  // complete | running | stopped (resumable) | failed | new
  int stages = 0;      // stages.jsonl's, plus those only metrics.jsonl shows
  int64_t step = 0, total_steps = 0;
  std::optional<double> best_eval;  // the lowest eval loss recorded
  double unit_hours = 0;            // GPU-hours (CPU runs: rank-hours)
  bool gpus = false;                // unit_hours are GPU-hours
  std::string repeats;              // a finished run listed before it with the same identity ("" = none)
  nlohmann::json to_json() const;
};

// The row of one run directory; `running` whether a gtrain holds it now.
RunRow summarize_run(const std::string& dir, bool running);

// The run directories `dirs` name (each a run directory or a folder holding some), in order.
std::vector<std::string> find_run_dirs(const std::vector<std::string>& dirs);

// `gtrain runs`: prints the table (or JSON); ConfigError (exit 2) naming a DIR that is neither.
int run_runs_command(const RunsOptions& o);

// `gtrain runs diff A B`: one line per difference of the two identities; ConfigError (exit 2) for a
// directory with no identity.json.
int run_runs_diff_command(const std::string& a, const std::string& b);

}  // namespace gtrain
