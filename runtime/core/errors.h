// errors.h: the gtrain exception hierarchy, the process context it reports, and GT_CHECK.
//
// The recipe: the message says what is wrong and names what the user gave (the file and key, the
// flag, the variable, the path) and what was expected; the hint, when the message alone does not
// make it plain, says what to do about it. format_error adds which rank and host raised it, and an
// internal error (GT_CHECK) where (file:line). Errors are thrown anywhere and caught only in main(),
// which maps them to exit codes (see ExitCode).
#pragma once

#include <stdexcept>
#include <string>

namespace gtrain {

// Process exit codes, documented in README.md.
enum ExitCode : int {
  kExitOk = 0,
  kExitFailure = 1,    // a runtime failure (communication, checkpoint, internal)
  kExitUsage = 2,      // bad configuration, flag or input file
  kExitResumable = 3,  // a stage ended early (signal or deadline) after saving; resume later
  kExitBusy = 4,       // the run (or checkpoint) directory is in use by another gtrain run: nothing done; retry
};

// Who is reporting: set once at start-up, then by the communicator when ranks are known.
struct ProcessContext {
  int rank = 0;
  int world_size = 1;
  std::string host;
  // Stops every rank of the job with this exit code (set by the MPI communicator); null = one process.
  void (*abort_job)(int exit_code) = nullptr;
  static ProcessContext& get();
};

class Error : public std::runtime_error {
 public:
  Error(const std::string& what, std::string hint = {}, const char* file = nullptr, int line = 0);
  const std::string& hint() const { return hint_; }
  const std::string& location() const { return location_; }
  virtual int exit_code() const { return kExitFailure; }
  virtual const char* kind() const { return "error"; }
  // Whether restarting the ranks (schedule.max_restarts) could get past it: false for an error
  // that repeats by construction from the same checkpoint (DeterministicError).
  virtual bool retryable() const { return true; }

 private:
  std::string hint_;
  std::string location_;  // "file:line" of the throw site, empty for user-facing input errors
};

// Bad configuration, CLI flag or input file: one clear line, exit code 2.
class ConfigError : public Error {
 public:
  using Error::Error;
  int exit_code() const override { return kExitUsage; }
  const char* kind() const override { return "config error"; }
};

// The command line itself: a missing or unknown (sub)command. Exit code 2, like other bad input.
class UsageError : public ConfigError {
 public:
  using ConfigError::ConfigError;
  const char* kind() const override { return "usage error"; }
};

// Another gtrain run holds the run (or checkpoint) directory: nothing was changed, and the same
// command can succeed once that run ends, so a retrying wrapper tells it from bad input by its own
// exit code.
class BusyError : public Error {
 public:
  using Error::Error;
  int exit_code() const override { return kExitBusy; }
  const char* kind() const override { return "busy"; }
};

class DataError : public ConfigError {
 public:
  using ConfigError::ConfigError;
  const char* kind() const override { return "data error"; }
};

class CommError : public Error {
 public:
  using Error::Error;
  const char* kind() const override { return "communication error"; }
};

class CheckpointError : public Error {
 public:
  using Error::Error;
  const char* kind() const override { return "checkpoint error"; }
};

// A checkpoint that this run's configuration cannot resume (another model, global batch or
// optimizer, or settings changed so that the resume check fails): the configuration is what to
// fix, so exit code 2 like other bad input.
class ResumeMismatchError : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
  int exit_code() const override { return kExitUsage; }
};

// An error a restart from the same checkpoint would meet again, step for step (the loss diverging
// on the same data and weights): the launcher ends the stage on it instead of restarting.
class DeterministicError : public Error {
 public:
  using Error::Error;
  bool retryable() const override { return false; }
};

// A checkpoint whose probe loss does not come back after loading: it loads the same way each time.
class ProbeMismatchError : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
  bool retryable() const override { return false; }
};

// The disk is full or the file system read-only (ENOSPC, EDQUOT, EROFS): a restart would write to the
// same disk and meet it again, so the stage ends at once. The message names the path and the writer
// that needed the space; the hint what holds the space (checkpoints and checkpoint.keep).
class DiskFullError : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
  const char* kind() const override { return "disk full"; }
  bool retryable() const override { return false; }
};

// Whether an errno repeats by construction on the same disk (ENOSPC, EDQUOT, EROFS).
bool is_disk_full_errno(int err);

class TimeoutError : public Error {
 public:
  using Error::Error;
  const char* kind() const override { return "timeout"; }
};

// Formats an error for the terminal as one line: "gtrain: <kind>: <message>" plus rank/host for
// multi-rank runs, plus "; hint: ..." when there is one.
std::string format_error(const Error& e);

// The first line of an exception's text (LibTorch's carry a stack trace after it), for one-line
// messages that quote a foreign exception.
std::string first_line(const std::string& text);

}  // namespace gtrain

// Throw an internal error with file:line when a condition fails.
#define GT_CHECK(cond, msg)                                            \
  do {                                                                 \
    if (!(cond)) throw ::gtrain::Error((msg), {}, __FILE__, __LINE__); \
  } while (0)
