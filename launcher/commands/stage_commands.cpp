// stage_commands.cpp: run status from the stage ledger, metrics and checkpoints; a checkpoint's
// manifest summary.
#include "launcher/commands/stage_commands.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

#include "launcher/base/run_lock.h"
#include "launcher/base/text_util.h"
#include "launcher/chain/chain.h"
#include "runtime/core/checkpoint_dirs.h"
#include "runtime/core/checkpoint_manifest.h"
#include "runtime/core/config/job_config.h"
#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/core/run_dir/chain_file.h"
#include "runtime/core/run_dir/run_files.h"
#include "runtime/core/run_dir/run_records.h"
#include "runtime/core/run_dir/stage_records.h"
#include "runtime/core/schedule.h"
#include "runtime/core/text/text_data.h"

namespace fs = std::filesystem;

namespace gtrain {
namespace {

// What `gtrain status` found in a run directory, rendered once as text or as JSON.
struct RunStatus {
  std::string run_dir;
  std::vector<StageRecord> stages;         // stages.jsonl
  std::vector<nlohmann::json> unrecorded;  // stages metrics.jsonl shows after the ledger's last record
  std::vector<MetricsStage> extra;         // the same, as read
  std::optional<TrainRecord> last_train;   // metrics.jsonl's last train record
  std::string latest;                      // the newest complete checkpoint ("" = none)
  int64_t total = 0, done = 0;
  bool complete = false;
  double eta = -1;  // seconds (-1 = unknown)
  double goodput = 0;
  bool running = false, running_stage = false;
  int64_t running_pid = 0;
};

// The run's total steps and checkpoint directory from the config.toml it wrote at start (0 and the
// default directory when it has none, or it no longer loads).
std::pair<int64_t, std::string> config_steps_and_checkpoints(const RunDir& dir) {
  std::pair<int64_t, std::string> out{0, checkpoint_directory(CheckpointConfig{}, dir.root())};
  if (!dir.has(RunFile::config)) return out;
  try {
    const JobConfig cfg = load_job_config(dir.config(), {}, {});
    out = {cfg.train.steps, checkpoint_directory(cfg.checkpoint, dir.root())};
  } catch (const Error& e) {
    std::cerr << "gtrain: warning: " << e.what() << " (total steps unknown)" << std::endl;
  }
  return out;
}

// Progress, goodput and the ETA at the latest stage's time per step from the ledger.
void read_ledger_progress(RunStatus& st, int64_t config_steps) {
  double productive_rank_s = 0, wall_rank_s = 0;
  for (const auto& s : st.stages) {
    if (s.total_steps > 0) st.total = s.total_steps;
    // The latest stage's: a start over (--no-resume) or from an older checkpoint goes back.
    st.done = s.step_to;
    const double world = s.world;
    productive_rank_s += s.productive_s * world;
    wall_rank_s += (s.end - s.start) * world;
  }
  // config.toml is the latest start's: its steps win over an earlier stage's total (a run restarted
  // with more steps, whose stage failed before it could write its own).
  if (config_steps > 0) st.total = config_steps;
  if (st.total == 0 && !st.latest.empty()) {
    // Epoch- or token-based runs: the trainer's resolved total, stored in its checkpoints.
    try {
      st.total = read_checkpoint_manifest(st.latest).meta.total_steps.value_or(0);
    } catch (const std::exception&) {
    }
  }
  if (st.last_train) st.done = std::max<int64_t>(st.done, st.last_train->step);
  // Complete: the latest stage completed the run's steps, and nothing trained after it.
  st.complete = !st.stages.empty() && st.stages.back().completed() && st.stages.back().step_to == st.done &&
                (st.total == 0 || st.done >= st.total);
  for (auto s = st.stages.rbegin(); s != st.stages.rend() && st.eta < 0 && st.total > 0; ++s) {
    const int64_t steps = s->step_to - s->step_from;
    const double productive = s->productive_s;
    if (steps > 0 && productive > 0)
      st.eta = (productive / steps) * static_cast<double>(std::max<int64_t>(0, st.total - st.done));
  }
  // Goodput needs the ledger (a run killed before its first stage ended has none).
  st.goodput = wall_rank_s > 0 ? productive_rank_s / wall_rank_s : 0;
}

// Stages metrics.jsonl shows after the ledger's last record: the one running now (a gtrain run holds
// the lock), and ones whose launcher was killed before anything recorded them (the next start adds them).
void read_unrecorded_stages(RunStatus& st, const RunDir& dir) {
  st.running = RunLock::held(st.run_dir);
  st.running_pid = st.running ? RunLock::holder_pid(st.run_dir) : 0;
  st.extra = metrics_stages(dir.metrics(), ledger_end(st.stages));
  for (size_t i = 0; i < st.extra.size(); ++i) {
    const MetricsStage& m = st.extra[i];
    const bool now = st.running && i + 1 == st.extra.size();
    st.unrecorded.push_back({{"start", m.start},
                             {"end", m.end},
                             {"step_from", m.step_from},
                             {"step_to", m.step_to},
                             {"productive_s", m.productive_s},
                             {"steps_per_s", m.steps_per_s},
                             {"exit", now ? "running" : "unrecorded: its launcher ended without a record (killed?)"}});
    if (now && m.steps_per_s > 0 && st.total > 0)  // at the running stage's speed
      st.eta = static_cast<double>(std::max<int64_t>(0, st.total - st.done)) / m.steps_per_s;
  }
  st.running_stage = st.running && !st.extra.empty();
}

nlohmann::json stage_list_json(const std::vector<StageRecord>& stages) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& s : stages) out.push_back(s.to_json());
  return out;
}

