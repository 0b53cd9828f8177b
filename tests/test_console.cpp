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

#include "runtime/checkpoint/checkpoint_dirs.h"
#include "tests/test_util.h"

namespace gtrain {
namespace {

namespace fs = std::filesystem;
using test::run_command;

const std::string kJob = R"(
[model]
name = "gpt"
n_layer = 2
n_head = 2
n_embd = 32
seq_len = 16
vocab = 32
[data]
kind = "synthetic"
[train]
global_batch = 12
steps = 60
threads = 1
[checkpoint]
interval = 20
[log]
progress = "plain"
interval = 1
)";

std::vector<nlohmann::json> read_jsonl(const std::string& path) {
  std::vector<nlohmann::json> out;
  for (const auto& l : test::lines(test::read_file(path))) out.push_back(nlohmann::json::parse(l));
  return out;
}

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// `gtrain run ... | head -2`: the console is gone after two lines; the run trains to its end, saves
// and records the stage, and exits 0 (it ended by SIGPIPE, 141, with nothing saved).
TEST(Console, ClosedPipeDoesNotEndTheRun) {
  for (int ranks : {1, 2}) {
    test::TempDir dir;
    test::write_file(dir.file("job.toml"), kJob);
    const std::string cmd = "bash -c '" GTRAIN_BINARY " run " + dir.file("job.toml") + " --run-dir " + dir.file("run") +
                            " --ranks " + std::to_string(ranks) +
                            " 2>&1 | head -2 >/dev/null; echo exit=${PIPESTATUS[0]}'";
    const auto r = run_command(cmd);
    EXPECT_NE(r.output.find("exit=0"), std::string::npos) << ranks << " ranks: " << r.output;
    EXPECT_EQ(test::last_train_step(dir.file("run/metrics.jsonl")), 60) << ranks << " ranks";
    const auto stages = read_jsonl(dir.file("run/stages.jsonl"));
    ASSERT_EQ(stages.size(), 1u) << ranks << " ranks";
    EXPECT_EQ(stages[0].at("exit"), "completed");
    const auto ckpts = committed_checkpoint_dirs(dir.file("run/checkpoints"));
    ASSERT_FALSE(ckpts.empty());
    EXPECT_EQ(ckpts.back().first, 60);
  }
}

// Starts `args` (gtrain run ...) with its output in `log`; returns its pid.
pid_t spawn(const std::string& args, const std::string& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    execl("/bin/sh", "sh", "-c", ("exec " GTRAIN_BINARY " " + args).c_str(), nullptr);
    _exit(127);
  }
  return pid;
}

int wait_exit(pid_t pid) {
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
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
    const pid_t pid = spawn("run " + dir.file("job.toml") + " --run-dir " + dir.file("run") + " --ranks " +
                                std::to_string(c.ranks) + " --set train.steps=1000000" + (c.quiet ? " --quiet" : ""),
                            dir.file("out.log"));
    for (int i = 0; i < 3000 && test::last_train_step(dir.file("run/metrics.jsonl")) < 3; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    kill(pid, SIGINT);
    const int rc = wait_exit(pid);
    const std::string out = test::read_file(dir.file("out.log"));
    EXPECT_EQ(rc, 3) << out;
    if (c.quiet) {
      EXPECT_EQ(out.find("Interrupt"), std::string::npos) << c.ranks << " ranks --quiet: " << out;
    } else {
      EXPECT_EQ(count(out, c.notice), 1u) << c.ranks << " ranks: " << out;
    }
  }
}

// Every rank refuses the same start (every checkpoint damaged): the error is printed once, not
// once per rank.
TEST(Console, SameErrorFromEveryRankIsPrintedOnce) {
  test::TempDir dir;
  test::write_file(dir.file("job.toml"), kJob);
  const std::string run = GTRAIN_BINARY " run " + dir.file("job.toml") + " --run-dir " + dir.file("run") +
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
  EXPECT_EQ(count(r.output, "] gtrain: checkpoint error: " + dir.file("run") + " has saved before"), 1u) << r.output;
  // Several ranks got to it before the job was torn down (the first's MPI_Abort): a line says which.
  if (r.output.find(" reported the same error, shown once above from rank ") == std::string::npos)
    std::cout << "note: only one rank reported before the abort\n";
  EXPECT_LE(count(r.output, "hint: --no-resume starts the run over"), 1u) << r.output;
}

}  // namespace
}  // namespace gtrain
