// chain.h: the chain of batch jobs one `gtrain submit` created, kept in RUN_DIR/chain.json:
// job ids per stage and how each ended; submitting, stepping (what a stage's script reports when
// gtrain run exits), status and cancel, all through an injectable CommandRunner so tests replay
// a fake scheduler. Every scheduler command comes from the chain's SchedulerBackend.
//
// Protocol:
//   1. `gtrain submit` writes stage-K.{sbatch,pbs} and submits them in order, stage K+1 with
//      afterany:JOB(K) (and --begin at its window's opening); chain.json records each job id.
//   2. Each stage's script runs gtrain run and calls `gtrain chain-step RUN_DIR --stage K --exit RC`.
//   3. chain-step: 0 -> the chain is complete, later stages are cancelled; 3 -> resumable: the
//      next stage (already queued) continues, or with --stages auto one more stage is submitted;
//      anything else -> the chain failed, later stages are cancelled, the reason is recorded.
#pragma once

#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/base/program_runner.h"
#include "launcher/chain/stage_sizing.h"
#include "launcher/scheduler/scheduler_backend.h"
#include "runtime/core/config/schedule_config.h"
#include "runtime/core/run_dir/chain_file.h"

#include "runtime/core/unique_fd.h"

namespace gtrain {

// The exact sbatch/qsub command for stage `k` (0-based) after `after_job` ("" = no dependency):
// the recorded submit_argv plus the dependency, --begin/-a and GTRAIN_STAGE, before the script.
std::vector<std::string> stage_submit_argv(const Chain& c, size_t k, const std::string& after_job);

// Submits stage `k` (0-based) after `after_job` ("" = no dependency); records the job id.
// Returns the command's output; on refusal leaves the stage unsubmitted and returns rc != 0.
CommandOutput submit_stage(Chain& c, size_t k, const std::string& after_job, const CommandRunner& runner);

// What a stage's script reports; updates and saves chain.json. Returns a line saying what happened.
// `now_unix` (0 = the clock) is when a stage --stages auto adds would start.
std::string chain_step(const std::string& run_dir, int stage, int exit_code, const std::string& job,
                       const CommandRunner& runner, double now_unix = 0);

// The chain's scheduler backend.
const SchedulerBackend& chain_backend(const Chain& c);
// read_chain_file with the schedulers that can submit.
Chain read_chain(const std::string& run_dir);

// Holds an flock on RUN_DIR/.chain.lock while chain.json is read, changed and written back, so that
// gtrain cancel, a stage's chain-step and gtrain submit never write over each other's changes.
// Waits for the holder (each holds it for a few scheduler commands) up to 5 minutes.
class ChainLock {
 public:
  explicit ChainLock(const std::string& run_dir);
  ~ChainLock();
  void release();  // early, before the destructor
  ChainLock(const ChainLock&) = delete;
  ChainLock& operator=(const ChainLock&) = delete;

 private:
  UniqueFd fd_;  // .chain.lock, flock-ed while held
};

// The scheduler's state for each job of the chain it still knows as pending, running or otherwise
// not yet ended (squeue's %T: PENDING, RUNNING, ...; qstat -f's job_state: Q, R, H, ...); a job missing
// from the map has ended. nullopt when the scheduler cannot be asked.
std::optional<std::map<std::string, JobState>> active_jobs(const Chain& c, const CommandRunner& runner);

// Cancels the chain, printing a line per stage: a running stage is asked to save and stop (Slurm:
// scancel --batch --signal=USR1, PBS: qsig -s USR1, which the script passes to gtrain run as on the
// time limit), so it exits 3 with a checkpoint; with `now` it is cancelled outright instead (the
// scheduler's TERM, then its KILL after KillWait). Every other job of the chain the scheduler still
// knows (queued stages, a stage requeued after it saved) is cancelled; a queued stage whose job it no
// longer knows is marked "ended". The chain is marked cancelled only when no cancel failed; a
// cancelled chain's chain-step records the stage and submits nothing more.
struct CancelResult {
  int cancelled = 0;  // scancel/qdel succeeded
  int signalled = 0;  // running stages asked to save and stop
  int failed = 0;     // scancel/qdel/the signal failed: the stage may still be queued or running
};
// With `retry.wait_s` > 0, a running stage's request is repeated every `retry.every_s` (the chain's lock
// released meanwhile) until the stage acknowledges it (its script writes RUN_DIR/.stop-ack-K with its
// job id), reports through chain-step, or its job is gone, for at most `retry.wait_s`: a signal sent
// as the job is allocated, before its script runs, is dropped by the scheduler. chain.json says
// "cancelled" before any signal, so a stage that starts later does not train (gtrain run checks).
struct CancelRetry {
  double wait_s = 0;  // 0: one request
  double every_s = 2;
};
CancelResult cancel_chain(const std::string& run_dir, const CommandRunner& runner, std::ostream& out, bool now = false,
                          const CancelRetry& retry = {});

// Chain lines for `gtrain status`: job ids and the scheduler's states (squeue, sacct if present).
void print_chain_status(const std::string& run_dir, const CommandRunner& runner, std::ostream& out);

}  // namespace gtrain
