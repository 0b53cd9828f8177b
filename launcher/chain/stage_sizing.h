// stage_sizing.h: `gtrain submit --gpus auto` (or a range, or a list of counts with --stages auto):
// the stage's size that finishes first (torch-free). For each candidate GPU count with a layout,
// the scheduler's expected start (sbatch --test-only with the stage's own options), plus the time
// the remaining steps take at that size (the planner's step time, calibrated by what the run's
// stages measured, plus their start-up and save time per stage); the earliest finish wins, ties go
// to fewer GPU-hours; --objective gpu-hours takes the fewest GPU-hours within --slack of it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/program_runner.h"
#include "launcher/scheduler/scheduler_backend.h"
#include "runtime/core/config/job_config.h"
#include "runtime/core/run_dir/chain_file.h"

namespace gtrain {

// What the chain keeps in chain.json to size every stage it submits.
// How each stage's size is chosen (kept in chain.json: runtime/core/run_dir/chain_file.h).
using SizingPolicy = ChainSizing;
// The counts for a stage that starts in a window with this cap (0 = none) on `nodes` nodes: --gpus
// auto's ladder up to the cap (else 8 a node), or the policy's candidates as given.
std::vector<int> sizing_candidates(const SizingPolicy& policy, int64_t cap, int nodes);

// "auto" (1, 2, 4, ... up to `most`, plus `most`), "2-8" (every count), "1,2,4,8" -> candidates;
// ConfigError naming --gpus otherwise.
std::vector<int> parse_gpu_candidates(const std::string& text, int most);

// True when a scheduler command failed before the scheduler judged the job: it could not be run, or
// it could not reach the controller / server (a runtime failure, not a verdict on the job's size).
bool scheduler_unreachable(const CommandOutput& r);

struct SizingRow {
  int gpus = 0, nodes = 1;
  std::string layout;      // the plan ("" when none)
  std::string refused;     // why the size is out: the scheduler's first line, or no layout
  double start = 0;        // predicted start (unix)
  std::string start_from;  // "scheduler" (sbatch --test-only), or why it is "now"
  double run_s = 0;        // predicted time to finish the remaining steps, once started
  double finish = 0;       // start + run_s
  double gpu_hours = 0;
  bool chosen = false;
};

struct SizingDecision {
  double at = 0;            // unix time it was made
  double begin = 0;         // the stage waits for this (its quota window's opening; 0 = none)
  int64_t cap = 0;          // the max_gpus of the window it starts in (0 = none)
  std::string unreachable;  // the scheduler's answer when it could not be reached ("" = it answered)
  std::string objective;
  int64_t steps = 0;        // the remaining steps it sized for
  std::string calibration;  // how step times were obtained
  std::vector<SizingRow> rows;
  int chosen = 0;  // GPUs (0: no candidate could run)
  nlohmann::json to_json() const;
};

// What sizing a stage needs.
struct SizingContext {
  JobConfig cfg;          // the run's config (with --set applied)
  std::string run_dir;    // its ledger and metrics: remaining steps, measured speed
  int nodes = 1;          // nodes per stage
  double limit_s = 3600;  // the stage time limit
  double lead_s = 0;      // stopped this long before it
  int64_t cap = 0;        // the max_gpus of the quota window the stage starts in (0 = none)
  double begin = 0;       // the stage's --begin (its window's opening; 0 = none): no size starts before
  const SchedulerBackend* backend = nullptr;
  std::vector<std::string> submit_argv;  // the stage's submit command (script last), for the test submission
  CommandRunner runner;
  double now = 0;
};

SizingDecision decide_stage_size(const SizingPolicy& policy, const SizingContext& ctx);

// What the run's history says for sizing: steps done, measured / modelled step time, and the time a
// stage spends outside training steps (start-up, load, save, evaluation, the rest).
struct StageHistory {
  int64_t done = 0;
  double factor = 1;
  double overhead_s = 0;
  std::string calibration = "step times as the planner models them (no stage measured yet)";
};
StageHistory read_stage_history(const std::string& run_dir, double now);

// The table `gtrain submit` prints and `gtrain status` shows: GPUs, layout, expected start, run time,
// predicted finish, GPU-hours, chosen.
std::string render_sizing(const SizingDecision& d);
std::string render_sizing(const nlohmann::json& decision);

}  // namespace gtrain
