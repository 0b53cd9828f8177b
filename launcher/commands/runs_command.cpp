// runs_command.cpp: `gtrain runs` and `gtrain runs diff` (see runs_command.h).
#include "launcher/commands/runs_command.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>

#include "launcher/base/run_lock.h"
#include "runtime/core/config/job_config.h"
#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/core/run_dir/plan_record.h"
#include "runtime/core/run_dir/run_files.h"
#include "runtime/core/run_dir/run_identity.h"
#include "runtime/core/run_dir/run_records.h"
#include "runtime/core/run_dir/stage_records.h"

namespace fs = std::filesystem;

namespace gtrain {

nlohmann::json RunRow::to_json() const {
  return {{"dir", dir},
          {"id", id.empty() ? nlohmann::json() : nlohmann::json(id)},
          {"status", status},
          {"stages", stages},
          {"step", step},
          {"total_steps", total_steps},
          {"best_eval_loss", best_eval ? nlohmann::json(*best_eval) : nlohmann::json()},
          {gpus ? "gpu_hours" : "rank_hours", unit_hours},
          {"repeats", repeats.empty() ? nlohmann::json() : nlohmann::json(repeats)}};
}

RunRow summarize_run(const std::string& dir, bool running) {
  RunRow r;
  r.dir = dir;
  const RunDir d(dir);
  if (const auto id = read_run_identity(dir)) r.id = id->id();
  const auto stages = read_stage_records(dir);
  const auto plan = read_plan_record(dir);
  for (const auto& s : stages) {
    const int units = s.gpus() > 0 ? s.gpus() : s.world;
    r.gpus = r.gpus || s.gpus() > 0;
    r.unit_hours += std::max(0.0, s.end - s.start) * units / 3600.0;
    r.step = s.step_to;
    if (s.total_steps > 0) r.total_steps = s.total_steps;
  }
  // Stages only metrics.jsonl shows (running now, or killed before a record): at the plan's world.
  const auto extra = metrics_stages(d.metrics(), ledger_end(stages));
  for (const auto& m : extra) {
    r.unit_hours += std::max(0.0, m.end - m.start) * (plan ? static_cast<double>(plan->world) : 1.0) / 3600.0;
    r.step = m.step_to;
  }
  r.gpus = r.gpus || (plan && plan->on_gpus());
  r.stages = static_cast<int>(stages.size() + extra.size());
  for (const auto& rec : read_run_records(d.metrics())) {
    if (rec.is<EvalRecord>()) {
      const double loss = rec.as<EvalRecord>().loss;
      if (!r.best_eval || loss < *r.best_eval) r.best_eval = loss;
    }
  }
  if (d.has(RunFile::config)) {
    try {
      const JobConfig cfg = load_job_config(d.config(), {}, {});
      if (cfg.train.steps > 0) r.total_steps = cfg.train.steps;
    } catch (const Error&) {  // a config this gtrain no longer reads: the records tell the rest
    }
  }
  if (running)
    r.status = "running";
  else if (run_finished(dir))
    r.status = "complete";
  else if (!stages.empty() && extra.empty() && stages.back().resumable())
    r.status = "stopped (resumable)";
  else if (stages.empty() && extra.empty())
    r.status = "new";
  else
    r.status = "failed";
  return r;
}

std::vector<std::string> find_run_dirs(const std::vector<std::string>& dirs) {
  std::vector<std::string> out;
  for (const auto& given : dirs) {
    std::error_code ec;
    if (!fs::is_directory(given, ec))
      throw ConfigError(given + ": no such directory", "give run directories, or folders holding them (runs/)");
    if (looks_like_run_dir(given)) {
      out.push_back(given);
      continue;
    }
    std::vector<std::string> inside;
    for (const auto& e : fs::directory_iterator(given, ec))
      if (e.is_directory(ec) && looks_like_run_dir(e.path().string())) inside.push_back(e.path().string());
    if (inside.empty())
      throw ConfigError(given + ": neither a run directory nor a folder holding one (no " + run_marker_names() + ")",
                        "give run directories, or folders holding them (log.root, runs/ by default)");
    std::sort(inside.begin(), inside.end());
    out.insert(out.end(), inside.begin(), inside.end());
  }
  return out;
}

namespace {

std::string steps_text(const RunRow& r) {
  return std::to_string(r.step) + (r.total_steps > 0 ? "/" + std::to_string(r.total_steps) : std::string());
}

void print_table(const std::vector<RunRow>& rows) {
  std::printf("%-12s  %-19s %6s  %-13s %9s %8s  %s\n", "identity", "status", "stages", "steps", "best eval", "GPU-h",
              "where");
  for (const auto& r : rows) {
    char eval[32] = "-";
    if (r.best_eval) std::snprintf(eval, sizeof eval, "%.4f", *r.best_eval);
    char hours[32];
    std::snprintf(hours, sizeof hours, r.gpus ? "%.4f" : "%.4f*", r.unit_hours);
    std::printf("%-12s  %-19s %6d  %-13s %9s %8s  %s%s\n", r.id.empty() ? "-" : r.id.c_str(), r.status.c_str(),
                r.stages, steps_text(r).c_str(), eval, hours, r.dir.c_str(),
                r.repeats.empty() ? "" : ("  (repeats " + r.repeats + ")").c_str());
  }
  if (std::any_of(rows.begin(), rows.end(), [](const RunRow& r) { return !r.gpus; }))
    std::printf("* rank-hours: the run trained on CPU ranks\n");
}

}  // namespace

int run_runs_command(const RunsOptions& o) {
  const auto dirs = find_run_dirs(o.dirs.empty() ? std::vector<std::string>{"runs"} : o.dirs);
  std::vector<RunRow> rows;
  std::map<std::string, std::string> finished;  // identity -> the first finished run with it
  for (const auto& dir : dirs) {
    RunRow r = summarize_run(dir, RunLock::held(dir));
    if (!r.id.empty()) {
      const auto it = finished.find(r.id);
      if (it != finished.end()) r.repeats = it->second;
      if (r.status == "complete" && it == finished.end()) finished[r.id] = dir;
    }
    rows.push_back(std::move(r));
  }
  if (o.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : rows) out.push_back(r.to_json());
    std::cout << out.dump(2) << std::endl;
  } else {
    print_table(rows);
  }
  return kExitOk;
}

int run_runs_diff_command(const std::string& a, const std::string& b) {
  const auto identity = [](const std::string& dir) {
    if (!looks_like_run_dir(dir))
      throw ConfigError(dir + ": not a gtrain run directory (no " + run_marker_names() + ")",
                        "give two run directories: gtrain runs lists them");
    auto id = read_run_identity(dir);
    if (!id)
      throw ConfigError(RunDir(dir).path(RunFile::identity) + ": missing or not a JSON object",
                        "a run started by this gtrain records it; start the run again to record it");
    return *id;
  };
  const RunIdentity x = identity(a), y = identity(b);
  const auto diffs = identity_differences(x, y);
  if (diffs.empty()) {
    std::cout << a << " and " << b << " have one identity (" << x.id()
              << "): the same config, data, initial weights, layout and gtrain" << std::endl;
    return kExitOk;
  }
  std::cout << a << " (" << x.id() << ") -> " << b << " (" << y.id() << "): " << diffs.size()
            << (diffs.size() == 1 ? " difference" : " differences") << std::endl;
  for (const auto& d : diffs) std::cout << "  " << d << std::endl;
  return kExitOk;
}

}  // namespace gtrain
