// program_runner.cpp: fork/exec with a pipe, poll with a deadline, kill on timeout.
#include "launcher/base/program_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>

#include "runtime/core/unique_fd.h"

namespace gtrain {

std::optional<std::string> run_program(const std::vector<std::string>& argv, double timeout_s) {
  if (argv.empty()) return std::nullopt;
  Pipe pipe = make_pipe();
  if (!pipe.read) return std::nullopt;
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = fork();
  if (pid < 0) return std::nullopt;
  if (pid == 0) {
    // Child: stdout to the pipe, stdin/stderr to /dev/null, own process group so a timeout
    // kills anything it started.
    setpgid(0, 0);
    sigset_t none;  // a caller's blocked signals (the launcher's, a sampling thread's) are not the program's
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    const int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
      dup2(devnull, 0);
      dup2(devnull, 2);
    }
    dup2(pipe.write.get(), 1);
    execvp(args[0], args.data());
    _exit(127);
  }
  pipe.write.reset();
  std::string out;
  bool timed_out = false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  char buf[8192];
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p{pipe.read.get(), POLLIN, 0};
    const int r = poll(&p, 1, static_cast<int>(left.count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      timed_out = r == 0;
      if (r < 0) timed_out = true;
      break;
    }
    const ssize_t n = read(pipe.read.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // EOF
    if (out.size() < (4u << 20)) out.append(buf, static_cast<size_t>(n));
  }
  pipe.read.reset();
  // The child may close stdout and keep running: wait for it only until the deadline.
  int status = 0;
  bool reaped = false;
  while (!timed_out) {
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid) {
      reaped = true;
      break;
    }
    if (w < 0 && errno != EINTR) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      timed_out = true;
      break;
    }
    usleep(2000);
  }
  if (!reaped) {
    kill(-pid, SIGKILL);
    kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    return std::nullopt;
  }
  if (timed_out || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
  return out;
}

CommandRunner system_command_runner(double timeout_s) {
  return [timeout_s](const std::vector<std::string>& argv) { return run_program(argv, timeout_s); };
}

CommandRunner no_command_runner() {
  return [](const std::vector<std::string>&) -> std::optional<std::string> { return std::nullopt; };
}

}  // namespace gtrain
