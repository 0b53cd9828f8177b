// test_mpirun_output.cpp: mpirun's output on its way to gtrain's console: Open MPI's abort banner
// dropped, an error every rank reports alike shown once, everything else passed unchanged.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <string>

#include "launcher/launch/mpirun_output.h"

// mpirun's stderr passes through gtrain: Open MPI's MPI_ABORT banner after a rank's one-line error
// goes, and nothing else does (start-up failure reasons, "exited on signal" lines, a rank's text).
TEST(MpirunOutput, AbortBannerIsDroppedAndEverythingElsePasses) {
  const std::string dashes(74, '-');
  const std::string error = "[rank 0] gtrain: error: run/metrics.jsonl: cannot open metrics file [rank 0 on vm]\n";
  const std::string banner = dashes + "\nMPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD\n" +
                             "with errorcode 1.\n\nNOTE: invoking MPI_ABORT causes Open MPI to kill all MPI "
                             "processes.\nYou may or may not see output from other processes, depending on\n" +
                             "exactly when Open MPI kills them.\n" + dashes + "\n";
  const std::string after =
      "[vm:123] 1 more process has sent help message help-mpi-api.txt / mpi-abort\n"
      "[vm:123] Set MCA parameter \"orte_base_help_aggregate\" to 0 to see all help / error "
      "messages\n[vm:123] [[1,0],0] ORTE_ERROR_LOG: Out of resource in file "
      "../../../orte/util/show_help.c at line 507\n";
  const std::string signal_line =
      "mpirun noticed that process rank 1 with PID 7 on node vm exited on signal 9 (Killed).\n";
  {
    gtrain::MpirunStderrFilter f;
    std::string out = f.feed(error + banner + after + signal_line);
    out += f.finish();
    EXPECT_EQ(out, error + signal_line);
    EXPECT_TRUE(f.dropped());
    EXPECT_EQ(f.noticed_rank(), 1);  // the dead rank and its host, for the restart's cause
    EXPECT_EQ(f.noticed_host(), "vm");
  }
  {  // the same a byte at a time
    gtrain::MpirunStderrFilter f;
    std::string out;
    for (char c : error + banner + after + signal_line) out += f.feed(std::string(1, c));
    out += f.finish();
    EXPECT_EQ(out, error + signal_line);
  }
  {  // Open MPI's other framed messages (here a start-up failure) pass whole, in order
    const std::string slots = dashes + "\nThere are not enough slots available in the system to satisfy the 4\n" +
                              "slots that were requested by the application:\n\n  gtrain-worker\n" + dashes + "\n";
    gtrain::MpirunStderrFilter f;
    std::string out = f.feed(slots + error) + f.finish();
    EXPECT_EQ(out, slots + error);
    EXPECT_FALSE(f.dropped());
    EXPECT_EQ(f.noticed_rank(), -1);
  }
  {  // a rank that exited non-zero is named by mpirun's "Process name" line
    const std::string nonzero = dashes + "\nmpirun detected that one or more processes exited with non-zero status, " +
                                "thus causing\nthe job to be terminated. The first process to do so was:\n\n" +
                                "  Process name: [[22845,1],3]\n  Exit code:    1\n" + dashes + "\n";
    gtrain::MpirunStderrFilter f;
    f.feed(nonzero);
    f.finish();
    EXPECT_EQ(f.noticed_rank(), 3);
    EXPECT_EQ(f.noticed_host(), "");
  }
  {  // the aggregation hint alone, and other ORTE_ERROR_LOG lines, are not the abort's: they pass
    const std::string hint = "[vm:1] Set MCA parameter \"orte_base_help_aggregate\" to 0 to see all help\n";
    const std::string other = "[vm:1] [[1,0],0] ORTE_ERROR_LOG: Not found in file plm_base_launch_support.c\n";
    gtrain::MpirunStderrFilter f;
    EXPECT_EQ(f.feed(hint + other) + f.finish(), hint + other);
  }
  {  // a block opening like the banner but running past its length is not the banner: all of it passes
    std::string text = dashes + "\nMPI_ABORT was invoked on rank 3 in communicator X\n";
    for (int i = 0; i < 12; ++i) text += "line " + std::to_string(i) + "\n";
    gtrain::MpirunStderrFilter f;
    EXPECT_EQ(f.feed(text) + f.finish(), text);
  }
  {  // the start of a line goes out at once (progress bars' "\r" updates), and its rest as it comes
    gtrain::MpirunStderrFilter f;
    EXPECT_EQ(f.feed("\rprogress 1"), "\rprogress 1");
    EXPECT_EQ(f.feed("\rprogress 2"), "\rprogress 2");
    EXPECT_EQ(f.feed(" done\n[rank 1] step 4"), " done\n[rank 1] step 4");
    EXPECT_EQ(f.feed(" [[1,0],0] ORTE_ERROR_LOG: in util/show_help.c\n"),
              " [[1,0],0] ORTE_ERROR_LOG: in util/show_help.c\n");  // the rest of a line let out: unexamined
    // A start that may become a dropped line waits for its newline, or a quiet moment.
    EXPECT_EQ(f.feed("---"), "");
    EXPECT_EQ(f.idle(), "---");
    EXPECT_EQ(f.feed("-- not a banner\n[vm:1] 1 more process has sent"), "-- not a banner\n");
    EXPECT_EQ(f.feed(" help message help-mpi-api.txt / mpi-abort\n"), "");      // dropped, in two pieces
    EXPECT_EQ(f.feed(dashes + "\nThere are not"), dashes + "\nThere are not");  // a separator, then not the banner
    EXPECT_EQ(f.feed(std::string(5000, '-')).size(), 5000u);  // held no longer than any dropped line is long
    EXPECT_TRUE(f.finish().empty());
  }
  {  // a stream cut inside a banner gives back what it held
    gtrain::MpirunStderrFilter f;
    EXPECT_EQ(f.feed(dashes + "\nMPI_ABORT was invoked on rank 1\n"), "");
    EXPECT_EQ(f.idle(), "");
    EXPECT_EQ(f.finish(), dashes + "\nMPI_ABORT was invoked on rank 1\n");
  }
}

