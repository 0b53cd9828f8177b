// sweep_command.cpp: `gtrain sweep`: the search run or continued, its outcome, the best trial.
#include "launcher/commands/sweep_command.h"

#include <filesystem>
#include <fstream>
#include <iostream>

#include "launcher/sweep/sweep_ledger.h"
#include "launcher/sweep/sweep_runner.h"
#include "runtime/core/errors.h"
#include "runtime/core/format.h"

namespace fs = std::filesystem;

namespace gtrain {

std::string best_trial_toml(const std::string& sweep_dir, const std::vector<std::string>& sets) {
  const auto l = read_sweep_ledger(sweep_dir);
  if (!l || l->best < 0) return "";
  const TrialRecord& t = l->trials[static_cast<size_t>(l->best)];
  std::vector<std::string> with = sets;
  std::string values;
  for (const auto& [k, v] : t.params) {
    with.push_back(set_argument(k, v));
    values += (values.empty() ? "" : ", ") + k + " = " + v.dump();
  }
  int64_t rung = -1;
  for (size_t k = 0; k < t.results.size(); ++k) {
    if (t.results[k]) rung = static_cast<int64_t>(k);
  }
  const JobConfig job = load_job_config(l->sweep_file, with, process_environment());
  std::string out = "# gtrain sweep " + sweep_dir + ": best trial " + t.name() + " (" + values + "), " + l->metric +
                    " " + strf("%.6g", *t.results[static_cast<size_t>(rung)]) + " at step " +
                    std::to_string(l->rungs[static_cast<size_t>(rung)].steps) + (l->finished ? "" : " (sweep not finished)") +
                    "\n";
  return out + to_toml(job);
}

int sweep_command(const SweepCommandOptions& o) {
  const auto env = process_environment();
  SweepRunOptions r;
  r.sweep_file = o.file, r.dir = o.dir, r.sets = o.sets, r.ranks = o.ranks, r.quiet = o.quiet;
  const std::string dir = sweep_directory(r, env);
  if (o.best) {
    const std::string toml = best_trial_toml(dir, o.sets);
    if (toml.empty()) {
      throw ConfigError(dir + ": no trial of this sweep has a result yet", "run gtrain sweep " + o.file + " first");
    }
    std::cout << toml;
    return 0;
  }
  const int code = run_sweep(r, env);
  const auto l = read_sweep_ledger(dir);
  if (!l) return code;
  const std::string best = best_trial_toml(dir, o.sets);
  if (!best.empty()) {
    std::ofstream((fs::path(dir) / "best.toml").string()) << best;
  }
  int64_t done = 0, stopped = 0, failed = 0;
  for (const auto& t : l->trials) {
    done += t.state == TrialState::done, stopped += t.state == TrialState::stopped, failed += t.state == TrialState::failed;
  }
  std::cout << "gtrain sweep: " << dir << ": " << l->trials.size() << " trials, " << done << " done, " << stopped
            << " stopped early, " << failed << " failed, " << l->promotions.size() << " promotions";
  if (l->best >= 0) std::cout << "; best " << l->trials[static_cast<size_t>(l->best)].name() << " (best.toml)";
  std::cout << (code == kExitResumable ? "; paused: run the same command to continue" : "") << std::endl;
  return code;
}

}  // namespace gtrain
