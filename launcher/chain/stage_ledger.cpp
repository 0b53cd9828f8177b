// stage_ledger.cpp: stages from metrics.jsonl that stages.jsonl lacks (see stage_ledger.h).
#include "launcher/chain/stage_ledger.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "runtime/core/config/job_config.h"
#include "runtime/core/errors.h"
#include "runtime/core/schedule.h"
#include "runtime/core/stage_ledger.h"

namespace fs = std::filesystem;

namespace gtrain {

nlohmann::json unreported_stage_record(double start, double end, const nlohmann::json& allocation, int64_t world,
                                       int64_t step_from, const MetricsStage& s, int64_t total_steps,
                                       const std::string& exit, const std::string& reported_by) {
  StageRecord r;  // the trainer's record, less what only the trainer knows (plan, save and load times)
  r.start = start;
  r.end = end;
  r.allocation = allocation;
  r.world = static_cast<int>(world);
  r.step_from = step_from;
  r.step_to = s.step_to;
  r.total_steps = total_steps;
  r.samples = s.samples;
  r.productive_s = s.productive_s;
  r.exit = exit;
  r.reported_by = reported_by;
  return r.to_json();
}

std::vector<MetricsStage> metrics_stages(const std::string& metrics_path, double since_unix) {
  std::vector<MetricsStage> out;
  std::ifstream in(metrics_path);
  int64_t resume_step = -1;  // a "resume" record's step: where the stage after it started
  int64_t last_step = -1;    // the previous train record's step in the current stage
  double last_elapsed = -1, first_time = 0, per_sample_step = 0;
  int64_t first_step = 0;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("kind") || !j["kind"].is_string()) continue;
    const std::string kind = j["kind"].get<std::string>();
    if (kind == "resume" && j.contains("step") && j["step"].is_number_integer()) {
      resume_step = j["step"].get<int64_t>();
      last_elapsed = -1;  // whatever follows is a new stage
      continue;
    }
    if (kind != "train" || !j.contains("step") || !j["step"].is_number_integer() || !j.contains("time") ||
        !j["time"].is_number())
      continue;
    const double time = j["time"].get<double>();
    if (time <= since_unix) {
      resume_step = -1;
      continue;
    }
    const int64_t step = j["step"].get<int64_t>();
    const double elapsed = j.value("elapsed_s", 0.0);
    const double step_time =
        j.contains("step_time_s") && j["step_time_s"].is_number() ? j["step_time_s"].get<double>() : 0.0;
    if (out.empty() || last_elapsed < 0 || elapsed < last_elapsed) {
      MetricsStage s;
      s.start = time - elapsed;
      s.step_from = resume_step >= 0 ? resume_step : step - 1;
      out.push_back(s);
      resume_step = -1;
      last_step = out.back().step_from;
      first_time = time;
      first_step = step;
    }
    MetricsStage& s = out.back();
    // Records every log.metrics_interval steps: each stands for the steps since the one before.
    s.productive_s += step_time * static_cast<double>(std::max<int64_t>(1, step - last_step));
    s.step_to = step;
    s.end = time;
    ++s.records;
    if (j.contains("consumed_samples") && j["consumed_samples"].is_number_integer() && step > 0)
      per_sample_step = static_cast<double>(j["consumed_samples"].get<int64_t>()) / static_cast<double>(step);
    s.samples = static_cast<int64_t>(per_sample_step * static_cast<double>(s.step_to - s.step_from) + 0.5);
    s.steps_per_s = time > first_time ? static_cast<double>(step - first_step) / (time - first_time)
                    : step_time > 0   ? 1.0 / step_time
                                      : 0.0;
    last_step = step;
    last_elapsed = elapsed;
  }
  return out;
}

double ledger_end(const std::string& run_dir) {
  std::ifstream in(fs::path(run_dir) / "stages.jsonl");
  double end = 0;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("end") && j["end"].is_number()) end = std::max(end, j["end"].get<double>());
  }
  return end;
}

std::vector<nlohmann::json> record_lost_stages(const std::string& run_dir, int64_t holder_pid, int64_t total_steps) {
  const fs::path dir(run_dir);
  const auto lost = metrics_stages((dir / "metrics.jsonl").string(), ledger_end(run_dir));
  std::vector<nlohmann::json> out;
  if (lost.empty()) return out;
  // The lost stage's own config.toml and plan.json (this start writes its own only later).
  try {
    if (fs::exists(dir / "config.toml"))
      total_steps = load_job_config((dir / "config.toml").string(), {}, {}).train.steps;
  } catch (const Error&) {
  }
  int64_t world = 0;
  {
    std::ifstream plan(dir / "plan.json");
    const auto p = nlohmann::json::parse(plan, nullptr, false);
    if (p.is_object() && p.contains("world") && p["world"].is_number_integer()) world = p["world"].get<int64_t>();
  }
  std::ofstream ledger(dir / "stages.jsonl", std::ios::app);
  for (size_t i = 0; i < lost.size(); ++i) {
    const MetricsStage& s = lost[i];
    const std::string who = holder_pid > 0 && i + 1 == lost.size() ? " (pid " + std::to_string(holder_pid) + ")" : "";
    const nlohmann::json rec = unreported_stage_record(
        s.start, s.end, nlohmann::json::object(), std::max<int64_t>(1, i + 1 == lost.size() && world > 0 ? world : 1),
        s.step_from, s, total_steps,
        "failed: its launcher" + who + " ended without recording the stage (killed?); recorded from metrics.jsonl",
        "next start");
    ledger << rec.dump() << "\n";
    out.push_back(rec);
  }
  return out;
}

}  // namespace gtrain
