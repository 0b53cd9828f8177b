// batch_script.h: the text of one stage's batch script (its scheduler's directives, then the
// scheduler-independent body), and shell_quote, the one function every path and value in a
// generated script goes through.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gtrain {

// One stage of a submitted chain, as its batch script needs it.
struct BatchStage {
  std::string gtrain;                         // absolute path of the gtrain executable
  std::string config;                         // absolute path of the config file
  std::string run_dir;                        // absolute run directory
  std::string work_dir;                       // absolute directory `gtrain submit` ran in: the stage runs there
  std::vector<std::string> run_args;          // extra `gtrain run` arguments (--set k=v ...)
  int index = 1;                              // 1-based stage number
  int gpus = 1;                               // GPUs of this stage (all nodes together)
  int nodes = 1;                              // nodes (with nodes_min: the most)
  int nodes_min = 0;                          // > 0: Slurm's range --nodes=nodes_min-nodes, gpus / nodes a node
  std::string time;                           // HH:MM:SS or D-HH:MM:SS
  int signal_lead_s = 60;                     // USR1 this long before the time limit
  int64_t run_time_limit_s = 0;               // > 0 (PBS): gtrain run's --time-limit, less the script's run time
  std::string partition, account, qos;        // validated names ("" = the site's default)
  std::vector<std::string> extra_directives;  // --sbatch-arg values, one directive each
  std::string launcher = "mpirun";            // mpirun (gtrain starts it) or srun
  int cpus_per_gpu = 0;                       // CPU cores per GPU (0 = not requested: the site's default)
  bool sweep = false;                         // `gtrain sweep CONFIG --dir RUN_DIR` instead of `gtrain run`
};

// Quotes `s` for bash: the result expands to exactly `s` (spaces, quotes, $, backticks, newlines).
std::string shell_quote(const std::string& s);

class SchedulerBackend;

// The scheduler's directives for the resources (SchedulerBackend::script_directives), then a body
// that runs `gtrain run` in the background, forwards USR1/TERM to it as USR1, waits for it across
// traps, and reports the exit code to `gtrain chain-step` (which submits, stops or cancels the rest
// of the chain).
std::string batch_script(const SchedulerBackend& scheduler, const BatchStage& s);

// batch_script for Slurm (#SBATCH) and PBS Pro (#PBS -l select=N:ngpus=G:mpiprocs=G, walltime).
std::string slurm_script(const BatchStage& s);
std::string pbs_script(const BatchStage& s);

}  // namespace gtrain