RunStatus compute_status(const std::string& run_dir) {
  if (!fs::is_directory(run_dir)) {
    throw ConfigError(
        run_dir + ": no such run directory",
        "give the run directory gtrain run or gtrain submit used (its --run-dir, or <log.root>/<log.name>)");
  }
  const RunDir dir(run_dir);
  if (!looks_like_run_dir(run_dir)) {
    throw ConfigError(
        run_dir + ": not a gtrain run directory (no " + run_marker_names() + ")",
        "give the run directory gtrain run or gtrain submit used (its --run-dir, or <log.root>/<log.name>)");
  }
  if (chain_exists(run_dir)) read_chain(run_dir);  // a bad chain.json: one clear error before any report
  RunStatus st;
  st.run_dir = run_dir;
  const auto [config_steps, ckpt_dir] = config_steps_and_checkpoints(dir);
  st.stages = read_stage_records(run_dir, /*warn=*/true);
  for (const auto& r : read_run_records(dir.metrics()))
    if (r.is<TrainRecord>()) st.last_train = r.as<TrainRecord>();
  st.latest = find_latest_complete_checkpoint(ckpt_dir);
  read_ledger_progress(st, config_steps);
  read_unrecorded_stages(st, dir);
  return st;
}

nlohmann::json status_json(const RunStatus& st) {
  nlohmann::json j = {
      {"run_dir", st.run_dir},
      {"step", st.done},
      {"total_steps", st.total},
      {"complete", st.complete},
      {"goodput", st.stages.empty() ? nlohmann::json() : nlohmann::json(st.goodput)},
      {"eta_s", st.eta},
      {"stages", stage_list_json(st.stages)},
      {"unrecorded_stages", st.unrecorded},
      {"running", st.running ? nlohmann::json({{"pid", st.running_pid},
                                               {"stage", st.running_stage ? st.unrecorded.back() : nlohmann::json()}})
                             : nlohmann::json()},
      {"latest_checkpoint", st.latest}};
  // A submitted chain (chain.json, as `gtrain submit` and the stages' scripts keep it; checked).
  if (chain_exists(st.run_dir)) {
    j["chain"] = chain_to_json(read_chain(st.run_dir));
  }
  return j;
}

std::string clock_time(double unix_time) {
  return text::local_time(unix_time, "%Y-%m-%d %H:%M:%S");
}

// The stages table: the ledger's records, then those only metrics.jsonl shows.
void print_stage_table(const RunStatus& st) {
  std::printf("  %-3s %-19s %-19s %5s %-10s %9s %8s %7s %7s  %s\n", "#", "start", "end", "ranks", "steps", "productive",
              "save s", "load s", "sched", "exit");
  for (size_t i = 0; i < st.stages.size(); ++i) {
    const auto& s = st.stages[i];
    const std::string steps = std::to_string(s.step_from) + "-" + std::to_string(s.step_to);
    const std::string scheduler = s.scheduler().empty() ? "-" : s.scheduler();
    std::printf("  %-3zu %-19s %-19s %5d %-10s %8.1fs %8.2f %7.2f %7s  %s\n", i + 1, clock_time(s.start).c_str(),
                clock_time(s.end).c_str(), s.world, steps.c_str(), s.productive_s, s.save_s, s.load_s,
                scheduler.c_str(), describe_stage_exit(s.exit).c_str());
  }
  for (size_t i = 0; i < st.unrecorded.size(); ++i) {
    const auto& s = st.unrecorded[i];
    const std::string steps =
        std::to_string(s.value("step_from", int64_t{0})) + "-" + std::to_string(s.value("step_to", int64_t{0}));
    const bool now = s.value("exit", "") == "running";
    std::printf("  %-3zu %-19s %-19s %5s %-10s %8.1fs %8s %7s %7s  %s\n", st.stages.size() + i + 1,
                clock_time(s.value("start", 0.0)).c_str(), now ? "-" : clock_time(s.value("end", 0.0)).c_str(), "-",
                steps.c_str(), s.value("productive_s", 0.0), "-", "-", "-", s.value("exit", "").c_str());
  }
}

