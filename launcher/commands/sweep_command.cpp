// sweep_command.cpp: `gtrain sweep`: the search run or continued, its outcome, the best trial.
#include "launcher/commands/sweep_command.h"

#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include "launcher/chain/window_calendar.h"
#include "launcher/commands/plan_command.h"
#include "launcher/sweep/sweep_ledger.h"
#include "launcher/sweep/sweep_runner.h"
#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/core/schedule.h"

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
  const int64_t rung = t.reached_rung();
  const JobConfig job = load_job_config(l->sweep_file, with, process_environment());
  std::string out = "# gtrain sweep " + sweep_dir + ": best trial " + t.name() + " (" + values + "), " + l->metric +
                    " " + strf("%.6g", *t.results[static_cast<size_t>(rung)]) + " at step " +
                    std::to_string(l->rungs[static_cast<size_t>(rung)].steps) +
                    (l->finished ? "" : " (sweep not finished)") + "\n";
  return out + to_toml(job);
}

namespace {

// Whether the planner finds a layout for the sweep file's job on N ranks (GPUs) here.
std::function<bool(int64_t)> plan_fits(const std::string& file, const std::vector<std::string>& sets,
                                       const std::map<std::string, std::string>& env) {
  return [file, sets, env](int64_t n) {
    PlanOptions po;
    po.config_path = file, po.sets = sets, po.ranks = static_cast<int>(n), po.runnable = true;
    return plan_config(po, env).has_value();
  };
}

}  // namespace

void print_sweep_preview(const SweepCommandOptions& o, std::ostream& out) {
  const auto env = process_environment();
  const SweepFile f = load_sweep_file(o.file, o.sets, env);
  const SweepLedger l = new_ledger(f);
  const int64_t per_trial = std::max<int64_t>(
      1, ranks_per_trial(f.sweep.gpus_per_trial, std::max<int64_t>(1, o.ranks), plan_fits(o.file, o.sets, env)));
  const int64_t pool = std::max<int64_t>(o.ranks, per_trial);
  const int64_t slots = std::max<int64_t>(1, pool / per_trial * f.sweep.trials_per_gpu);
  out << "sweep preview: " << o.file << "  (" << l.method << ", " << l.trials.size() << " trials"
      << (l.method == "asha" ? ", eta " + std::to_string(l.eta) : "") << ", " << l.metric << " " << l.mode << ")\n";
  out << "  rung  steps  trials  steps each  trial-steps\n";
  int64_t runs = 0, trial_steps = 0, before = 0;
  for (size_t k = 0; k < l.rungs.size(); ++k) {
    const Rung& r = l.rungs[k];
    const int64_t each = r.steps - before;  // a promoted trial goes on from its last rung
    out << strf("  %-5zu %-6lld %-7lld %-11lld %lld\n", k, static_cast<long long>(r.steps),
                static_cast<long long>(r.size), static_cast<long long>(each), static_cast<long long>(each * r.size));
    runs += r.size, trial_steps += each * r.size, before = r.steps;
  }
  out << "  " << runs << " runs (" << runs - static_cast<int64_t>(l.trials.size())
      << " of them resume a paused trial), " << trial_steps << " trial-steps\n";
  PlanOptions po;
  po.config_path = o.file, po.sets = o.sets, po.ranks = static_cast<int>(per_trial), po.runnable = true;
  const auto plan = plan_config(po, env);
  if (!plan || plan->est_step_seconds <= 0) {
    out << "  a trial: no layout of " << per_trial << " rank(s) fits (gtrain plan " << o.file << " --ranks "
        << per_trial << " says why)\n";
    return;
  }
  const double step_hours = plan->est_step_seconds * static_cast<double>(trial_steps) / 3600.0;
  out << "  a trial: " << plan->summary() << ", " << plan->estimate_summary() << "\n";
  out << "  steps: " << strf("%.3g", step_hours * static_cast<double>(per_trial))
      << " rank-hours (GPU-hours with GPUs), plus a start-up and a save per run; " << slots << " trial(s) at once on "
      << pool << ": about " << format_eta(step_hours * 3600.0 / static_cast<double>(slots)) << " of steps\n";
  if (f.base.schedule.window.empty()) return;
  CalendarInput in;
  for (const auto& w : f.base.schedule.window) in.windows.push_back(parse_window(w, o.file));
  in.now = static_cast<double>(std::time(nullptr));
  in.steps = trial_steps;
  in.size_for = [&](int64_t cap) {
    const int64_t units = cap > 0 ? cap : pool;  // a window's GPUs, or the pool without a cap
    const int64_t at_once = units / per_trial * f.sweep.trials_per_gpu;
    if (at_once < 1) return CalendarSize{};
    return CalendarSize{static_cast<int>(units), plan->est_step_seconds / static_cast<double>(at_once)};
  };
  const WindowCalendar c = plan_calendar(in);
  out << render_calendar(c, f.base.schedule.window, in.now);
}

