// attempt.h: one attempt of a stage's ranks, as the launcher watches and records it (torch-free):
// the heartbeat watch, how the attempt ended, the restart's arguments and host health, the exit code.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/launch/launch.h"
#include "launcher/scheduler/allocation.h"
#include "runtime/core/config/job_config.h"
#include "runtime/core/heartbeat.h"
#include "runtime/core/run_dir/run_records.h"

namespace gtrain {

// The step of the newest committed checkpoint (-1 = none).
int64_t newest_committed_step(const JobConfig& cfg, const std::string& run_dir);

// The arguments of a restart: the ranks resume from the newest committed checkpoint. --resume and
// --no-resume go once this stage committed one (before that, the first attempt's choice stands).
std::vector<std::string> restart_args(std::vector<std::string> args);

// The host rank `rank` runs on: mpirun fills each host's slots in order (mpirun_spec); one host
// takes every rank. "" when unknown.
std::string host_of_rank(const Allocation& alloc, int rank);

// The failures seen on each host, and the hosts left out of the stage.
struct HostHealth {
  std::map<std::string, int> failures;
  std::vector<std::string> left_out;
};

// Whether to leave `host` out after a failure of one of its ranks in `phase`: its second failure, or
// the first when the rank never got past start-up (it could not start, allocate or use its device:
// the quick health check), as long as another host remains.
bool leave_out_host(HostHealth& health, const Allocation& alloc, const std::string& host, const std::string& phase);

// What one attempt's heartbeats (<run_dir>/.heartbeat) say: the furthest step its ranks reached, the
// rank the watch found stuck, and, after a restart, the recovery: the first step after it (the
// earliest a rank of this attempt finished) and how long the recovery took, a line of restarts.jsonl
// written once seen.
class AttemptWatch {
 public:
  // Starts the attempt: an earlier attempt's heartbeats are removed (they are not this one's).
  // `restarts` > 0: the attempt is that restart.
  AttemptWatch(const std::filesystem::path& beats, const std::string& run_dir, int restarts, int ranks,
               const HangRule& rule);
  // For LaunchSpec::watch: reads the heartbeats; one line naming a stuck rank, "" while none is.
  std::string poll();
  // Reads the heartbeats once the ranks ended; returns them.
  std::vector<HeartbeatRecord> last_beats();
  double attempt_unix() const { return attempt_unix_; }
  int64_t reached() const { return reached_; }             // the furthest step reported (-1: none)
  int stuck_rank() const { return stuck_rank_; }           // the rank poll found stuck (-1: none)
  double detected_unix() const { return detected_unix_; }  // when poll found it stuck

 private:
  // Takes the furthest step of this attempt's heartbeats, and the recovery once there is one.
  void take(const std::vector<HeartbeatRecord>& seen);
  std::filesystem::path beats_;
  std::string run_dir_;
  int ranks_ = 0;
  HangRule rule_;
  double attempt_unix_ = 0;
  int64_t reached_ = -1;
  std::optional<RecoveredRecord> recovery_;  // the last restart, until its first step is seen
  double detected_unix_ = 0;
  int stuck_rank_ = -1;
};

// How an attempt's ranks ended, as the restart line and the records say it.
struct AttemptEnd {
  bool hung = false;         // the watch ended the ranks: a rank made no progress
  int failed_rank = -1;      // the rank found stuck, or the first mpirun reported dead (-1: none)
  std::string failed_phase;  // its phase from its last heartbeat (start-up without one: it never started)
  int rank_signal = 0;       // the signal a rank was ended by (0: none)
  std::string said;          // rank 0's outcome: "resumable", "fatal" or ""
  std::string said_why;      // and then, for a full disk, "failed: disk full: ..."
  std::string cause;         // one phrase: the hang, the rank's signal, or the exit code
  bool failed = false;       // a failure (not a stop, an abort, bad input or mpirun's own)
};

// The attempt's end from mpirun's result, the heartbeats (read once more into `watch`) and the
// outcome file rank 0 wrote (removed once read).
AttemptEnd attempt_end(const MpirunResult& ran, const LaunchSpec& spec, AttemptWatch& watch);

// The stage's exit code from how mpirun ended: 3 once rank 0 said the stage is resumable, else
// mpirun's, with one line to act on for a rank killed by a signal or an mpirun that started none.
int stage_exit_code(const MpirunResult& ran, const LaunchSpec& spec, const std::string& said, int rank_signal);

}  // namespace gtrain
