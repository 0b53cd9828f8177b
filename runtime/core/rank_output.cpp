// rank_output.cpp: "[rank N] " prefixes via pipes and forwarding threads.
#include "runtime/core/rank_output.h"

#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <thread>

#include "runtime/core/errors.h"

#include "runtime/core/unique_fd.h"

namespace gtrain {
namespace {

struct Forwarder {
  UniqueFd original;  // dup of the original fd
  UniqueFd read_end;  // the pipe the fd now writes into
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

// What a signal handler may read: the original stderr while the prefix is on, and the prefix.
std::atomic<int> g_fatal_fd{STDERR_FILENO};
char g_fatal_prefix[32] = {};

void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w <= 0) return;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

// Copies the pipe to the original fd, inserting the prefix at each line start ('\n' or '\r'). Whole
// lines go out in one write, so lines of several ranks never interleave inside a line (a message
// written in pieces, as std::cerr << a << b does, is joined here); a line still unfinished after
// 200 ms without more output, or longer than 64 KiB, goes out as it is.
void forward(int in, int out, const std::string& prefix) {
  char buf[4096];
  bool at_line_start = true;
  std::string pending;  // prefixed text not written yet
  size_t complete = 0;  // pending[0, complete) ends with a line end
  for (;;) {
    pollfd p{in, POLLIN, 0};
    const int ready = ::poll(&p, 1, pending.empty() ? -1 : 200);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) {  // quiet: flush the unfinished line
      write_all(out, pending.data(), pending.size());
      pending.clear();
      complete = 0;
      continue;
    }
    ssize_t n = ::read(in, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; ++i) {
      if (at_line_start && buf[i] != '\n') {
        pending += prefix;
        at_line_start = false;
      }
      pending += buf[i];
      if (buf[i] == '\n' || buf[i] == '\r') {
        at_line_start = true;
        complete = pending.size();
      }
    }
    if (pending.size() > 65536) complete = pending.size();
    if (complete > 0) {
      write_all(out, pending.data(), complete);
      pending.erase(0, complete);
      complete = 0;
    }
  }
  write_all(out, pending.data(), pending.size());
}

void redirect(Forwarder& f, int fd, const std::string& prefix) {
  Pipe pipe = make_pipe(0);
  if (!pipe.read) return;
  f.original.reset(::dup(fd));
  ::dup2(pipe.write.get(), fd);
  f.read_end = std::move(pipe.read);
  f.thread = std::thread(forward, f.read_end.get(), f.original.get(), prefix);
}

void restore(Forwarder& f, int fd) {
  if (!f.original) return;
  ::dup2(f.original.get(), fd);  // closes the pipe's last write end: the thread sees EOF
  if (f.thread.joinable()) f.thread.join();
  f.read_end.reset();
  f.original.reset();
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
  std::strncpy(g_fatal_prefix, s.prefix.c_str(), sizeof(g_fatal_prefix) - 1);
  g_fatal_fd.store(s.err.original.get());
  s.active = true;
}

void stop_rank_output_prefix() {
  auto& s = state();
  if (!s.active) return;
  std::cout.flush();
  std::cerr.flush();
  std::fflush(stdout);
  std::fflush(stderr);
  g_fatal_fd.store(STDERR_FILENO);
  g_fatal_prefix[0] = '\0';
  restore(s.out, STDOUT_FILENO);
  restore(s.err, STDERR_FILENO);
  s.active = false;
}

void write_fatal_line(const std::string& line) {
  auto& s = state();
  std::string text = (s.active ? s.prefix : std::string()) + line + "\n";
  std::fflush(stdout);
  std::fflush(stderr);
  write_all(s.active ? s.err.original.get() : STDERR_FILENO, text.data(), text.size());
}

void write_fatal_parts_signal_safe(const char* const* parts, size_t count) {
  const int fd = g_fatal_fd.load();
  write_all(fd, g_fatal_prefix, ::strnlen(g_fatal_prefix, sizeof(g_fatal_prefix)));
  for (size_t i = 0; i < count; ++i) write_all(fd, parts[i], ::strlen(parts[i]));
  write_all(fd, "\n", 1);
}

int fail_process(const std::string& message, int exit_code) {
  write_fatal_line(message);
  const auto& ctx = ProcessContext::get();
  if (ctx.world_size > 1 && ctx.abort_job) ctx.abort_job(exit_code);
  stop_rank_output_prefix();
  return exit_code;
}

}  // namespace gtrain