// Ranks that all find the same problem report it alike: shown once, from the first rank, with its
// hint; the others' copies (each naming its own rank and host) and their hints go, and one line at
// the end says which ranks reported it. Different errors, and a rank's other lines, all pass.
TEST(MpirunOutput, SameErrorFromEveryRankIsShownOnce) {
  auto error = [](int rank) {
    return "[rank " + std::to_string(rank) +
           "] gtrain: checkpoint error: run has saved before but nothing is left [rank " + std::to_string(rank) +
           " on vm" + std::to_string(rank % 2) + "]\n  hint: --no-resume starts over\n";
  };
  const std::string other = "[rank 2] gtrain: data error: shard 2 is truncated [rank 2 on vm0]\n";
  const std::string chatter = "[rank 3] step 4 of 9\n";
  std::string in = error(1) + error(0) + chatter + error(3) + other + error(2);
  gtrain::MpirunStderrFilter f;
  std::string out = f.feed(in);
  out += f.finish();
  EXPECT_EQ(out, error(1) + chatter + other +
                     "gtrain: 4 ranks (0-3) reported the same error, shown once above from rank 1: gtrain: checkpoint "
                     "error: run has saved before but nothing is left\n");
  {  // a byte at a time, the same
    gtrain::MpirunStderrFilter g;
    std::string bytes;
    for (char c : in) bytes += g.feed(std::string(1, c));
    EXPECT_EQ(bytes + g.finish(), out);
  }
  {  // one rank: nothing to add
    gtrain::MpirunStderrFilter g;
    std::string one = g.feed(error(5));
    EXPECT_EQ(one + g.finish(), error(5));
  }
  {  // a rank's start of a message waits for its newline (or a quiet moment), other lines pass at once
    gtrain::MpirunStderrFilter g;
    EXPECT_EQ(g.feed("[rank 1] gtrain: warn"), "");
    EXPECT_EQ(g.feed("ing: x\n"), "[rank 1] gtrain: warning: x\n");
    EXPECT_EQ(g.feed("[rank 12] loss 3"), "[rank 12] loss 3");
  }
}

// A console that goes away stops the writing, never the reading: the writer (mpirun) keeps going.
TEST(MpirunOutput, ClosedConsoleKeepsThePipeDrained) {
  ::signal(SIGPIPE, SIG_IGN);  // as gtrain's main() has it (ignore_closed_console)
  int in[2], console[2];
  ASSERT_EQ(::pipe(in), 0);
  ASSERT_EQ(::pipe(console), 0);
  ::close(console[0]);  // the reader of gtrain's stdout (head) is gone
  ::fcntl(in[1], F_SETFL, O_NONBLOCK);
  {
    gtrain::MpirunOutputForwarder forward(in[0], console[1], /*filtered=*/false);
    const std::string chunk(1 << 16, 'x');
    size_t written = 0;
    while (written < (4u << 20)) {  // 4 MiB: far past any pipe buffer, so a reader must be draining it
      pollfd p{in[1], POLLOUT, 0};
      ASSERT_EQ(::poll(&p, 1, 5000), 1) << "nothing drains the pipe after " << written << " bytes";
      const ssize_t n = ::write(in[1], chunk.data(), chunk.size());
      if (n > 0) written += static_cast<size_t>(n);
    }
    ::close(in[1]);
    forward.stop();
  }
  ::close(console[1]);
}
