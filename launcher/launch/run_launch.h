// run_launch.h: the launching side of `gtrain run`, torch-free: run options and their flags, the
// run directory, the stage deadline, planning from model sizes, and starting the ranks (mpirun over
// gtrain-worker, or exec of the worker for one rank) with the run directory locked.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/run_lock.h"
#include "launcher/scheduler/allocation.h"
#include "runtime/core/config/job_config.h"
#include "runtime/core/model_stats.h"
#include "runtime/core/plan.h"
#include "runtime/core/schedule.h"

namespace CLI {
class App;
}

namespace gtrain {

struct HardwareProfile;  // strategies/planner/hardware_profile.h

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
  bool force = false;             // --force: train even when a finished run beside this one has its identity
  std::string include;            // --include HOST[:GPUS][@HOST...]: only these hosts and GPUs ("" = all)
};

// Declares the `run` subcommand and its flags on `app` (once, for gtrain and gtrain-worker).
CLI::App* add_run_command(CLI::App& app, RunOptions& o);

// The run directory a config resolves to: `run_dir` (--run-dir) if set, else
// <log.root>/<log.name, or the config file's stem>.
std::string resolve_run_dir(const JobConfig& c, const std::string& config_path, const std::string& run_dir);
std::string resolve_run_dir(const JobConfig& c, const RunOptions& o);

// A resume keeps the global batch its checkpoint was written with: when the newest committed
// checkpoint (or --resume's) has a batch within parallel.batch_tolerance of train.global_batch, the
// config takes it exactly, tolerance 0, so the plan on any rank count keeps the trajectory (or
// fails, naming every factor). In bitwise mode with train.reproducible_chunk = 0 the config takes the
// checkpoint's chunk the same way (another chunk would be another sum). Returns a line saying the
// batch was kept, or "" when it did not change (plan_run's batch_from_checkpoint: whether it is "").
std::string keep_checkpoint_batch(JobConfig& cfg, const RunOptions& o, const std::string& run_dir);

// data.kind = "text" / "jsonl": points cfg.data.prepared_dir at the cache folder of its sources
// (runtime/core/text/text_data.h). The launching process (`launcher`) finds it or prepares it,
// checking the shards, says so unless `quiet`, and exports the folder and the seconds it took for
// the ranks it starts; a rank takes the folder handed over. Returns those seconds (0 for other kinds).
// data.format = "chat" / "prompt_completion": `counts` (when given) gets the data's counts
// (text::data_counts_json; null otherwise), for the stage's ledger record (StageRecord::data).
double resolve_text_data(JobConfig& cfg, const std::string& run_dir, const std::map<std::string, std::string>& env,
                         bool launcher, bool quiet, nlohmann::json* counts = nullptr);

// Model sizes known from the config alone (the built-in gpt with a known vocabulary), so the
// launcher can plan without LibTorch or data; nullopt when the model must be built to know them.
std::optional<ModelStats> model_stats_from_config(const JobConfig& cfg);

// The GPU a rank plans for, and how many ranks share it.
struct PlanDevice {
  int nvml_index = -1;      // the GPU's NVML index (-1 = a CPU rank: this host's CPU profile)
  int ranks_on_device = 1;  // ranks on that GPU: each plans with its share (shared_gpu_profile)
};

// A CUDA rank's planning profile for GPU `g` (NVML): the table's entry by name and memory (nearest
// by memory when the name is unknown), with the card's measured total, split among the
// `ranks_on_device` ranks that share it (shared_gpu_profile).
HardwareProfile gpu_rank_profile(const GpuInfo& g, int ranks_on_device);

// The plan a run uses on `world_size` ranks (`local_ranks` share this machine's memory): the
// planner with what the runtime executes and this host's CPU profile, or, for a CUDA rank
// (`device.nvml_index` >= 0), its GPU's profile and memory, split among the ranks on it. With
// `use_fewer_ranks` (the launcher, before any rank starts) the plan may use fewer ranks than granted
// when that is faster (plan.world < world_size, plan.granted = world_size); ranks already started
// plan for exactly their number.
// Throws ConfigError for an impossible request, naming the factor.
// `batch_from_checkpoint`: train.global_batch is the one keep_checkpoint_batch kept (messages say so).
Plan plan_run(const JobConfig& cfg, const ModelStats& stats, int world_size, int local_ranks, PlanDevice device = {},
              bool use_fewer_ranks = false, bool batch_from_checkpoint = false);

