// planner.h: the planner, a pure function from (model sizes, train config, allocation shape,
// hardware profile, available executors) to ranked parallel layouts whose
// dp x micro_batch x grad_accum equals the global batch exactly (or within a configured tolerance).
//
// Candidates: every tp dividing the world (tp divides the heads, stays within a node), every pp
// dividing world / tp (pp divides the blocks), dp = world / (tp * pp), ZeRO 0..max, recompute
// off/on; for each the fastest micro-batch that fits in memory. Objective: least time per global
// batch, then least memory. Infeasible candidates are kept with the reason they lost.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/config/job_config.h"
#include "runtime/core/config/optimizer_config.h"
#include "runtime/core/config/parallel_config.h"
#include "runtime/core/config/precision_config.h"
#include "runtime/core/config/train_config.h"
#include "runtime/core/model_stats.h"
#include "runtime/core/plan.h"
#include "strategies/planner/capabilities.h"
#include "strategies/planner/cost_model.h"
#include "strategies/planner/hardware_profile.h"

namespace gtrain {

struct PlannerInput {
  ModelStats model;
  TrainConfig train;
  OptimizerConfig optimizer;
  ParallelConfig parallel;
  PrecisionConfig precision;
  int64_t world = 1;          // ranks granted
  int64_t gpus_per_node = 0;  // ranks per node (0 = all on one node)
  double memory_bytes = 0;    // usable memory per rank (0 = the profile's; both 0 = unlimited)
  HardwareProfile profile;    // default: a conservative CPU
  Capabilities caps = kAllCapabilities;
  std::string model_name;  // for messages ("gpt")
};

struct RankedPlan {
  Plan plan;
  MemoryEstimate memory;
  TimeEstimate time;
  bool feasible = false;
  int64_t rank = 0;          // 1 = the chosen plan, 2.. the feasible alternatives, 0 = infeasible
  std::string why;           // chosen: why; alternative: why it lost; infeasible: the constraint
  double missing_bytes = 0;  // over memory by this much (infeasible for memory only)
  bool structural = false;   // infeasible for a divisibility / executor reason, not memory
};

// Every candidate, ranked: feasible ones first (fastest first), then infeasible ones.
std::vector<RankedPlan> plan_candidates(const PlannerInput& in);

// The best feasible plan. Throws ConfigError when none exists, saying what is missing: memory
// ("needs 93.1 GiB per GPU, 40.0 GiB usable: 53.1 GiB missing"), a batch that dp cannot split
// (with the nearest valid global batches), or, in explicit mode, every factor that is wrong.
Plan plan_job(const PlannerInput& in);

// A job config as the planner sees it: model, train, optimizer, parallel and precision settings
// for `world` ranks (profile, memory, node shape and capabilities are left to the caller).
PlannerInput planner_input_for(const JobConfig& cfg, const ModelStats& stats, int64_t world);

// Global batches near `global_batch` that `dp` ranks can split evenly.
std::vector<int64_t> nearest_valid_global_batches(int64_t global_batch, int64_t dp);

// Usable memory per rank the planner compares against (infinity when unlimited).
double usable_memory_bytes(const PlannerInput& in);

}  // namespace gtrain
