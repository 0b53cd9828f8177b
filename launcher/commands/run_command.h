// run_command.h: `gtrain run` in gtrain-worker: load the config, open data, build the model, plan, train.
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/launch/device_choice.h"
#include "launcher/launch/launch.h"
#include "launcher/launch/run_launch.h"
#include "runtime/core/config/job_config.h"
#include "runtime/core/plan.h"
#include "runtime/models/lora.h"
#include "runtime/train/trainer.h"

namespace gtrain {

struct RunOutcome {
  std::string run_dir;
  TrainSummary summary;
  int launcher_exit = -1;  // this process launched the ranks (mpirun): their exit code
};

// What a rank builds from a config before training: data, model (seeded), plan, and the parallel
// engine over `comm` (no engine when comm is null: validation before launching ranks).
struct JobParts {
  DataSplits data;
  std::shared_ptr<Model> model;
  ModelStats stats;
  Plan plan;
  std::unique_ptr<ParallelEngine> engine;
  LoraSummary lora;          // [adapter] kind = "lora": what apply_lora added (adapters = 0 otherwise)
  nlohmann::json teacher;    // [distill]: the teacher's identity {path, hash} (CheckpointMeta::teacher; null otherwise)
  std::string teacher_note;  // [distill]: how the teacher runs, a start-up line ("" = nothing to say)
};
// Without `comm` (the launcher, before the ranks start) and with `use_fewer_ranks` (a grant, not
// --ranks), the plan may use fewer than `world_size` ranks (plan_run).
// `batch_from_checkpoint`: the global batch is a resumed checkpoint's (keep_checkpoint_batch).
// `ranks_on_device`: the most ranks that share one GPU (they plan with a share of it).
JobParts assemble_job(const JobConfig& cfg, int world_size, std::shared_ptr<Communicator> comm, int local_ranks = 1,
                      torch::Device device = torch::kCPU, bool use_fewer_ranks = false,
                      bool batch_from_checkpoint = false, int ranks_on_device = 1);

// A stage this long (its steps to go at the planned step time) with checkpoint.interval = 0 is told
// what a failure would lose, and the interval that saves about every kSuggestedSaveSeconds.
inline constexpr double kUnsavedWorkNoteSeconds = 3600;
inline constexpr double kSuggestedSaveSeconds = 1800;
// The start-up line saying so ("" = nothing at risk worth a line: an interval is set, or the stage is short).
std::string unsaved_work_note(const JobConfig& cfg, const Plan& plan, int64_t steps_to_go);

// This rank's device (launcher/launch/device_choice.h): train.device, the visible CUDA devices, and, when
// CUDA_VISIBLE_DEVICES does not already narrow them, the GPUs the allocation granted this node.
DeviceChoice rank_device(const JobConfig& cfg, const RankEnvironment& re,
                         const std::map<std::string, std::string>& env);

// Runs one job in this process (one rank). Throws gtrain::Error on failure.
RunOutcome run_job(const RunOptions& options);

// After run_job returned normally: finalizes MPI (if used) and restores stdout/stderr.
void finish_run_process();

}  // namespace gtrain
