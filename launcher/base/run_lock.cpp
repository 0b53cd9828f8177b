// run_lock.cpp: flock-based locks on the run directory and the checkpoint directory.
#include "launcher/base/run_lock.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/core/run_dir/run_files.h"

namespace gtrain {

namespace {

// flock on <dir>/.lock; throws naming `what` (run directory / checkpoint directory) when it is taken.
UniqueFd lock_dir(const std::string& dir, const std::string& what, const std::string& hint) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec)
    throw ConfigError(str(dir, ": cannot create ", what, ": ", ec.message()),
                      "check that its parent folder is writable");
  const std::string path = RunDir(dir).path(RunFile::lock);
  // Not close-on-exec: gtrain-worker, which replaces the launcher for one rank, keeps holding it.
  UniqueFd lock(::open(path.c_str(), O_RDWR | O_CREAT, 0644));
  const int fd = lock.get();
  if (fd < 0) {
    throw ConfigError(str(path, ": cannot open lock file: ", std::strerror(errno)),
                      "check that the directory is writable");
  }
  bool locked = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
  // The run that took the lock is gone (its pid is free) while the lock is still held: by its
  // ranks, which inherit the descriptor and die with it (PR_SET_PDEATHSIG) a moment later. Wait
  // for them, up to 10 s, rather than call the directory busy.
  for (int i = 0; !locked && i < 200; ++i) {
    const int64_t holder = RunLock::holder_pid(dir);
    if (holder <= 0 || ::kill(static_cast<pid_t>(holder), 0) == 0 || errno != ESRCH) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    locked = ::flock(fd, LOCK_EX | LOCK_NB) == 0;
  }
  if (!locked) {
    const int64_t holder = RunLock::holder_pid(dir);
    throw BusyError(what + " " + dir + " is in use by another gtrain run" +
                        (holder > 0 ? " (pid " + std::to_string(holder) + ")" : ""),
                    hint);
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) == 0) {
    ssize_t w = ::pwrite(fd, pid.data(), pid.size(), 0);
    (void)w;
  }
  return lock;
}

}  // namespace

std::unique_ptr<RunLock> RunLock::acquire(const std::string& run_dir, const std::string& checkpoint_dir) {
  std::unique_ptr<RunLock> lock(new RunLock());
  lock->fds_.push_back(lock_dir(run_dir, "run directory", "wait for it to end or choose another --run-dir"));
  std::error_code ec;
  if (!checkpoint_dir.empty() &&
      std::filesystem::weakly_canonical(checkpoint_dir, ec) != std::filesystem::weakly_canonical(run_dir, ec)) {
    // When this throws, `lock` releases the run directory again.
    lock->fds_.push_back(lock_dir(checkpoint_dir, "checkpoint directory",
                                  "give each run its own checkpoint.dir (two runs would prune each other's "
                                  "checkpoints)"));
  }
  return lock;
}

int64_t RunLock::holder_pid(const std::string& dir) {
  std::ifstream in(RunDir(dir).path(RunFile::lock));
  int64_t pid = 0;
  in >> pid;
  return in ? pid : 0;
}

bool RunLock::held(const std::string& dir) {
  const std::string path = RunDir(dir).path(RunFile::lock);
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return false;
  return ::flock(fd.get(), LOCK_SH | LOCK_NB) != 0;  // closing drops the shared lock when it was taken
}

RunLock::~RunLock() {
  // Unlocked first: a child that inherited a descriptor (not close-on-exec) would keep the lock.
  for (const auto& fd : fds_) ::flock(fd.get(), LOCK_UN);
}

}  // namespace gtrain