void print_status_text(const RunStatus& st) {
  std::printf("gtrain status: %s\n", st.run_dir.c_str());
  if (st.total > 0) {
    std::printf("  progress   step %lld / %lld%s\n", (long long)st.done, (long long)st.total,
                st.complete ? "  (complete)" : "");
  } else {
    std::printf("  progress   step %lld / unknown\n", (long long)st.done);
  }
  if (st.last_train) std::printf("  last loss  %.4f\n", st.last_train->loss);
  // The newest committed checkpoint, as its directory says: status reads no tensor, so a damaged one
  // is found only by gtrain ckpt verify (or by the resume, which then takes an older one).
  if (st.latest.empty())
    std::printf("  checkpoint none\n");
  else
    std::printf("  checkpoint %s (unverified: gtrain ckpt verify checks its checksums)\n", st.latest.c_str());
  if (st.running_stage) {
    const MetricsStage& m = st.extra.back();
    std::printf("  running    since %s (pid %lld): steps %lld-%lld, %.2f steps/s\n", clock_time(m.start).c_str(),
                (long long)st.running_pid, (long long)m.step_from, (long long)m.step_to, m.steps_per_s);
  } else if (st.running) {
    std::printf("  running    a stage (pid %lld), no step recorded yet\n", (long long)st.running_pid);
  }
  if (!st.stages.empty()) std::printf("  goodput    %.1f%% of rank-time in training steps\n", 100.0 * st.goodput);
  if (!st.complete)
    std::printf("  eta        %s at the %s stage's speed\n", st.eta >= 0 ? format_eta(st.eta).c_str() : "unknown",
                st.running_stage ? "running" : "last");
  const size_t lost = st.unrecorded.size() - (st.running_stage ? 1 : 0);
  std::printf("  stages     %zu%s%s\n", st.stages.size() + st.unrecorded.size(), st.running_stage ? " (1 running)" : "",
              lost > 0 ? (" (" + std::to_string(lost) + " without a ledger record)").c_str() : "");
  // Conversations: what the last stage's rows kept and left out.
  for (auto it = st.stages.rbegin(); it != st.stages.rend(); ++it) {
    if (!it->data.is_object()) continue;
    std::printf("  data       %s\n", text::data_counts_line(it->data).c_str());
    break;
  }
  print_stage_table(st);
}

}  // namespace

int status_command(const std::string& run_dir, bool json) {
  const RunStatus st = compute_status(run_dir);
  if (json) {
    std::cout << status_json(st).dump(2) << std::endl;
  } else {
    print_status_text(st);
  }
  return 0;
}

int ckpt_inspect_command(const std::string& path) {
  const std::string dir = resolve_checkpoint_path(path);
  const CheckpointManifest m = read_checkpoint_manifest(dir);
  int64_t bytes = 0, pieces = 0;
  for (const auto& [name, t] : m.tensors) {
    for (const auto& p : t.pieces) bytes += p.nbytes, ++pieces;
  }
  std::printf("checkpoint %s\n", dir.c_str());
  std::printf("  format     %s v%d\n", kCheckpointFormat, m.version);
  std::printf("  step       %lld  (consumed samples %lld, global batch %lld)\n", (long long)m.step,
              (long long)m.consumed_samples, (long long)m.meta.global_batch.value_or(0));
  std::printf("  written by %s, plan %s\n", plural(m.world.value_or(1), "rank").c_str(),
              m.meta.plan.value_or("").c_str());
  std::printf("  model      %s\n", manifest_model_json(m.meta.model).dump().c_str());
  std::printf("  probe loss %.6f\n", m.meta.probe_loss.value_or(0.0));
  std::printf("  tensors    %zu in %lld pieces, %.2f MB\n", m.tensors.size(), (long long)pieces, bytes / 1e6);
  if (m.meta.stage_ledger) std::printf("  stages     %zu before this checkpoint\n", m.meta.stage_ledger->size());
  return 0;
}

}  // namespace gtrain
