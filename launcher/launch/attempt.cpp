// attempt.cpp: one attempt of a stage's ranks: the heartbeat watch, its end, restarts (see attempt.h).
#include "launcher/launch/attempt.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iostream>

#include "runtime/core/checkpoint_dirs.h"
#include "runtime/core/disk_space.h"
#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/core/run_dir/run_files.h"
#include "runtime/core/schedule.h"

namespace fs = std::filesystem;

namespace gtrain {

// The step of the newest committed checkpoint (-1 = none).
int64_t newest_committed_step(const JobConfig& cfg, const std::string& run_dir) {
  const auto committed = committed_checkpoint_dirs(checkpoint_directory(cfg.checkpoint, run_dir));
  return committed.empty() ? -1 : committed.back().first;
}

// The arguments of a restart: the ranks resume from the newest committed checkpoint. --resume and
// --no-resume go once this stage committed one (before that, the first attempt's choice stands).
std::vector<std::string> restart_args(std::vector<std::string> args) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--no-resume") continue;
    if (args[i] == "--resume") {
      ++i;
      continue;
    }
    if (args[i].rfind("--resume=", 0) == 0) continue;
    out.push_back(args[i]);
  }
  return out;
}

// The host rank `rank` runs on: mpirun fills each host's slots in order (mpirun_spec); one host
// takes every rank. "" when unknown.
std::string host_of_rank(const Allocation& alloc, int rank) {
  if (rank < 0 || alloc.nodes.empty()) return "";
  if (alloc.nodes.size() == 1) return alloc.nodes.front().host;
  int slot = 0;
  for (const auto& n : alloc.nodes) {
    slot += n.gpus.empty() ? std::max(1, n.tasks) : static_cast<int>(n.gpus.size());
    if (rank < slot) return n.host;
  }
  return "";
}

// Whether to leave `host` out after a failure of one of its ranks in `phase`: its second failure, or
// the first when the rank never got past start-up (it could not start, allocate or use its device:
// the quick health check), as long as another host remains.
bool leave_out_host(HostHealth& health, const Allocation& alloc, const std::string& host, const std::string& phase) {
  if (host.empty() || alloc.nodes.size() < 2) return false;
  const int failures = ++health.failures[host];
  return failures >= 2 || phase.rfind(phase_name(RankPhase::startup), 0) == 0;
}

AttemptWatch::AttemptWatch(const fs::path& beats, const std::string& run_dir, int restarts, int ranks,
                           const HangRule& rule)
    : beats_(beats), run_dir_(run_dir), ranks_(ranks), rule_(rule) {
  std::error_code ec;
  fs::remove_all(beats_, ec);  // an earlier attempt's heartbeats are not this one's
  attempt_unix_ = unix_now();
  if (restarts > 0) {
    recovery_.emplace();
    recovery_->restart = restarts;
  }
}

void AttemptWatch::take(const std::vector<HeartbeatRecord>& seen) {
  for (const auto& b : seen) {
    if (b.beat_unix >= attempt_unix_) reached_ = std::max(reached_, b.step);
  }
  // The first step after a restart (the earliest a rank of this attempt finished): how long the
  // recovery took, from the failure's detection; written once seen, or when the attempt ends.
  if (!recovery_) return;
  double first = 0;
  for (const auto& b : seen) {
    if (b.beat_unix >= attempt_unix_ && b.first_step_unix > 0 && (first == 0 || b.first_step_unix < first))
      first = b.first_step_unix;
  }
  if (first == 0) return;
  recovery_->step = reached_;
  recovery_->seconds = first - attempt_unix_;
  append_json_line_or_warn(RunDir(run_dir_).restarts(), record_to_json(*recovery_));
  recovery_.reset();
}

std::string AttemptWatch::poll() {
  const auto seen = read_heartbeats(beats_.string());
  take(seen);
  std::string stuck = find_stuck_rank(seen, ranks_, unix_now(), attempt_unix_, rule_, &stuck_rank_);
  if (!stuck.empty()) detected_unix_ = unix_now();
  return stuck;
}

std::vector<HeartbeatRecord> AttemptWatch::last_beats() {
  auto seen = read_heartbeats(beats_.string());
  take(seen);
  return seen;
}

