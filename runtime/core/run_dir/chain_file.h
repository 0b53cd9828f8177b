// chain_file.h: chain.json, the chain of batch jobs one `gtrain submit` created, as a typed record
// (torch-free, readable without the scheduler code): job ids per stage, their states and how each
// ended, and what `--stages auto` needs to add the next stage. launcher/chain/chain.h acts on it.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/core/config/schedule_config.h"
#include "runtime/core/scheduler_kind.h"

namespace gtrain {

// A stage's state in chain.json. ended: the scheduler has no such job, and its script never
// reported; refused: the scheduler refused its submission.
#define GTRAIN_STAGE_STATES(X) \
  X(planned)                   \
  X(queued)                    \
  X(resumable)                 \
  X(completed)                 \
  X(failed)                    \
  X(cancelled)                 \
  X(skipped)                   \
  X(ended)                     \
  X(refused)
// The chain's state in chain.json.
#define GTRAIN_CHAIN_STATES(X) \
  X(running)                   \
  X(completed)                 \
  X(failed)                    \
  X(stopped)                   \
  X(cancelled)

#define GTRAIN_STATE_ENUMERATOR(name) name,
enum class StageState { GTRAIN_STAGE_STATES(GTRAIN_STATE_ENUMERATOR) };
enum class ChainState { GTRAIN_CHAIN_STATES(GTRAIN_STATE_ENUMERATOR) };
#undef GTRAIN_STATE_ENUMERATOR

// The one name table of each (the strings in chain.json and in every message); nullopt for any
// other string.
const char* state_name(StageState s);
const char* state_name(ChainState s);
std::optional<StageState> stage_state_from_name(const std::string& name);
std::optional<ChainState> chain_state_from_name(const std::string& name);
inline std::ostream& operator<<(std::ostream& out, StageState s) {
  return out << state_name(s);
}
inline std::ostream& operator<<(std::ostream& out, ChainState s) {
  return out << state_name(s);
}

// How --gpus auto / a range / a list with --stages auto sizes each stage (launcher/chain/stage_sizing.h).
struct ChainSizing {
  std::vector<int> candidates;       // GPU counts to choose from (empty: sizes are fixed)
  std::string gpus;                  // the --gpus text ("auto": the counts follow each stage's window cap)
  std::string objective = "finish";  // finish | gpu-hours
  double slack = 0.10;               // gpu-hours: finish within this share of the earliest's time to finish
  bool active() const { return !candidates.empty(); }
};

struct ChainStage {
  int index = 1;
  int gpus = 1, nodes = 1;
  int nodes_min = 0;                     // > 0: Slurm's node range nodes_min-nodes (GPUs and nodes at its most)
  std::string script;                    // file name inside the run dir
  std::vector<std::string> submit_argv;  // the exact sbatch/qsub command (without the dependency)
  std::string begin;                     // --begin value ("" = none)
  std::string job;                       // scheduler job id ("" = not submitted)
  double submitted = 0;                  // unix time it was submitted (0 = not, or by an older gtrain)
  StageState state = StageState::planned;
  int exit = -1;             // gtrain run's exit code (-1 = not reported)
  nlohmann::json decision;   // how its size was chosen (stage_sizing.h; null = the size was given)
  std::string account, qos;  // who pays for it ("" = the user's default)
  std::string shaped;        // why its begin or payer was chosen from the cluster (submit --when quiet, --account auto)
};

struct Chain {
  SchedulerKind scheduler = SchedulerKind::slurm;  // one that can submit: slurm | pbs
  bool auto_stages = false;                        // submit one more stage whenever the last one ends resumable
  int max_auto_stages = 100;                       // safety bound for auto chains
  ChainState state = ChainState::running;
  std::string reason;  // why the chain stopped
  std::vector<ChainStage> stages;
  // For stages --stages auto adds: the config's quota windows (a stage starting outside them gets
  // --begin at the next opening), whether GPU counts follow the windows' max_gpus (no --gpus), and
  // how the scripts start ranks (the task count a new GPU count needs).
  std::vector<WindowConfig> windows;
  bool gpus_from_windows = false;
  std::string launcher = "mpirun";
  int cpus_per_gpu = 0;  // submit --cpus-per-gpu (PBS: the ncpus of a new select)
  // --gpus auto / a range / a list with --stages auto: each stage's size is chosen when it is
  // submitted, from the config (with its --set overrides), the stage time limit and the USR1 lead.
  ChainSizing sizing;
  std::string config;
  std::vector<std::string> sets;
  double limit_s = 0;
  int lead_s = 0;
};

std::string chain_path(const std::string& run_dir);
bool chain_exists(const std::string& run_dir);
// RUN_DIR/chain.json; ConfigError naming the file and key when it is missing or bad. `submitters`:
// the schedulers a chain may name (those that can submit); empty = any scheduler gtrain knows.
Chain read_chain_file(const std::string& run_dir, const std::vector<SchedulerKind>& submitters = {});
void write_chain(const std::string& run_dir, const Chain& c);  // atomic (rename)
nlohmann::json chain_to_json(const Chain& c);
Chain chain_from_json(const nlohmann::json& j, const std::string& where, const std::vector<SchedulerKind>& submitters);

}  // namespace gtrain
