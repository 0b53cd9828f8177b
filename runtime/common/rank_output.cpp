// rank_output.cpp: "[rank N] " prefixes via pipes and forwarding threads.
#include "runtime/common/rank_output.h"

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <thread>

#include "runtime/common/errors.h"

namespace gtrain {
namespace {

struct Forwarder {
  int original = -1;  // dup of the original fd
  int read_end = -1;
  std::thread thread;
};

struct State {
  std::string prefix;
  Forwarder out, err;
  bool active = false;
};

State& state() {
  static State s;
  return s;
}

void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w <= 0) return;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// Copies the pipe to the original fd, inserting the prefix at each line start ('\n' or '\r').
void forward(int in, int out, const std::string& prefix) {
  char buf[4096];
  bool at_line_start = true;
  std::string chunk;
  for (;;) {
    ssize_t n = ::read(in, buf, sizeof(buf));
    if (n <= 0) break;
    chunk.clear();
    for (ssize_t i = 0; i < n; ++i) {
      if (at_line_start && buf[i] != '\n') {
        chunk += prefix;
        at_line_start = false;
      }
      chunk += buf[i];
      if (buf[i] == '\n' || buf[i] == '\r') at_line_start = true;
    }
    write_all(out, chunk.data(), chunk.size());
  }
}

void redirect(Forwarder& f, int fd, const std::string& prefix) {
  int fds[2];
  if (::pipe(fds) != 0) return;
  f.original = ::dup(fd);
  ::dup2(fds[1], fd);
  ::close(fds[1]);
  f.read_end = fds[0];
  f.thread = std::thread(forward, f.read_end, f.original, prefix);
}

void restore(Forwarder& f, int fd) {
  if (f.original < 0) return;
  ::dup2(f.original, fd);  // closes the pipe's last write end: the thread sees EOF
  if (f.thread.joinable()) f.thread.join();
  ::close(f.read_end);
  ::close(f.original);
  f.original = -1;
}

}  // namespace

void start_rank_output_prefix(int rank) {
  auto& s = state();
  if (s.active) return;
  s.prefix = "[rank " + std::to_string(rank) + "] ";
  std::fflush(stdout);
  std::fflush(stderr);
  redirect(s.out, STDOUT_FILENO, s.prefix);
  redirect(s.err, STDERR_FILENO, s.prefix);
  s.active = true;
}

void stop_rank_output_prefix() {
  auto& s = state();
  if (!s.active) return;
  std::cout.flush();
  std::cerr.flush();
  std::fflush(stdout);
  std::fflush(stderr);
  restore(s.out, STDOUT_FILENO);
  restore(s.err, STDERR_FILENO);
  s.active = false;
}

void write_fatal_line(const std::string& line) {
  auto& s = state();
  std::string text = (s.active ? s.prefix : std::string()) + line + "\n";
  std::fflush(stdout);
  std::fflush(stderr);
  write_all(s.active ? s.err.original : STDERR_FILENO, text.data(), text.size());
}

int fail_process(const std::string& message, int exit_code) {
  write_fatal_line(message);
  const auto& ctx = ProcessContext::get();
  if (ctx.world_size > 1 && ctx.abort_job) ctx.abort_job(exit_code);
  stop_rank_output_prefix();
  return exit_code;
}

}  // namespace gtrain
