// heartbeat.h: how a rank tells the launching gtrain what it is doing (a small file per rank,
// rewritten every second by a thread of its own), and how the launcher reads those files and decides
// that a rank is stuck: no progress within max(5 x the slowest recent step, 30 s) once steps have
// started, within the start-up timeout before the first, and within a save's or evaluation's own
// measured duration (x5, at least 30 s) while one runs. Torch-free: the launcher uses the reading half.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gtrain {

// What a rank is doing: each change is progress.
enum class RankPhase : int { startup, forward, backward, grad_sync, optimizer, save, eval, done };
const char* phase_name(RankPhase p);

// This process's heartbeat (one per rank). The phase and step setters are a few atomic stores:
// the training loop calls them freely; only start() makes a thread that writes the file.
class Heartbeat {
 public:
  static Heartbeat& get();

  // Writes <dir>/rank-<rank>.json every `period_s` from a thread of its own until stop() (also at
  // exit: a rank that ends by an error stops its thread before static destruction).
  void start(const std::string& dir, int rank, const std::string& host, double period_s = 1.0);
  void stop();
  bool started() const { return thread_.joinable(); }

  void phase(RankPhase p);
  // A training step ended (it is step `step`, counted from 1) after `seconds`.
  void step_done(int64_t step, double seconds);
  // The last save or evaluation took `seconds`: the next one's budget.
  void measured(RankPhase p, double seconds);

  // The slowest of the last 20 steps (0 before the first) and the steps done so far.
  double slowest_recent_step_s() const;
  int64_t step() const { return step_.load(); }
  RankPhase current_phase() const { return static_cast<RankPhase>(phase_.load()); }
  double progress_unix() const { return progress_unix_.load(); }
  // The measured duration of the last save (`p` save) or evaluation (`p` eval); 0 = none yet.
  double expected_s(RankPhase p) const;
  // The file's content now (one JSON object).
  std::string record() const;

 private:
  Heartbeat() = default;
  void write_file() const;

  std::atomic<int> phase_{static_cast<int>(RankPhase::startup)};
  std::atomic<int64_t> step_{0};
  std::atomic<double> progress_unix_{0};
  std::atomic<double> save_s_{0}, eval_s_{0};
  std::atomic<double> first_step_unix_{0};  // when this process finished its first step (0: not yet)
  mutable std::mutex mu_;                   // the recent step times
  std::vector<double> recent_;              // the last 20 step times, oldest first
  std::string path_, host_;
  int rank_ = 0;
  double period_s_ = 1.0;
  bool stop_ = false;  // under wake_mu_
  std::mutex wake_mu_;
  std::condition_variable wake_;
  std::thread thread_;
};

// One rank's heartbeat file as the launcher reads it.
struct HeartbeatRecord {
  int rank = -1;
  std::string host;
  int64_t pid = 0;
  int64_t step = 0;
  std::string phase;              // phase_name()
  double progress_unix = 0;       // when the phase or step last changed
  double beat_unix = 0;           // when the file was last written
  double slowest_step_s = 0;      // the slowest of the rank's last 20 steps (0: none yet)
  double save_s = 0, eval_s = 0;  // its last save's and evaluation's durations (0: none yet)
  double first_step_unix = 0;     // when the process finished its first step (0: not yet)
};

// The heartbeats in `dir` (rank-N.json), unreadable or partial ones skipped.
std::vector<HeartbeatRecord> read_heartbeats(const std::string& dir);

// When a rank counts as stuck.
struct HangRule {
  double fixed_s = 0;              // parallel.collective_timeout_s: no progress for this long (0 = auto)
  double startup_timeout_s = 600;  // schedule.startup_timeout_s: before the first step
  double step_factor = 5;          // auto: this many times the slowest recent step...
  double min_s = 30;               // ...and at least this long
};

// The seconds of no progress after which a rank in `phase` counts as stuck, given the slowest
// recent step over the ranks and the measured save / evaluation durations.
double stuck_after_s(const HangRule& rule, const std::string& phase, int64_t step, double slowest_step_s, double save_s,
                     double eval_s);

// "" while every one of `ranks` ranks progresses, else one line naming the stuck rank (the one whose
// heartbeat stopped, else the one that stopped progressing first), its host, phase and step, and
// for how long. A rank with no file yet counts as starting up since `started_unix`. `stuck_rank`,
// when given, receives the rank's number (-1 when none is stuck).
std::string find_stuck_rank(const std::vector<HeartbeatRecord>& beats, int ranks, double now_unix, double started_unix,
                            const HangRule& rule, int* stuck_rank = nullptr);

// After a stop request the ranks finish their step and save; a step that would run past the save
// lead (schedule.save_safety x the longest measured save + schedule.min_lead_s, at least
// kMinStopGraceS) is abandoned instead: the ranks end, the last committed checkpoint stays.
inline constexpr double kMinStopGraceS = 10;
double stop_grace_s(const std::vector<HeartbeatRecord>& beats, double save_safety, double min_lead_s);

// "" while the ranks may still stop on their own (within the lead since `requested_unix`, saving,
// starting up or done), else one line: the step under way, how long since the request, the lead.
std::string abandoned_step(const std::vector<HeartbeatRecord>& beats, double requested_unix, double now_unix,
                           double save_safety, double min_lead_s);

}  // namespace gtrain
