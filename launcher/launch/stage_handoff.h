// stage_handoff.h: StageHandoff, what a launching gtrain tells the ranks of the stage it started,
// carried in GTRAIN_INTERNAL_* environment variables (each a named constant below) so that mpirun,
// srun and exec pass it on unchanged.
//
// Protocol:
//   1. The launching gtrain discovers the allocation, locks the run directory and computes the
//      stage's deadline; it fills a StageHandoff and exports `to_env()` before starting the ranks.
//   2. mpirun forwards every variable in `StageHandoff::variables()` to remote nodes.
//   3. Each rank reads `StageHandoff::from_env(env)`; a field that is absent stays empty (0 for the
//      deadline), which is what a rank started without a launching gtrain (srun) sees.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gtrain {

// The run directory the launching gtrain locked for this stage; a rank that sees its own run
// directory here does not lock it again, and runs as the stage's rank directly.
constexpr const char* kEnvStageLocked = "GTRAIN_INTERNAL_LOCKED";
// "<unix seconds>|<source>": when the stage must end and which limit set it ("Slurm end time",
// "--time-limit", a quota window ...); "0|none" when nothing bounds it.
constexpr const char* kEnvStageDeadline = "GTRAIN_INTERNAL_DEADLINE";
// One JSON object: the allocation as stages.jsonl records it (scheduler, job_id, nodes, gpus, ranks).
constexpr const char* kEnvStageAllocation = "GTRAIN_INTERNAL_ALLOCATION";
// "host=0,1;host2=2,3": the GPU indices the allocation granted each host, so that a rank picks its
// device without discovering the allocation again.
constexpr const char* kEnvStageGranted = "GTRAIN_INTERNAL_GRANTED";
// "host=2,3;...": for hosts whose GPUs `gtrain run --include` narrowed, the positions of the included
// GPUs among the host's granted ones (the CUDA ordinals its ranks take when CUDA_VISIBLE_DEVICES
// lists the whole grant).
constexpr const char* kEnvStagePositions = "GTRAIN_INTERNAL_POSITIONS";
// A file whose appearance asks the ranks to stop at the next step and checkpoint (the launching
// gtrain writes it when a stop signal reaches it).
constexpr const char* kEnvStageStopFile = "GTRAIN_INTERNAL_STOP_FILE";
// A file rank 0 writes "resumable" into when the stage ended early after saving; the ranks then exit
// 0 so that mpirun stays quiet, and the launching gtrain exits 3.
constexpr const char* kEnvStageOutcomeFile = "GTRAIN_INTERNAL_OUTCOME_FILE";
// A folder each rank writes its heartbeat into (runtime/core/heartbeat.h): the launching gtrain
// reads them to find a rank that hangs.
constexpr const char* kEnvStageHeartbeatDir = "GTRAIN_INTERNAL_HEARTBEAT_DIR";
// How many times the launching gtrain restarted this stage's ranks so far (schedule.max_restarts).
constexpr const char* kEnvStageRestarts = "GTRAIN_INTERNAL_RESTARTS";

struct StageHandoff {
  std::string locked_run_dir;   // kEnvStageLocked ("" = no launching gtrain locked it)
  bool has_deadline = false;    // kEnvStageDeadline was set
  double deadline_unix = 0;     // 0 = no deadline
  std::string deadline_source;  // which limit set it
  std::string allocation_json;  // kEnvStageAllocation ("" = not handed over)
  bool has_granted = false;     // kEnvStageGranted was set and well formed
  std::vector<std::pair<std::string, std::vector<int>>> granted;    // per host, in allocation order
  std::vector<std::pair<std::string, std::vector<int>>> positions;  // kEnvStagePositions (--include)
  std::string stop_file;                                            // kEnvStageStopFile ("" = none)
  std::string outcome_file;   // kEnvStageOutcomeFile ("" = not under a launching gtrain)
  std::string heartbeat_dir;  // kEnvStageHeartbeatDir ("" = no launching gtrain watches the ranks)
  int restarts = 0;           // kEnvStageRestarts

  // The variables to export, only those with a value.
  std::map<std::string, std::string> to_env() const;
  // Reads the variables from `env`; malformed granted text leaves has_granted false (the rank then
  // discovers the allocation itself).
  static StageHandoff from_env(const std::map<std::string, std::string>& env);
  // Every variable name, for forwarding to other nodes.
  static const std::vector<std::string>& variables();

  // The GPUs granted to `host` (exact or short-name match); nullopt when it is not listed.
  std::optional<std::vector<int>> granted_for(const std::string& host) const;
  // The device positions --include gave `host`; empty when its GPUs were not narrowed.
  std::vector<int> positions_for(const std::string& host) const;
};

// The kEnvStageGranted encoding, exposed for tests.
std::string format_granted(const std::vector<std::pair<std::string, std::vector<int>>>& hosts);
// `host`'s list (exact or short-name match); nullopt when it is not there or the text is malformed.
std::optional<std::vector<int>> granted_for_host(const std::string& text, const std::string& host);

}  // namespace gtrain
