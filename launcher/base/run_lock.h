// run_lock.h: one gtrain run per run directory and per checkpoint directory: an flock on
// <dir>/.lock, held for the life of the process (and of mpirun, which inherits it), so a second run
// on the same directory, or writing into the same checkpoint.dir from another run directory, is refused.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/core/unique_fd.h"

namespace gtrain {

class RunLock {
 public:
  // Locks the run directory and the run's checkpoint directory (checkpoint_directory(): checkpoint.dir
  // or <run dir>/checkpoints) unless it is the run directory itself. Throws BusyError (exit code 4)
  // naming the directory and the holder's pid when either is taken.
  static std::unique_ptr<RunLock> acquire(const std::string& run_dir, const std::string& checkpoint_dir);
  // The pid the last run to hold `dir`'s lock wrote into <dir>/.lock (0 when none), and whether a
  // live process holds it now.
  static int64_t holder_pid(const std::string& dir);
  static bool held(const std::string& dir);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  RunLock() = default;
  std::vector<UniqueFd> fds_;  // one flock-ed .lock per directory
};

}  // namespace gtrain