AttemptEnd attempt_end(const MpirunResult& ran, const LaunchSpec& spec, AttemptWatch& watch) {
  AttemptEnd end;
  std::string dead_doing;  // what the rank mpirun reported dead was doing, from its last heartbeat
  end.hung = !ran.watch_report.empty();
  end.failed_rank = end.hung ? watch.stuck_rank() : ran.dead_rank;
  end.failed_phase = phase_name(RankPhase::startup);  // no heartbeat: it never started
  for (const auto& b : watch.last_beats()) {
    if (b.beat_unix >= watch.attempt_unix() && b.rank == ran.dead_rank)
      dead_doing = " in " + b.phase + " after step " + std::to_string(b.step);
    if (b.beat_unix >= watch.attempt_unix() && b.rank == end.failed_rank) end.failed_phase = b.phase;
  }
  // mpirun passes on a rank's death by signal N (137: SIGKILL, the kernel's out-of-memory killer's
  // too) as 128 + N; without an abort of gtrain's own, that is a runtime failure.
  const int rank_signal =
      !end.hung && !ran.aborted_by && ran.exit_code > 128 && ran.exit_code < 128 + 65 ? ran.exit_code - 128 : 0;
  end.rank_signal = rank_signal;
  {
    std::ifstream outcome(spec.outcome_file);
    std::getline(outcome, end.said);
    std::getline(outcome, end.said_why);
  }
  std::error_code ec;
  fs::remove(spec.outcome_file, ec);
  end.cause = end.hung ? "hang: " + ran.watch_report
              : rank_signal
                  ? (ran.dead_rank >= 0 ? "rank " + std::to_string(ran.dead_rank) +
                                              (ran.dead_host.empty() ? "" : " (" + ran.dead_host + ")") + dead_doing
                                        : std::string("a rank")) +
                        " ended by signal " + std::to_string(rank_signal) + " (" + strsignal(rank_signal) + ")"
                  : (spec.direct ? "the rank exited " : "mpirun exited ") + std::to_string(ran.exit_code) +
                        (spec.direct ? "" : " (a rank failed)");
  end.failed = ran.exit_code != kExitOk && end.said != "resumable" && !ran.aborted_by && !ran.stop_requested &&
               ran.exit_code != kExitUsage && ran.exit_code != 255;
  return end;
}

int stage_exit_code(const MpirunResult& ran, const LaunchSpec& spec, const std::string& said, int rank_signal) {
  int exit_code = ran.exit_code;
  // Rank 0 says "resumable" only once the stage's checkpoint is committed: the stage is resumable
  // however mpirun then ended (a scheduler's TERM reaches mpirun too, which then exits non-zero).
  if (said == "resumable") {
    if (exit_code != kExitOk) {
      std::cerr << "gtrain: " << (spec.direct ? "the rank" : "mpirun") << " exited " << exit_code
                << " after every rank saved (it was signalled too); the stage is resumable" << std::endl;
    }
    return kExitResumable;
  }
  if (rank_signal) {
    std::cerr << "gtrain: error: a rank (or mpirun) was ended by signal " << rank_signal << " ("
              << strsignal(rank_signal) << "); the stage did not save (the last committed checkpoint stays valid)"
              << (rank_signal == SIGKILL ? "; hint: SIGKILL often means the out-of-memory killer: see dmesg or "
                                           "the scheduler's log, or lower parallel.micro_batch"
                                         : "")
              << std::endl;
    exit_code = kExitFailure;
  }
  if (exit_code == 255) {
    // Open MPI's own failure (no rank ran): its banner above says why, at length. One line to act on.
    std::vector<std::string> hosts;
    for (const auto& h : spec.hosts) hosts.push_back(h.host);
    std::cerr << "gtrain: error: mpirun could not start the ranks" << (hosts.empty() ? "" : " on " + join(hosts))
              << " (exit 255; its message is above); hint: check that every host is reachable (ssh "
                 "without a password, or run under srun --mpi=pmix) and has gtrain at "
              << spec.executable << std::endl;
    exit_code = kExitFailure;
  }
  return exit_code;
}

}  // namespace gtrain
