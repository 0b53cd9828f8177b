// test_console.cpp: what the console does to a run and says about it: a console that goes away
// (`| head`) ends nothing, a stop signal is announced once (not with --quiet), and an error every
// rank reports alike is printed once.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "runtime/core/checkpoint_dirs.h"
#include "tests/support/test_util.h"
#include "tests/support/tiny_configs.h"

namespace gtrain {
namespace {

namespace fs = std::filesystem;
using test::run_command;

const std::string kJob = test::tiny_job("gpt", {{"model.n_embd", "32"},
                                                {"model.seq_len", "16"},
                                                {"train.global_batch", "12"},
                                                {"train.steps", "60"},
                                                {"train.threads", "1"},
                                                {"checkpoint.interval", "20"},
                                                {"log.progress", "\"plain\""},
                                                {"log.interval", "1"}});

// `gtrain run ... | head -2`: the console is gone after two lines; the run trains to its end, saves
// and records the stage, and exits 0 (it ended by SIGPIPE, 141, with nothing saved).
TEST(Console, ClosedPipeDoesNotEndTheRun) {
  for (int ranks : {1, 2}) {
    test::TempDir dir;
    test::write_file(dir.file("job.toml"), kJob);
    const std::string cmd = "bash -c '" + GTRAIN_BINARY + " run " + dir.file("job.toml") + " --run-dir " +
                            dir.file("run") + " --ranks " + std::to_string(ranks) +
                            " 2>&1 | head -2 >/dev/null; echo exit=${PIPESTATUS[0]}'";
    const auto r = run_command(cmd);
    EXPECT_NE(r.output.find("exit=0"), std::string::npos) << ranks << " ranks: " << r.output;
    EXPECT_EQ(test::last_train_step(dir.file("run/metrics.jsonl")), 60) << ranks << " ranks";
    const auto stages = test::read_jsonl(dir.file("run/stages.jsonl"));
    ASSERT_EQ(stages.size(), 1u) << ranks << " ranks";
    EXPECT_EQ(stages[0].at("exit"), "completed");
    const auto ckpts = committed_checkpoint_dirs(dir.file("run/checkpoints"));
    ASSERT_FALSE(ckpts.empty());
    EXPECT_EQ(ckpts.back().first, 60);
  }
}

// One rank, the worker itself: a Ctrl-C says what happens now, as a multi-rank run's launcher does;
// --quiet says nothing (of a stop request, on either).
TEST(Console, StopRequestIsAnnouncedOnceAndQuietSaysNothing) {
  struct Case {
    int ranks;
    bool quiet;
    const char* notice;
  };
  for (const Case c : {Case{1, false,
                            "gtrain: Interrupt: finishing the step, saving, then exit 3 (TERM or INT again "
                            "exits without saving)"},
                       Case{2, false, "gtrain: Interrupt: every rank finishes its step, saves and exits 3"},
                       Case{1, true, ""}, Case{2, true, ""}}) {
    test::TempDir dir;
    test::write_file(dir.file("job.toml"), kJob);
    const pid_t pid =
        test::spawn_gtrain("run " + dir.file("job.toml") + " --run-dir " + dir.file("run") + " --ranks " +
                               std::to_string(c.ranks) + " --set train.steps=1000000" + (c.quiet ? " --quiet" : ""),
                           dir.file("out.log"));
    for (int i = 0; i < 3000 && test::last_train_step(dir.file("run/metrics.jsonl")) < 3; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    kill(pid, SIGINT);
    const int rc = test::wait_exit(pid);
    const std::string out = test::read_file(dir.file("out.log"));
    EXPECT_EQ(rc, 3) << out;
    if (c.quiet) {
      EXPECT_EQ(out.find("Interrupt"), std::string::npos) << c.ranks << " ranks --quiet: " << out;
    } else {
      EXPECT_EQ(test::count_of(out, c.notice), 1u) << c.ranks << " ranks: " << out;
    }
  }
}

// A hang-up (the terminal closed, the ssh session dropped) is the console going away: the run trains
// to its end, on one rank (the worker itself) and on two (gtrain over mpirun), unless HUP is named in
// schedule.stop_signals, when it saves and exits 3 like the other stop signals.
TEST(Console, HangUpDoesNotEndTheRun) {
  for (const std::string variant : {"1", "2", "2 --set schedule.stop_signals=[\\\"HUP\\\"]"}) {
    test::TempDir dir;
    test::write_file(dir.file("job.toml"), kJob);
    const pid_t pid = test::spawn_gtrain(
        "run " + dir.file("job.toml") + " --run-dir " + dir.file("run") + " --set train.steps=400 --ranks " + variant,
        dir.file("out.log"));
    for (int i = 0; i < 3000 && test::last_train_step(dir.file("run/metrics.jsonl")) < 3; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    kill(pid, SIGHUP);
    const int rc = test::wait_exit(pid);
    const std::string out = test::read_file(dir.file("out.log"));
    const bool stops = variant.find("HUP") != std::string::npos;
    EXPECT_EQ(rc, stops ? 3 : 0) << variant << ": " << out;
    const int last = test::last_train_step(dir.file("run/metrics.jsonl"));
    if (stops) {
      EXPECT_LT(last, 400) << out;
    } else {
      EXPECT_EQ(last, 400) << variant << ": " << out;
    }
    const auto stages = test::read_jsonl(dir.file("run/stages.jsonl"));
    ASSERT_EQ(stages.size(), 1u) << out;
    EXPECT_EQ(stages[0].at("exit").get<std::string>().rfind(stops ? "resumable" : "completed", 0), 0u) << out;
  }
}

// Every rank refuses the same start (every checkpoint damaged): the error is printed once, not
// once per rank.
TEST(Console, SameErrorFromEveryRankIsPrintedOnce) {
  test::TempDir dir;
  test::write_file(dir.file("job.toml"), kJob);
  const std::string run = GTRAIN_BINARY + " run " + dir.file("job.toml") + " --run-dir " + dir.file("run") +
                          " --set train.steps=20 --set log.progress=\\\"none\\\"";
  ASSERT_EQ(run_command(run).exit_code, 0);
  for (const auto& [step, path] : committed_checkpoint_dirs(dir.file("run/checkpoints"))) {
    for (const auto& e : fs::directory_iterator(path)) {
      if (e.path().extension() == ".json") continue;
      const auto size = fs::file_size(e.path());
      std::ofstream(e.path(), std::ios::binary | std::ios::trunc) << std::string(size, '\0');
    }
  }
  const auto r = run_command(run + " --ranks 3");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(test::count_of(r.output, "] gtrain: checkpoint error: " + dir.file("run") + " has saved before"), 1u)
      << r.output;
  // Several ranks got to it before the job was torn down (the first's MPI_Abort): a line says which.
  if (r.output.find(" reported the same error, shown once above from rank ") == std::string::npos)
    std::cout << "note: only one rank reported before the abort\n";
  EXPECT_LE(test::count_of(r.output, "hint: --no-resume starts the run over"), 1u) << r.output;
}

}  // namespace
}  // namespace gtrain
