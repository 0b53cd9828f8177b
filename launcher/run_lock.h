// run_lock.h: one gtrain run per run directory: an flock on <run dir>/.lock, held for the life of
// the process (and of mpirun, which inherits it), so a second run on the same directory is refused.
#pragma once

#include <memory>
#include <string>

namespace gtrain {

class RunLock {
 public:
  // Throws ConfigError naming the directory and the holder's pid when it is taken.
  static std::unique_ptr<RunLock> acquire(const std::string& run_dir);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

 private:
  explicit RunLock(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace gtrain