bool is_sweep_dir(const std::string& dir) {
  std::error_code ec;
  return fs::exists(sweep_ledger_path(dir), ec);
}

void print_sweep_status(const std::string& dir, bool json, std::ostream& out) {
  const auto l = read_sweep_ledger(dir);
  if (!l) throw ConfigError(dir + ": no sweep ledger (sweep.json)", "give gtrain status a sweep or run directory");
  const SweepLedger::Totals tot = l->totals();
  if (json) {
    nlohmann::json j = l->to_json();
    j["counts"] = tot.counts;
    j["rank_hours"] = tot.rank_s / 3600.0;
    j["outside_steps_rank_hours"] = tot.outside_s / 3600.0;
    out << j.dump(2) << std::endl;
    return;
  }
  out << "sweep   " << dir << "  (" << l->method << ", " << l->metric << " " << l->mode << ", " << l->trials.size()
      << " trials; rungs " << l->rungs_text() << ")\n";
  out << "state   "
      << (l->finished               ? "finished"
          : !l->stop_reason.empty() ? "stopped: " + l->stop_reason
                                    : "not finished (run gtrain sweep again to continue)")
      << "\ntrials  ";
  for (const char* s : {"done", "stopped", "failed", "running", "paused", "pending"})
    out << tot.counts.at(s) << " " << s << (std::string(s) == "pending" ? "" : ", ");
  out << "; " << l->promotions.size() << " promotions\n";
  out << "cost    " << strf("%.4g", tot.rank_s / 3600.0) << " rank-hours (GPU-hours with GPUs), "
      << strf("%.0f%%", tot.rank_s > 0 ? 100.0 * tot.outside_s / tot.rank_s : 0.0)
      << " of it outside training steps (start-up, resume, rung evaluations and saves)\n";
  if (l->best >= 0) {
    const auto& b = l->trials[static_cast<size_t>(l->best)];
    const int64_t k = b.reached_rung();
    out << "best    " << b.name() << ": " << l->metric << " " << b.reached_result() << " at step "
        << l->rungs[static_cast<size_t>(k)].steps << " (gtrain sweep ... --best prints its config)\n";
  }
  out << "\ntrial  state    rung  steps  " << strf("%-11s", l->metric.c_str()) << " runs  rank-s  values\n";
  for (const auto& t : l->trials) {
    const int64_t k = t.reached_rung();
    std::string values;
    for (const auto& [key, val] : t.params) values += (values.empty() ? "" : ", ") + key + "=" + val.dump();
    out << strf("%-6s %-8s %-5s %-6lld %-11s %-5lld %-7.1f ", t.name().c_str(), name_of(t.state),
                k < 0 ? "-" : std::to_string(k).c_str(), static_cast<long long>(t.steps), t.reached_result().c_str(),
                static_cast<long long>(t.runs), t.rank_seconds)
        << values << (t.failure.empty() ? "" : "  (" + t.failure + ")") << "\n";
  }
}

int sweep_command(const SweepCommandOptions& o) {
  const auto env = process_environment();
  SweepRunOptions r;
  r.sweep_file = o.file, r.dir = o.dir, r.sets = o.sets, r.ranks = o.ranks, r.quiet = o.quiet;
  if (!o.time_limit.empty()) r.time_limit_s = parse_duration(o.time_limit, "--time-limit");
  r.fits = plan_fits(o.file, o.sets, env);
  const std::string dir = sweep_directory(r, env);
  if (o.preview) {
    print_sweep_preview(o, std::cout);
    return 0;
  }
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
  const auto counts = l->totals().counts;
  std::cout << "gtrain sweep: " << dir << ": " << l->trials.size() << " trials, " << counts.at("done") << " done, "
            << counts.at("stopped") << " stopped early, " << counts.at("failed") << " failed, " << l->promotions.size()
            << " promotions";
  if (l->best >= 0) std::cout << "; best " << l->trials[static_cast<size_t>(l->best)].name() << " (best.toml)";
  std::cout << (code == kExitResumable ? "; paused: run the same command to continue" : "") << std::endl;
  return code;
}

}  // namespace gtrain
