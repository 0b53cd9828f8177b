// plan_command.h: `gtrain plan config.toml [--gpus N|LIST | --ranks N] [--nodes M] [--gpu-mem SIZE]
// [--gpu-type NAME] [--json] [--explain] [--runnable] [--calibrate]`: the chosen layout with its
// estimates, the alternatives and why each lost, and a what-if table over GPU counts.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "launcher/commands/calibration_report.h"
#include "runtime/core/config/job_config.h"
#include "runtime/core/model_stats.h"
#include "runtime/core/plan.h"

namespace gtrain {

struct PlanOptions {
  std::string config_path;        // "" only with --calibrate
  std::vector<std::string> sets;  // --set section.key=value
  std::string gpus;               // --gpus "8" or "1,2,4,8" ("" = what was granted)
  int64_t nodes = 0;              // --nodes (0 = 8 GPUs per node, or the allocation's)
  int ranks = 0;                  // --ranks N: the ranks gtrain run --ranks N starts (0 = the allocation's)
  std::string gpu_mem;            // --gpu-mem "80GiB" (memory per GPU)
  std::string gpu_type;           // --gpu-type "A100-40GB", "h100", ...
  bool json = false;
  bool explain = false;    // every candidate and the estimate breakdown
  bool runnable = false;   // plan only with what `gtrain run` executes (kRunCapabilities)
  bool calibrate = false;  // measure this machine and save its profile first
};

// What the planner needs from a job config: the model's sizes (GPT sized from its shape without
// building it; other models built once on the CPU) and the number of optimizer steps (0 = unknown).
struct JobDescription {
  ModelStats stats;
  int64_t total_steps = 0;
};
// The description from the config alone (gpt or llama with a known vocabulary, its length in steps
// or tokens), without LibTorch; nullopt when the model must be built or the data opened.
std::optional<JobDescription> describe_job_from_config(const JobConfig& cfg);
// What describes the jobs describe_job_from_config cannot: gtrain-worker's describe_job_with_libtorch
// (job_sizing.h), or in gtrain a hand-off of the whole command to gtrain-worker (main.cpp).
using JobSizer = std::function<JobDescription(const JobConfig&)>;
void set_job_sizer(JobSizer sizer);
// describe_job_from_config, else the JobSizer set (std::logic_error when none is).
JobDescription describe_job(const JobConfig& cfg);

// Runs the command; returns the exit code, throws ConfigError for bad input or when no layout fits
// (after printing what it could). --calibrate measures this machine with `measure` (LibTorch).
int run_plan_command(const PlanOptions& options, const std::map<std::string, std::string>& env, std::ostream& out,
                     const MeasureMachine& measure = {});

// The layout `gtrain plan` (with `o`'s flags) chooses, for commands that need its layout and step
// time (gtrain sweep --preview); nullopt when none fits. Throws as the command does for bad input.
std::optional<Plan> plan_config(const PlanOptions& o, const std::map<std::string, std::string>& env);

// "80GiB", "40GB", "81920MiB", "0.5TiB", "80" (GiB) -> bytes. ConfigError naming `what` otherwise.
double parse_memory_size(const std::string& text, const std::string& what);

// "8" or "1,2,4,8" -> counts (each >= 1). ConfigError naming `what` otherwise.
std::vector<int64_t> parse_gpu_counts(const std::string& text, const std::string& what);

}  // namespace gtrain
