// scheduler_backend.h: SchedulerBackend, everything gtrain asks of one batch scheduler (detect it,
// read the allocation and its limits, write a batch script's directives, submit, depend, begin,
// cancel, signal, ask job states), and the registry over the ordered detection list.
//
// Each scheduler fills the interface once, in its own file (slurm_backend.cpp, pbs_backend.cpp,
// lsf_backend.cpp, local_backend.cpp), as nccl-tests fills one table per collective. What a backend
// does not support keeps the default, which throws "scheduler X does not support Y".
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "launcher/base/program_runner.h"
#include "launcher/scheduler/batch_script.h"
#include "launcher/scheduler/cluster_reading.h"
#include "launcher/scheduler/scheduler_limits.h"
#include "runtime/core/scheduler_kind.h"

namespace gtrain {

struct Allocation;
class DiscoveryContext;  // scheduler/discovery.h

// A command's exit code and its stdout+stderr together (the scheduler's message verbatim).
struct CommandOutput {
  int rc = -1;
  std::string text;
};
// Runs `argv` through `runner` with stderr merged and the exit code kept (rc -1: could not be run).
CommandOutput run_merged(const CommandRunner& runner, const std::vector<std::string>& argv);

// Where a job the scheduler still knows stands.
enum class JobPhase { pending, running, other };
struct JobState {
  JobPhase phase = JobPhase::other;
  std::string text;  // the scheduler's own word, as shown: squeue's PENDING / RUNNING, qstat's Q / R
};

// What names one stage's job on the submit command line.
struct SubmitRequest {
  std::string job_name;  // gtrain-NAME
  std::string run_dir;   // absolute
  int index = 1;         // the stage's number
  std::string script;    // absolute path of its batch script (the last argument)
};

class SchedulerBackend {
 public:
  virtual ~SchedulerBackend() = default;
  virtual SchedulerKind kind() const = 0;
  std::string name() const { return scheduler_name(kind()); }

  // --- Discovery (gtrain probe / plan / run) ---
  // True when `env` is a job of this scheduler (the detection list asks in order).
  virtual bool detect(const std::map<std::string, std::string>& env) const = 0;
  // Fills ctx's Allocation: nodes, GPUs, CPUs, tasks, time, queue; reads limits when asked to.
  virtual void discover(DiscoveryContext& ctx) const = 0;
  // A batch scheduler: its tasks decide CPU ranks, and it has a queue, account and QOS to show.
  // False for a bare machine (cuda_env, local).
  virtual bool is_batch_scheduler() const { return true; }
  // What the scheduler allows this job and user.
  virtual SchedulerLimits read_limits(const Allocation& a, const CommandRunner& run) const;

  // --- Batch scripts (gtrain submit) ---
  virtual bool can_submit() const { return false; }
  virtual std::string submit_program() const;   // "sbatch", "qsub"
  virtual std::string script_suffix() const;    // ".sbatch", ".pbs"
  virtual std::string job_id_variable() const;  // the job id in the script: "SLURM_JOB_ID"
  // The script's first lines: "#!/bin/bash", what it is, then the resource directives.
  virtual std::string script_directives(const BatchStage& s) const;
  // True when the scheduler signals the script (USR1) before the time limit; else gtrain run stops
  // itself by --time-limit.
  virtual bool signals_before_limit() const { return false; }
  // The stage time limit as the scheduler takes it (Slurm's D-HH:MM:SS, PBS walltime HH:MM:SS).
  virtual std::string time_limit_text(int64_t seconds) const;

  // --- Submit options, checked before anything is written (ConfigError naming the option) ---
  virtual void check_qos(const std::string& qos) const;
  virtual void check_launcher(const std::string& launcher) const;
  virtual void check_directive(const std::string& arg) const;
  // Refuses a --time the scheduler would never run (no-op where it cannot tell).
  virtual void check_time_limit(const std::string& partition, const std::string& time_text, double limit_s,
                                const CommandRunner& run) const;

