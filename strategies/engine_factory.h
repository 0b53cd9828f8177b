// engine_factory.h: build_engine, the one place a job's parallel engine is built from its plan:
// process groups, the model's tensor-parallel split and recompute, its device, and then the data
// parallel (+ZeRO) or pipeline engine over them; and check_pipeline_split, the same layout check
// without communicators (before the ranks start).
#pragma once

#include <memory>

#include <torch/torch.h>

#include "runtime/comm/communicator.h"
#include "runtime/core/config/job_config.h"
#include "runtime/core/model_stats.h"
#include "runtime/core/plan.h"
#include "runtime/models/model.h"
#include "runtime/train/parallel_engine.h"

namespace gtrain {

// Collective over `comm` (every rank calls it with the same plan). `model` was built whole on the
// CPU from the same seed on every rank: each keeps its tensor-parallel part and moves it to
// `device`. Throws Error when the communicator's size is not the plan's.
std::unique_ptr<ParallelEngine> build_engine(const JobConfig& cfg, const Plan& plan, const ModelStats& stats,
                                             const std::shared_ptr<Model>& model,
                                             const std::shared_ptr<Communicator>& comm, torch::Device device);

// pp > 1: ConfigError when the model has no blocks, or they cannot be balanced over the stages.
void check_pipeline_split(Model& model, const Plan& plan);

}  // namespace gtrain
