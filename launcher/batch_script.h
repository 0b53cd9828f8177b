// batch_script.h: the text of one stage's batch script (Slurm sbatch or PBS qsub), and
// shell_quote, the one function every path and value in a generated script goes through.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gtrain {

// One stage of a submitted chain, as its batch script needs it.
struct BatchStage {
  std::string gtrain;                 // absolute path of the gtrain executable
  std::string config;                 // absolute path of the config file
  std::string run_dir;                // absolute run directory
  std::string work_dir;               // absolute directory `gtrain submit` ran in: the stage runs there
  std::vector<std::string> run_args;  // extra `gtrain run` arguments (--set k=v ...)
  int index = 1;                      // 1-based stage number
  int gpus = 1;                       // GPUs of this stage (all nodes together)
  int nodes = 1;
  std::string time;                           // HH:MM:SS or D-HH:MM:SS
  int signal_lead_s = 60;                     // USR1 this long before the time limit
  int64_t run_time_limit_s = 0;               // > 0 (PBS): gtrain run's --time-limit, less the script's run time
  std::string partition, account, qos;        // validated names ("" = the site's default)
  std::vector<std::string> extra_directives;  // --sbatch-arg values, one directive each
  std::string launcher = "mpirun";            // mpirun (gtrain starts it) or srun
  int cpus_per_gpu = 0;                       // CPU cores per GPU (0 = not requested: the site's default)
};

// PBS's resource chunk: select=N:ngpus=G[:ncpus=G*C]:mpiprocs=G.
std::string pbs_select(int nodes, int gpus_per_node, int cpus_per_gpu);

// Quotes `s` for bash: the result expands to exactly `s` (spaces, quotes, $, backticks, newlines).
std::string shell_quote(const std::string& s);

// sbatch script: #SBATCH directives for the resources, then a body that runs `gtrain run` in the
// background, forwards USR1/TERM to it as USR1, waits for it across traps, and reports the exit
// code to `gtrain chain-step` (which submits, stops or cancels the rest of the chain).
std::string slurm_script(const BatchStage& s);

// qsub script for PBS Pro: select=N:ngpus=G:mpiprocs=G, walltime, the same body.
std::string pbs_script(const BatchStage& s);

}  // namespace gtrain
