// planner.h: the planner, a pure function from (model sizes, train config, allocation shape,
// hardware profile, available executors) to ranked parallel layouts whose
// dp x micro_batch x grad_accum equals the global batch exactly (or within a configured tolerance).
//
// Candidates: every tp dividing the world (tp divides the heads, stays within a node), every pp
// dividing world / tp (at most one stage per block; the blocks need not divide), dp = world /
// (tp * pp) whether or not it divides the global batch (uneven replica shares, parallel_layout.h;
// parallel.batch_tolerance > 0 prefers a nearby batch it divides), ZeRO 0..max, recompute off/on;
// for each the fastest micro-batch that fits in memory. The same again on fewer ranks than granted
// (fewer_rank_counts), for when leaving some idle is faster (tp and pp need factors the grant
// lacks, or the batch is smaller than the grant). Objective: least time per global batch, then
// the most ranks, then least memory. Infeasible candidates are kept with the reason they lost.
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
  std::string model_name;       // for messages ("gpt")
  bool use_fewer_ranks = true;  // also plan on fewer than `world` ranks, leaving the rest idle
                                // (false: ranks already started, or --ranks N asked for exactly N)
};

// A layout that leaves granted ranks idle is chosen only when this much faster than the best one
// on all of them: the estimates are not exact, and an idle GPU the job holds needs a clear gain.
inline constexpr double kIdleRankMargin = 0.05;
// ZeRO-3 and optimizer offload add communication and host traffic that the estimate can only
// approximate: a layout with either must be this much faster than the best without to be chosen
// (or be the only one that fits).
inline constexpr double kShardingMargin = 0.05;
// Up to this many granted ranks, every count from half of them up is a "fewer ranks" candidate.
inline constexpr int64_t kAllFewerRanksUpTo = 64;

// The rank counts below `granted` the planner also tries, largest first: every count from
// ceil(granted / 2) up to kAllFewerRanksUpTo granted; above, the 8 largest, the multiples of powers
// of two and of a node's `gpus_per_node` from half up; and the global batch when it is smaller.
std::vector<int64_t> fewer_rank_counts(int64_t granted, int64_t gpus_per_node, int64_t global_batch);

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

// Global batches near `global_batch` that `dp` ranks can split evenly (parallel.batch_tolerance).
std::vector<int64_t> nearest_valid_global_batches(int64_t global_batch, int64_t dp);

// Usable memory per rank the planner compares against (infinity when unlimited).
double usable_memory_bytes(const PlannerInput& in);

}  // namespace gtrain
