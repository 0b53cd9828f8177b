// planner.h: the planner, a pure function from (model stats, train config, allocation size,
// memory per rank) to a Plan whose dp x micro_batch x grad_accum equals the global batch exactly.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/models/model.h"
#include "runtime/precision/precision_config.h"
#include "runtime/train/optimizer_config.h"
#include "runtime/train/train_config.h"
#include "strategies/parallel_config.h"
#include "strategies/plan.h"

namespace gtrain {

struct PlannerInput {
  ModelStats model;
  TrainConfig train;
  OptimizerConfig optimizer;
  ParallelConfig parallel;
  PrecisionConfig precision;
  int64_t world = 1;             // ranks granted
  double memory_bytes = 0;       // usable memory per rank
};

// Memory per rank of a layout: weights, gradients, optimizer state, activations of one
// micro-batch and a fixed workspace margin.
double estimate_memory_bytes(const PlannerInput& in, int64_t dp, int64_t micro_batch, bool recompute);

// Global batches near `global_batch` that `dp` ranks can split evenly.
std::vector<int64_t> nearest_valid_global_batches(int64_t global_batch, int64_t dp);

// Throws ConfigError when no layout fits (naming the memory needed and available).
Plan plan_job(const PlannerInput& in);

}  // namespace gtrain
