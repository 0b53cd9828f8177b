// submit_command.h: `gtrain submit config.toml [--scheduler slurm|pbs] [--dry-run] [--stages auto|N]
// [--gpus N|LIST|auto|MIN-MAX] [--objective finish|gpu-hours] [--slack F] [--nodes N|LIST|MIN-MAX] [--time HH:MM:SS]
// [--partition P] [--account A] [--qos Q]
// [--sbatch-arg ARG]...`: validates the options, plans the stages (GPUs, nodes, begin times from the
// quota windows, the USR1 lead from the measured save time), writes the batch scripts into the run
// directory and submits them as a chain (see chain.h). Also `gtrain cancel RUN_DIR`.
#pragma once

#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "launcher/base/program_runner.h"
#include "launcher/chain/chain.h"
#include "launcher/scheduler/batch_script.h"
#include "launcher/scheduler/scheduler_limits.h"
#include "runtime/core/schedule.h"

namespace gtrain {

struct SubmitOptions {
  std::string config_path;
  std::vector<std::string> sets;    // --set section.key=value, passed on to gtrain run
  std::string run_dir;              // "" = <log.root>/<log.name>
  std::string scheduler = "slurm";  // slurm | pbs
  bool dry_run = false;             // write the scripts, print the commands, submit nothing
  bool force = false;               // --force, passed on to gtrain run: train even a repeat of a finished run
  std::string stages = "auto";      // auto | N
  // "4"; one per stage "2,4,1" with --stages N; or open, each stage sized when submitted (the
  // earliest predicted finish): "auto", a range "2-8", a list "1,2,4,8" with --stages auto
  // ("" = window max_gpus, else 1).
  std::string gpus;
  std::string objective = "finish";  // open sizes: finish | gpu-hours
  double slack = 0.10;               // gpu-hours: within this share of the earliest finish
  std::string nodes = "1";           // "2", one per stage "1,2,1", or Slurm's range "1-2" (GPUs a node fixed)
  std::string time = "01:00:00";     // per-stage time limit
  std::string partition, account, qos;
  std::vector<std::string> sbatch_args;  // extra directives, e.g. --constraint=a100
  int signal_lead_s = 0;                 // 0 = measured save time x safety + margin + 30 s
  std::string launcher = "mpirun";       // mpirun | srun
  int cpus_per_gpu = 0;                  // CPU cores requested per GPU (0 = the site's default)
  std::string gtrain;                    // executable path ("" = this one)
  double now_unix = 0;                   // when the chain is planned from (0 = the clock; tests fix it)
  bool sweep = false;                    // --sweep: the config is a sweep file; each stage runs gtrain sweep
  std::string when = "now";              // --when now | quiet: quiet delays stages to the partition's quiet hours
  std::string deadline;                  // --deadline: --when quiet delays no stage past it ("" = none)
};

// One planned stage, before scripts exist.
struct StagePlan {
  int gpus = 1, nodes = 1;   // with a node range: the GPUs and nodes at its most
  int nodes_min = 0;         // > 0: Slurm starts the stage on nodes_min to nodes nodes, whatever is free
  double begin_unix = 0;     // 0 = as soon as possible
  double start_unix = 0;     // predicted start: the previous stage's predicted end, or its window's opening
  double end_unix = 0;       // predicted end: start + --time, or the close of its window stretch if sooner
  int64_t cap = 0;           // the max_gpus of the window it starts in (0 = none)
  std::string account, qos;  // --account auto / --qos auto: who pays for it ("" = submit's own)
  std::string shaped;        // why its begin, time or account was chosen from the cluster ("" = not)
};

// "HH:MM:SS", "MM:SS", "D-HH:MM:SS" -> seconds; ConfigError otherwise.
double parse_slurm_time(const std::string& text);

// Checks every option (throws ConfigError naming the option); returns the stage count (0 = auto).
int validate_submit_options(const SubmitOptions& o);

// True when --gpus leaves each stage's size open: auto, a range, or a list with --stages auto.
bool open_gpu_sizes(const SubmitOptions& o, int stages);

// Stage GPUs/nodes/begin times: from the lists, else from the quota window each stage falls in. A
// stage in a window stops at the close of its stretch of windows (gtrain run's deadline), so the next
// one is predicted to start there, not after the whole --time.
std::vector<StagePlan> plan_stages(const SubmitOptions& o, int stages, const std::vector<Window>& windows,
                                   double now_unix);

// The USR1 lead: save time x safety + min lead, plus 30 s because Slurm checks signals only about
// every 30 s; rounded up to whole seconds.
int signal_lead_seconds(double measured_save_s, double save_safety, double min_lead_s);

// "2026-11-30T18:00:00" (local time) for sbatch --begin; "202611301800.00" for qsub -a.
std::string slurm_begin(double unix_time);
std::string pbs_begin(double unix_time);

// The whole command. Returns the exit code; throws ConfigError on bad options or a refusal.
int submit_command(const SubmitOptions& o, const std::map<std::string, std::string>& env, const CommandRunner& runner,
                   std::ostream& out);

// `gtrain cancel RUN_DIR`.
int cancel_command(const std::string& run_dir, const CommandRunner& runner, std::ostream& out, bool now = false,
                   const CancelRetry& retry = {});

}  // namespace gtrain