// Before the ranks start: the GPU the first rank of `alloc` will use (its first granted GPU) when
// the ranks will run on CUDA (CUDA build, GPUs granted, train.device not "cpu"), else nvml_index
// -1; more ranks than granted GPUs (--ranks) take them in turn, so as many share one as the
// rounded-up ratio. The started ranks count the sharing from their GPUs' bus ids instead
// (runtime/comm/device_sharing.h).
PlanDevice launch_plan_device(const JobConfig& cfg, const Allocation& alloc);

// True when a launching gtrain already prepared this stage (lock held, deadline and allocation in
// GTRAIN_INTERNAL_*) for `run_dir`, so this process runs as the job's rank(s) directly.
bool stage_prepared(const std::map<std::string, std::string>& env, const std::string& run_dir);

// The launching side of a stage: discovers the allocation, locks the run directory, hands the
// deadline and allocation to the ranks (GTRAIN_INTERNAL_*), calls `plan_ranks(alloc)` so bad input
// is one message and the plan says how many of the granted ranks to start (plan.world: it may leave
// some idle when fewer is faster; a line and the ledger name them), then for several ranks runs mpirun over `worker`
// and returns its exit code. Returns the lock and the rank count (1) otherwise.
struct StageLaunch {
  std::unique_ptr<RunLock> lock;
  int ranks = 1;
  int exit_code = -1;  // several ranks: mpirun's exit code once they ended (-1: this process is the rank)
};
StageLaunch launch_stage(const RunOptions& o, const JobConfig& cfg, const std::map<std::string, std::string>& env,
                         const std::string& worker, const std::function<Plan(const Allocation&)>& plan_ranks);

// A fresh start (no committed checkpoint, or --no-resume) whose identity (run_identity.h; the layout
// from `plan`) equals a finished run's beside it: says so, naming it, and returns true (nothing to
// train) unless --force or log.profile_start (a run for its profile). Otherwise records the identity in identity.json
// (a resume keeps its own).
bool repeats_finished_run(const RunOptions& o, const JobConfig& cfg, const std::string& run_dir, const Plan& plan);

// Locks the run (and checkpoint) directory for a stage (RunLock::acquire), then adds to stages.jsonl
// each stage metrics.jsonl shows after its last record (a launcher killed with kill -9 wrote none),
// naming the pid that held the lock before, with a warning each.
std::unique_ptr<RunLock> acquire_stage_lock(const std::string& run_dir, const JobConfig& cfg);

// When `env` is a stage of a chain (GTRAIN_SUBMIT_STAGE, which the batch scripts export) and the
// run directory's chain.json says gtrain cancel cancelled it: a line saying so ("" otherwise).
std::string cancelled_chain_stage(const std::map<std::string, std::string>& env, const std::string& run_dir);

// What a launching gtrain hands its ranks (GTRAIN_INTERNAL_DEADLINE / _ALLOCATION), found by rank 0
// itself when srun started the ranks: the stage's deadline (the allocation's end time, --time-limit or
// schedule.time_limit_s, the current quota window's end; unix_time 0 = none) and the allocation as
// stages.jsonl records it. The nearest of them wins; `now` 0 = the clock.
Deadline stage_deadline(const JobConfig& cfg, const RunOptions& o, const Allocation& alloc, double now = 0);

// Throws ConfigError (exit 2, one line with the estimate and what to change) when the plan's first
// step and a save (the longest an earlier stage of `run_dir` recorded, at least 1 s) do not fit
// before `deadline` (runtime/core/stop_policy.h first_step_cannot_fit).
void refuse_step_longer_than_stage(const Plan& plan, const Deadline& deadline, const std::string& run_dir);
// `ranks` of the allocation's world run; fewer: "idle" lists the rest (idle_slots).
nlohmann::json allocation_record(const Allocation& alloc, int ranks);
// The granted slots past the first `ranks` (mpirun fills them in order): "host:gpu N", or
// "host:slot N" without GPUs, or "rank N" for --ranks beyond the hosts' slots.
std::vector<std::string> idle_slots(const Allocation& alloc, int ranks);

// The gtrain launcher (for batch scripts): `gtrain` next to this executable, else this executable.
std::string gtrain_executable();

// gtrain-worker: the LibTorch half of gtrain (GTRAIN_WORKER, else next to this executable).
std::string worker_executable();

// Replaces this process with gtrain-worker, same arguments (argv[0] kept for messages).
[[noreturn]] void exec_worker(int argc, char** argv);

}  // namespace gtrain
