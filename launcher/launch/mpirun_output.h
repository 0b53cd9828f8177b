// mpirun_output.h: mpirun's output on its way to gtrain's: on stderr Open MPI's MPI_ABORT banner is
// dropped (the rank's one-line error above it says what went wrong) and an error every rank reports
// alike is shown once; everything else passes unchanged. A console that goes away ends nothing.
#pragma once

#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "runtime/core/unique_fd.h"

namespace gtrain {

// Line filter, fed bytes as they come. Drops the block "----- / MPI_ABORT was invoked on rank ... /
// -----" and the aggregation note "N more processes have sent help message help-mpi-api.txt /
// mpi-abort" with its "Set MCA parameter" line, and mpirun's "ORTE_ERROR_LOG: ... show_help.c" lines
// (a help message it failed to unpack while the job was torn down). Any other text, Open MPI's start-up failure reasons
// and "exited on signal" lines included, is returned as it came.
class MpirunStderrFilter {
 public:
  // What to write now for these bytes: complete lines, and the start of a line unless it may still
  // become a line to drop (dashes, or "[" but not "[rank "), which waits for its newline or idle().
  std::string feed(const std::string& bytes);
  // The stream is quiet: whatever is held goes out, except an unfinished banner; the rest of a line
  // let out passes unexamined.
  std::string idle();
  // The stream ended: everything held goes out, a banner cut short included, then for each error
  // that several ranks reported alike (shown once, from the first) a line saying which ranks did.
  std::string finish();
  // Whether a banner was dropped.
  bool dropped() const { return dropped_; }
  // The first rank mpirun reported dead ("mpirun noticed that process rank N with PID P on node H
  // exited on signal S"): its rank and host; -1 and "" when it reported none.
  int noticed_rank() const { return noticed_rank_; }
  const std::string& noticed_host() const { return noticed_host_; }

 private:
  std::string line(const std::string& text);  // one complete line (with its '\n')
  // Whether `text` is a rank's error line ("[rank N] gtrain: ... error: ...") that another rank
  // reported alike before: true drops it (and its hint lines), false shows it.
  bool repeated_error(const std::string& text);
  struct SameError {
    int first_rank = 0;
    std::vector<int> others;  // ranks that reported it after the first
  };
  std::map<std::string, SameError> errors_;  // by the error's text without its rank and host
  std::vector<std::string> error_order_;     // keys in the order they were first seen
  bool dropping_hint_ = false;               // the hint lines of a repeated error go with it
  std::string partial_;                      // bytes after the last newline
  std::string separator_;                    // a dashed line waiting for the line after it
  std::vector<std::string> banner_;          // lines of the banner being dropped
  bool mid_line_ = false;                    // the start of this line went out: its rest passes as is
  bool in_banner_ = false, after_aggregate_note_ = false, dropped_ = false;
  int noticed_rank_ = -1;
  std::string noticed_host_;
};

// Forwards a pipe's read end to `out_fd` (mpirun's stderr: through the filter; its stdout: as it
// comes), on a thread. A closed console (EPIPE: `| head`, a dead tee) stops the writing, not the
// reading: mpirun never blocks on a full pipe nor sees the pipe close, so the job trains on. stop()
// returns once the pipe is at its end, or, when a process mpirun left behind still holds it, quiet
// for 0.2 s (2 s at most).
class MpirunOutputForwarder {
 public:
  explicit MpirunOutputForwarder(int read_fd, int out_fd = 2, bool filtered = true);
  ~MpirunOutputForwarder();
  void stop();
  // What the filter read of a dead rank (MpirunStderrFilter::noticed_rank): valid after stop().
  int noticed_rank() const { return noticed_rank_; }
  const std::string& noticed_host() const { return noticed_host_; }

 private:
  void loop();
  void write_out(const std::string& s);
  UniqueFd fd_;  // the pipe mpirun writes into
  int out_fd_;
  bool filtered_;
  bool console_gone_ = false;
  std::atomic<bool> stopping_{false};
  int noticed_rank_ = -1;
  std::string noticed_host_;
  std::thread thread_;
};

}  // namespace gtrain