  // --- Submitting and chaining ---
  // The submit command for one stage, without dependency, begin time and environment.
  virtual std::vector<std::string> submit_argv(const SubmitRequest& r) const;
  // Options that make a job wait until `after_job` ended, whatever its exit (afterany).
  virtual std::vector<std::string> dependency_args(const std::string& after_job) const;
  // The scheduler's begin-time text for `unix_time`, and the options that pass it.
  virtual std::string begin_time(double unix_time) const;
  virtual std::vector<std::string> begin_args(const std::string& begin) const;
  // Options exporting the whole environment plus GTRAIN_STAGE=index.
  virtual std::vector<std::string> stage_env_args(int stage_index) const;
  // A bash line's tail turning the submit command's answer in $VAR into the bare job id ("" = as is).
  virtual std::string shell_job_id_fixup(const std::string& var) const;
  // A stage's submit argv (script last) resized to `nodes` x `per_node` GPUs; `launcher` decides
  // the tasks, `cpus_per_gpu` the CPUs.
  virtual void resize_submit_argv(std::vector<std::string>& argv, int nodes, int per_node, const std::string& launcher,
                                  int cpus_per_gpu) const;
  // The submit argv of the stage after a copied one (numbered `index`): a per-stage log, say.
  virtual void renumber_submit_argv(std::vector<std::string>& argv, const std::string& run_dir, int index) const;
  // `argv` (script last) as a test submission at nodes x per_node GPUs, which only says whether the
  // scheduler would accept it; nullopt when the scheduler has no such test.
  virtual std::optional<std::vector<std::string>> test_submit_argv(const std::vector<std::string>& argv, int nodes,
                                                                   int per_node) const;
  // The start time (unix) a test submission's answer predicts; nullopt when it names none.
  virtual std::optional<double> test_submit_start(const std::string& answer) const;

  // --- Cancel, signal, states ---
  virtual std::vector<std::string> cancel_argv(const std::string& job) const;
  // Asks a running job's batch shell to save and stop (USR1).
  virtual std::vector<std::string> signal_argv(const std::string& job) const;
  virtual std::string kill_grace_name() const;  // the setting after which a cancel kills: KillWait
  // The jobs of `jobs` the scheduler still knows as not ended, with their states; nullopt when it
  // cannot be asked.
  virtual std::optional<std::map<std::string, JobState>> job_states(const std::vector<std::string>& jobs,
                                                                    const CommandRunner& run) const;
  // When `job` was submitted (unix time), as the scheduler's accounting or its job record says;
  // nullopt when it cannot tell (no such query, the job forgotten). gtrain report's queue waits.
  virtual std::optional<double> job_submit_time(const std::string& job, const CommandRunner& run) const;
  // True when the scheduler clearly answers it no longer knows `job`; false when it cannot be asked.
  virtual bool job_gone(const std::string& job, const CommandRunner& run) const;
  // Extra per-job lines for gtrain status (job -> text); `queued` are the jobs chain.json has as
  // queued. Empty where the scheduler offers nothing more.
  virtual std::map<std::string, std::string> status_details(const std::vector<std::string>& jobs,
                                                            const std::set<std::string>& queued,
                                                            const CommandRunner& run) const;

  // --- Cluster facts (gtrain cluster) ---
  // Partitions, the queue, the accounting's job history and the user's quotas (cluster_reading.h);
  // what cannot be read is a note in the answer.
  virtual ClusterReading read_cluster(const ClusterQuery& q, const CommandRunner& run) const;

 protected:
  // ConfigError "scheduler NAME does not support WHAT".
  [[noreturn]] void unsupported(const std::string& what) const;
};

// The backends in detection order (a test's ScopedSchedulerBackend first).
std::vector<const SchedulerBackend*> scheduler_backends();
// The backend of `kind` (the first of that kind in the list).
const SchedulerBackend& scheduler_backend(SchedulerKind kind);
// The backend named `name`; nullptr for an unknown name.
const SchedulerBackend* find_scheduler_backend(const std::string& name);
// The first backend whose detect() accepts `env` (local accepts every machine).
const SchedulerBackend& detect_scheduler(const std::map<std::string, std::string>& env);

// Test-only: puts `backend` first in the detection list, and first for its kind, while it lives.
class ScopedSchedulerBackend {
 public:
  explicit ScopedSchedulerBackend(const SchedulerBackend& backend);
  ~ScopedSchedulerBackend();
  ScopedSchedulerBackend(const ScopedSchedulerBackend&) = delete;
  ScopedSchedulerBackend& operator=(const ScopedSchedulerBackend&) = delete;

 private:
  const SchedulerBackend* backend_;
};

}  // namespace gtrain
