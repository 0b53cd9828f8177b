// test_rank_output.cpp: the "[rank N] " prefixer: whole lines leave in one write (several ranks'
// lines never interleave inside a line), and an unfinished line still comes out when output pauses.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "runtime/core/rank_output.h"

namespace gtrain {
namespace {

using Clock = std::chrono::steady_clock;

// One read of up to 4 KiB from `fd`, with the time it took.
std::string read_once(int fd, double* seconds) {
  char buf[4096];
  const auto t0 = Clock::now();
  const ssize_t n = ::read(fd, buf, sizeof(buf));
  *seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

TEST(RankOutput, LinesLeaveWholeAndPausedPartialLinesLeaveToo) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::dup2(fds[1], STDERR_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    start_rank_output_prefix(3);
    std::fputs("gtrain: warning: skipping ", stderr);  // a line written in three pieces
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::fputs("checkpoint step_00000004", stderr);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::fputs(": corrupt\n", stderr);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::fputs("progress 1/2\rprogress 2/2\r", stderr);
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    std::fputs("no newline yet", stderr);  // goes out after a 200 ms pause
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    stop_rank_output_prefix();
    std::_Exit(0);
  }
  ::close(fds[1]);
  double s = 0;
  EXPECT_EQ(read_once(fds[0], &s), "[rank 3] gtrain: warning: skipping checkpoint step_00000004: corrupt\n");
  EXPECT_EQ(read_once(fds[0], &s), "[rank 3] progress 1/2\r[rank 3] progress 2/2\r");
  const std::string partial = read_once(fds[0], &s);
  EXPECT_EQ(partial, "[rank 3] no newline yet");
  EXPECT_LT(s, 1.0) << "an unfinished line waited for the next output";
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_EQ(read_once(fds[0], &s), "");  // end of output: nothing was repeated
  ::close(fds[0]);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

}  // namespace
}  // namespace gtrain
