// run_lock.cpp: flock-based run-directory lock.
#include "launcher/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "runtime/common/errors.h"

namespace gtrain {

std::unique_ptr<RunLock> RunLock::acquire(const std::string& run_dir) {
  std::error_code ec;
  std::filesystem::create_directories(run_dir, ec);
  if (ec) throw ConfigError(run_dir + ": cannot create run directory: " + ec.message());
  const std::string path = run_dir + "/.lock";
  // Not close-on-exec: mpirun, which replaces this process, keeps holding it.
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0644);
  if (fd < 0) throw ConfigError(path + ": cannot open lock file: " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    std::string holder;
    std::ifstream(path) >> holder;
    ::close(fd);
    throw ConfigError("run directory " + run_dir + " is in use by another gtrain run" +
                      (holder.empty() ? "" : " (pid " + holder + ")") +
                      "; wait for it to end or choose another --run-dir");
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) == 0) {
    ssize_t w = ::pwrite(fd, pid.data(), pid.size(), 0);
    (void)w;
  }
  return std::unique_ptr<RunLock>(new RunLock(fd));
}

RunLock::~RunLock() {
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
}

}  // namespace gtrain
