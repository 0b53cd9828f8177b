// stage_records.cpp: stages.jsonl's records, written and read (see stage_records.h).
#include "runtime/core/run_dir/stage_records.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <iostream>

#include "runtime/core/config/job_config.h"
#include "runtime/core/disk_space.h"
#include "runtime/core/errors.h"
#include "runtime/core/run_dir/plan_record.h"
#include "runtime/core/run_dir/run_files.h"
#include "runtime/core/run_dir/run_records.h"

namespace gtrain {

nlohmann::json StageRecord::to_json() const {
  nlohmann::json rec = {{"start", start},
                        {"end", end},
                        {"allocation", allocation},
                        {"world", world},
                        {"step_from", step_from},
                        {"step_to", step_to},
                        {"total_steps", total_steps},
                        {"samples", samples},
                        {"productive_s", productive_s},
                        {"save_s", save_s},
                        {"load_s", load_s},
                        {"exit", exit}};
  if (!plan.empty()) rec["plan"] = plan;
  if (!stop_detail.empty()) rec["stop_detail"] = stop_detail;
  if (threads) {
    rec["threads"] = *threads;
    rec["threads_measured"] = threads_measured;
  }
  // What this stage changed in the configuration since the checkpoint it resumed: [was, now].
  if (!config_changes.empty()) rec["config_changes"] = config_changes;
  if (restarts > 0) rec["restarts"] = restarts;
  if (prepare_s > 0) rec["prepare_s"] = prepare_s;
  if (data.is_object()) rec["data"] = data;
  if (!reported_by.empty()) rec["reported_by"] = reported_by;
  return rec;
}

namespace {

enum class Want { kInt, kNumber, kString, kObject };

bool has_type(const nlohmann::json& v, Want w) {
  switch (w) {
    case Want::kInt:
      return v.is_number_integer();
    case Want::kNumber:
      return v.is_number();
    case Want::kString:
      return v.is_string();
    case Want::kObject:
      return v.is_object();
  }
  return false;
}

const char* want_name(Want w) {
  switch (w) {
    case Want::kInt:
      return "an integer";
    case Want::kNumber:
      return "a number";
    case Want::kString:
      return "a string";
    case Want::kObject:
      return "an object";
  }
  return "";
}

// The keys every reader relies on, with their types: a line holding one of another type is not a
// stage record (a missing one keeps its default: records of an older gtrain).
const std::vector<std::pair<const char*, Want>> kStageKeys = {
    {"total_steps", Want::kInt},     {"step_from", Want::kInt}, {"step_to", Want::kInt},      {"world", Want::kInt},
    {"productive_s", Want::kNumber}, {"start", Want::kNumber},  {"end", Want::kNumber},       {"save_s", Want::kNumber},
    {"load_s", Want::kNumber},       {"exit", Want::kString},   {"allocation", Want::kObject}};

}  // namespace

std::pair<std::string, StageRecord> StageRecord::from_json(const nlohmann::json& j) {
  StageRecord r;
  if (!j.is_object()) return {"expected a JSON object, got " + std::string(j.type_name()), r};
  for (const auto& [key, want] : kStageKeys) {
    const auto it = j.find(key);
    if (it != j.end() && !has_type(*it, want))
      return {"key '" + std::string(key) + "' must be " + want_name(want) + ", got " + it->type_name(), r};
  }
  const auto get = [&](const char* key, auto& v) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return;
    try {
      v = it->get<std::decay_t<decltype(v)>>();
    } catch (const nlohmann::json::exception&) {
    }
  };
  get("start", r.start), get("end", r.end), get("allocation", r.allocation), get("world", r.world);
  get("plan", r.plan), get("step_from", r.step_from), get("step_to", r.step_to), get("total_steps", r.total_steps);
  get("samples", r.samples), get("productive_s", r.productive_s), get("save_s", r.save_s), get("load_s", r.load_s);
  get("exit", r.exit), get("stop_detail", r.stop_detail), get("threads_measured", r.threads_measured);
  if (j.contains("threads") && j["threads"].is_number_integer()) r.threads = j["threads"].get<int>();
  if (j.contains("config_changes") && j["config_changes"].is_object()) r.config_changes = j["config_changes"];
  get("reported_by", r.reported_by), get("restarts", r.restarts), get("prepare_s", r.prepare_s);
  if (j.contains("data") && j["data"].is_object()) r.data = j["data"];
  if (!r.allocation.is_object()) r.allocation = nlohmann::json::object();
  return {"", r};
}

std::string StageRecord::scheduler() const {
  const auto it = allocation.find("scheduler");
  return it != allocation.end() && it->is_string() ? it->get<std::string>() : "";
}

std::string StageRecord::job_id() const {
  const auto it = allocation.find("job_id");
  return it != allocation.end() && it->is_string() ? it->get<std::string>() : "";
}

int StageRecord::gpus() const {
  const auto it = allocation.find("gpus");
  return it != allocation.end() && it->is_number_integer() ? it->get<int>() : 0;
}

std::string stage_exit(const std::string& stop_reason, bool stopped_early) {
  if (stop_reason.rfind("failed: ", 0) == 0) return stop_reason;
  return stopped_early ? "resumable: " + stop_reason : std::string("completed");
}

