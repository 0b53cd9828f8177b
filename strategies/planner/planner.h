// planner.h: the planner, a pure function from (model sizes, train config, allocation shape,
// hardware profile, available executors) to ranked parallel layouts whose
// dp x micro_batch x grad_accum equals the global batch exactly (or within a configured tolerance).
//
// Candidates: every tp dividing the world (tp divides the heads, stays within a node), every pp
// dividing world / tp (at most one stage per block; the blocks need not divide), dp = world /
// (tp * pp) whether or not it divides the global batch (uneven replica shares, parallel_layout.h;
// parallel.batch_tolerance > 0 prefers a nearby batch it divides), ZeRO 0..max, recompute off/on,
// optimizer offload off/on (GPU ranks only: a CPU rank's host memory is its device memory); for
// each the fastest micro-batch that fits in memory. The same again on fewer ranks than granted
// (fewer_rank_counts), for when leaving some idle is faster (tp and pp need factors the grant
// lacks, or the batch is smaller than the grant).
//
// Fitting: a layout fits when its memory estimate plus parallel.memory_margin of it (the estimate's
// measured error) is within the usable memory per rank (usable_memory_bytes: what a process can
// allocate, the device's total less the CUDA context and NCCL's buffers). One that fits only
// without the margin is "tight": listed with the infeasible ones, never chosen in auto mode.
//
// Ranking of the layouts that fit: least time per global batch, where a layout that leaves granted
// ranks idle counts kIdleRankMargin (5%) slower; on equal times (within kSameTime) the one on more
// ranks, then the one with less memory. So no alternative on all granted ranks is both faster and
// smaller than the chosen layout, and an alternative that leaves ranks idle is at most 5% faster.
// Infeasible candidates are kept with the reason they lost: tight ones first, then those over
// memory (least missing first), then those ruled out by their shape.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/config/adapter_config.h"
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
  std::string model_name;              // for messages ("gpt")
  bool use_fewer_ranks = true;         // also plan on fewer than `world` ranks, leaving the rest idle
                                       // (false: ranks already started, or --ranks N asked for exactly N)
  bool batch_from_checkpoint = false;  // train.global_batch is the checkpoint's a resume keeps (messages say so)
  AdapterConfig adapter;               // [adapter]: "lora" trains adapters on a frozen base
  AdapterCost adapter_cost;            // their sizes as the cost model prices them (adapter_cost_for)
  TeacherCost teacher;                 // distillation's frozen teacher (params = 0: none runs)
  std::string teacher_note;            // why a configured teacher is left out ("" = counted, or none)
};

// What the cost model needs of `adapter` on `model` (adapter_shapes.h): no adapters unless its kind
// is "lora"; the base's bytes from adapter.base_dtype.
AdapterCost adapter_cost_for(const ModelConfig& model, const AdapterConfig& adapter);

// A layout that leaves granted ranks idle is chosen only when this much faster than the best one
// on all of them: the estimates are not exact, and an idle GPU the job holds needs a clear gain.
inline constexpr double kIdleRankMargin = 0.05;
// Two estimated step times this close (relative) are "as fast": the ranking then prefers more ranks,
// then less memory.
inline constexpr double kSameTime = 1e-9;
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
  double missing_bytes = 0;  // over the usable memory by this much (infeasible for memory only)
  bool structural = false;   // infeasible for a divisibility / executor reason, not memory
  bool tight = false;        // fits the usable memory, but not with parallel.memory_margin (not chosen)
};

// The time a feasible candidate is ranked by: its estimate, kIdleRankMargin more when it leaves
// granted ranks idle.
double ranking_time(const RankedPlan& r);

// Every candidate, ranked: feasible ones first (by ranking_time, the rule above), then infeasible
// ones (tight, over memory, structural).
std::vector<RankedPlan> plan_candidates(const PlannerInput& in);

// The best feasible plan. Throws ConfigError when none exists, saying what is missing: memory
// ("needs 93.1 GiB per GPU, 40.0 GiB usable: 53.1 GiB missing"), a batch that dp cannot split
// (with the nearest valid global batches), or, in explicit mode, every factor that is wrong.
Plan plan_job(const PlannerInput& in);

// A job config as the planner sees it: model, train, optimizer, parallel, precision and adapter
// settings for `world` ranks, and the teacher's sizes when [distill] runs one (teacher_stats.h: read
// from its config.json or manifest; held in bf16 when precision.dtype is bf16 or fp16 or
// adapter.base_dtype is bf16, else fp32). Profile, memory, node shape and capabilities are left to
// the caller.
PlannerInput planner_input_for(const JobConfig& cfg, const ModelStats& stats, int64_t world);

// Global batches near `global_batch` that `dp` ranks can split evenly (parallel.batch_tolerance).
std::vector<int64_t> nearest_valid_global_batches(int64_t global_batch, int64_t dp);

// Usable memory per rank the planner compares against: in.memory_bytes when set, else the
// profile's memory less what the process cannot allocate (HardwareProfile::usable_bytes);
// infinity when unlimited.
double usable_memory_bytes(const PlannerInput& in);

// The memory a layout may be estimated at to be chosen: usable / (1 + parallel.memory_margin).
double memory_budget_bytes(const PlannerInput& in);

}  // namespace gtrain
