// run_command.h: `gtrain run`: load the config, open data, build the model, plan, train.
#pragma once

#include <string>
#include <vector>

#include "runtime/config/job_config.h"
#include "runtime/train/trainer.h"
#include "strategies/plan.h"

namespace gtrain {

struct RunOptions {
  std::string config_path;
  std::vector<std::string> sets;  // --set section.key=value
  std::string run_dir;            // --run-dir ("" = <log.root>/<log.name>)
  bool quiet = false;             // no console output besides errors
  int ranks = 0;                  // --ranks: ranks to start (0 = one per granted GPU, else 1)
  std::vector<std::string> argv;  // the command line after the program name, for mpirun
  std::string resume;             // --resume PATH: this checkpoint (default: the newest valid one)
  bool no_resume = false;         // --no-resume: start from step 0 even if checkpoints exist
  std::string time_limit;         // --time-limit: stage wall time (90s, 15m, HH:MM:SS)
};

struct RunOutcome {
  std::string run_dir;
  TrainSummary summary;
};

// What a rank builds from a config before training: data, model (seeded), plan, and the parallel
// engine over `comm` (no engine when comm is null: validation before launching ranks).
struct JobParts {
  DataSplits data;
  std::shared_ptr<Model> model;
  ModelStats stats;
  Plan plan;
  std::unique_ptr<ParallelEngine> engine;
};
JobParts assemble_job(const JobConfig& cfg, int world_size, std::shared_ptr<Communicator> comm,
                      int local_ranks = 1, torch::Device device = torch::kCPU);

// The run directory a config resolves to.
std::string resolve_run_dir(const JobConfig& c, const RunOptions& o);

// Runs one job in this process (one rank). Throws gtrain::Error on failure.
RunOutcome run_job(const RunOptions& options);

// After run_job returned normally: finalizes MPI (if used) and restores stdout/stderr.
void finish_run_process();

}  // namespace gtrain