void StageLedger::append(const StageRecord& record) const {
  if (!enabled()) return;
  if (!append_json_line(path_, record.to_json()))
    std::cerr << "gtrain: warning: could not write " << path_ << " (" << std::strerror(errno)
              << "): this stage's record (" << record.exit << ") is lost" << std::endl;
}

nlohmann::json StageLedger::records() const {
  nlohmann::json out = nlohmann::json::array();
  if (!enabled()) return out;
  std::ifstream in(path_);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line, nullptr, false));
  }
  return out;
}

std::vector<StageRecord> read_stage_records(const std::string& run_dir, bool warn) {
  const std::string path = RunDir(run_dir).stages();
  std::vector<StageRecord> out;
  std::ifstream f(path);
  std::string line;
  for (int n = 1; std::getline(f, line); ++n) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) continue;  // the partial last line of a killed writer
    auto [bad, record] = StageRecord::from_json(j);
    if (bad.empty()) {
      out.push_back(std::move(record));
    } else if (warn) {
      std::cerr << "gtrain: warning: " << path << ":" << n << ": " << bad << "; line skipped" << std::endl;
    }
  }
  return out;
}

double ledger_end(const std::vector<StageRecord>& records) {
  double end = 0;
  for (const auto& r : records) end = std::max(end, r.end);
  return end;
}

double ledger_end(const std::string& run_dir) {
  return ledger_end(read_stage_records(run_dir));
}

StageRecord unreported_stage_record(double start, double end, const nlohmann::json& allocation, int64_t world,
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
  return r;
}

std::vector<MetricsStage> metrics_stages(const std::string& metrics_path, double since_unix) {
  std::vector<MetricsStage> out;
  int64_t resume_step = -1;  // a "resume" record's step: where the stage after it started
  int64_t last_step = -1;    // the previous train record's step in the current stage
  double last_elapsed = -1, first_time = 0, per_sample_step = 0;
  int64_t first_step = 0;
  for (const auto& rec : read_run_records(metrics_path)) {
    if (rec.is<ResumeRecord>() && rec.json.contains("step")) {
      resume_step = rec.as<ResumeRecord>().step;
      last_elapsed = -1;  // whatever follows is a new stage
      continue;
    }
    if (!rec.is<TrainRecord>()) continue;
    const TrainRecord t = rec.as<TrainRecord>();
    if (t.time <= 0) continue;  // an older gtrain's record, without a time
    if (t.time <= since_unix) {
      resume_step = -1;
      continue;
    }
    if (out.empty() || last_elapsed < 0 || t.elapsed_s < last_elapsed) {
      MetricsStage s;
      s.start = t.time - t.elapsed_s;
      s.step_from = resume_step >= 0 ? resume_step : t.step - 1;
      out.push_back(s);
      resume_step = -1;
      last_step = out.back().step_from;
      first_time = t.time;
      first_step = t.step;
    }
    MetricsStage& s = out.back();
    // Records every log.metrics_interval steps: each stands for the steps since the one before.
    s.productive_s += t.step_time_s * static_cast<double>(std::max<int64_t>(1, t.step - last_step));
    s.step_to = t.step;
    s.end = t.time;
    ++s.records;
    if (t.consumed_samples > 0 && t.step > 0)
      per_sample_step = static_cast<double>(t.consumed_samples) / static_cast<double>(t.step);
    s.samples = static_cast<int64_t>(per_sample_step * static_cast<double>(s.step_to - s.step_from) + 0.5);
    s.steps_per_s = t.time > first_time ? static_cast<double>(t.step - first_step) / (t.time - first_time)
                    : t.step_time_s > 0 ? 1.0 / t.step_time_s
                                        : 0.0;
    last_step = t.step;
    last_elapsed = t.elapsed_s;
  }
  return out;
}

std::vector<StageRecord> record_lost_stages(const std::string& run_dir, int64_t holder_pid, int64_t total_steps) {
  const RunDir dir(run_dir);
  const auto lost = metrics_stages(dir.metrics(), ledger_end(run_dir));
  std::vector<StageRecord> out;
  if (lost.empty()) return out;
  // The lost stage's own config.toml and plan.json (this start writes its own only later).
  try {
    if (dir.has(RunFile::config)) total_steps = load_job_config(dir.config(), {}, {}).train.steps;
  } catch (const Error&) {
  }
  const auto plan = read_plan_record(run_dir);
  const int64_t world = plan ? plan->world : 0;
  const StageLedger ledger(dir.stages());
  for (size_t i = 0; i < lost.size(); ++i) {
    const MetricsStage& s = lost[i];
    const std::string who = holder_pid > 0 && i + 1 == lost.size() ? " (pid " + std::to_string(holder_pid) + ")" : "";
    const StageRecord rec = unreported_stage_record(
        s.start, s.end, nlohmann::json::object(), std::max<int64_t>(1, i + 1 == lost.size() && world > 0 ? world : 1),
        s.step_from, s, total_steps,
        "failed: its launcher" + who + " ended without recording the stage (killed?); recorded from metrics.jsonl",
        "next start");
    ledger.append(rec);
    out.push_back(rec);
  }
  return out;
}

}  // namespace gtrain
