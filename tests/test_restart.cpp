// test_restart.cpp: keeping a job alive (label multiproc; real ranks under mpirun): a killed rank
// makes gtrain restart the ranks from the last committed checkpoint and the losses are bitwise those
// of an uninterrupted run; a stopped rank is found by its heartbeat within the auto limit, named and
// restarted; a failure that repeats ends the stage after schedule.max_restarts with its cause; a stop
// request during start-up ends the stage there, every rank agreeing.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/support/multiproc_util.h"

namespace gtrain {
namespace {

namespace fs = std::filesystem;

std::string long_mlp(int64_t steps, int64_t interval) {
  std::string text = mlp_job(steps);
  text += "[checkpoint]\ninterval = " + std::to_string(interval) + "\n";
  return text;
}

// The step and pid rank `rank`'s heartbeat shows (0, 0 before it writes one).
std::pair<int64_t, int> heartbeat_of(const std::string& run_dir, int rank) {
  const auto text = test::read_file(run_dir + "/.heartbeat/rank-" + std::to_string(rank) + ".json");
  const auto j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_object()) return {0, 0};
  return {j.value("step", int64_t{0}), static_cast<int>(j.value("pid", int64_t{0}))};
}

struct Disrupted {
  test::CommandResult result;
  double seconds = 0;      // the whole run
  double signal_unix = 0;  // when rank 1 got the signal
  std::vector<nlohmann::json> restarts;
};

// Runs `config` on `ranks` ranks, sends `signo` to rank `target` once its heartbeat passes
// `at_step`, and waits for gtrain to end.
Disrupted disrupt(const test::TempDir& dir, const std::string& config, int signo, int64_t at_step,
                  const std::vector<std::string>& sets = {}, int ranks = 2, int target = 1) {
  test::write_file(dir.file("job.toml"), config);
  std::string cmd = GTRAIN_BINARY + " run " + dir.file("job.toml") + " --ranks " + std::to_string(ranks) +
                    " --run-dir " + dir.file("run");
  for (const auto& s : sets) cmd += " --set " + s;
  Disrupted d;
  std::thread killer([&] {
    for (int i = 0; i < 12000; ++i) {  // 10 minutes at most: a loaded machine trains slowly
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const auto [step, pid] = heartbeat_of(dir.file("run"), target);
      if (step >= at_step && pid > 0) {
        d.signal_unix = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
        ::kill(pid, signo);
        return;
      }
    }
  });
  const auto t0 = std::chrono::steady_clock::now();
  d.result = test::run_command(cmd);
  killer.join();
  d.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const auto& l : test::lines(test::read_file(dir.file("run/restarts.jsonl")))) {
    d.restarts.push_back(nlohmann::json::parse(l));
  }
  return d;
}

// SIGKILL of one rank mid-step: the stage restarts from its last checkpoint in the same allocation
// and finishes; every step's loss is bitwise the uninterrupted run's.
TEST(Restart, KilledRankRestartsAndTheLossesAreBitwiseTheUninterruptedRuns) {
  const std::string config = long_mlp(12000, 1500);
  test::TempDir plain_dir, dir;
  test::write_file(plain_dir.file("job.toml"), config);
  const auto plain = test::run_command(GTRAIN_BINARY + " run " + plain_dir.file("job.toml") + " --ranks 2 --run-dir " +
                                       plain_dir.file("run"));
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  const Disrupted d = disrupt(dir, config, SIGKILL, 4000);
  ASSERT_EQ(d.result.exit_code, 0) << d.result.output;
  ASSERT_EQ(d.restarts.size(), 2u) << d.result.output;  // the restart, then its recovery
  EXPECT_EQ(d.restarts[0].at("kind"), "restart");
  // The dead rank named, with its host and what its last heartbeat said it was doing.
  const std::string cause = d.restarts[0].at("cause").get<std::string>();
  EXPECT_EQ(cause.rfind("rank 1 (", 0), 0u) << cause;
  EXPECT_NE(cause.find(" after step "), std::string::npos) << cause;
  EXPECT_NE(cause.find(" ended by signal 9 (Killed)"), std::string::npos) << cause;
  EXPECT_GE(d.restarts[0].at("resume_step").get<int64_t>(), 3000);
  EXPECT_EQ(d.restarts[0].at("steps_lost").get<int64_t>(),
            d.restarts[0].at("step_reached").get<int64_t>() - d.restarts[0].at("resume_step").get<int64_t>());
  EXPECT_EQ(d.restarts[1].at("kind"), "recovered");
  EXPECT_LT(d.restarts[1].at("seconds").get<double>(), 10.0);  // detection to the first step after it
  EXPECT_NE(d.result.output.find("gtrain: restarting the ranks (restart 1 of 2"), std::string::npos) << d.result.output;
  const auto a = train_losses(plain_dir.file("run/metrics.jsonl")), b = train_losses(dir.file("run/metrics.jsonl"));
  ASSERT_EQ(a.size(), 12000u);
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << "step " << i + 1;
  // The stage's ledger line counts the restart.
  const auto stages = test::lines(test::read_file(dir.file("run/stages.jsonl")));
  ASSERT_FALSE(stages.empty());
  EXPECT_EQ(nlohmann::json::parse(stages.back()).value("restarts", 0), 1) << stages.back();
}

// One rank is supervised as several are (no mpirun: the worker is gtrain's child): killed, it
// restarts from its checkpoint and the losses are bitwise the uninterrupted run's; with
// schedule.max_restarts = 0 the worker replaces gtrain, as before restarts existed.
TEST(Restart, OneRankJobIsRestartedAfterAKill) {
  const std::string config = long_mlp(6000, 1000);
  test::TempDir plain_dir, dir;
  test::write_file(plain_dir.file("job.toml"), config);
  const auto plain = test::run_command(GTRAIN_BINARY + " run " + plain_dir.file("job.toml") + " --ranks 1 --run-dir " +
                                       plain_dir.file("run") + " --set schedule.max_restarts=0");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  const Disrupted d = disrupt(dir, config, SIGKILL, 2500, {}, /*ranks=*/1, /*target=*/0);
  ASSERT_EQ(d.result.exit_code, 0) << d.result.output;
  ASSERT_EQ(d.restarts.size(), 2u) << d.result.output;
  const std::string cause = d.restarts[0].at("cause").get<std::string>();
  EXPECT_EQ(cause.rfind("rank 0 (", 0), 0u) << cause;
  EXPECT_NE(cause.find(") in "), std::string::npos) << cause;
  EXPECT_NE(cause.find(" ended by signal 9 (Killed)"), std::string::npos) << cause;
  EXPECT_GE(d.restarts[0].at("resume_step").get<int64_t>(), 2000);
  EXPECT_EQ(d.restarts[1].at("kind"), "recovered");
  EXPECT_LT(d.restarts[1].at("seconds").get<double>(), 10.0);
  const auto a = train_losses(plain_dir.file("run/metrics.jsonl")), b = train_losses(dir.file("run/metrics.jsonl"));
  ASSERT_EQ(a.size(), 6000u);
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << "step " << i + 1;
  // No restart without supervision: the one rank was gtrain itself.
  EXPECT_FALSE(fs::exists(plain_dir.file("run/restarts.jsonl")));
}

// A rank that stops (SIGSTOP: its heartbeat thread stops too) is found with the default settings
// within max(5 x the slowest recent step, 30 s) (steps of a millisecond: 30 s, plus the watch's
// one-second poll), named with its host, phase and step, and the ranks restart and finish.
TEST(Restart, StoppedRankIsFoundNamedAndRestarted) {
  test::TempDir dir;
  const Disrupted d = disrupt(dir, long_mlp(20000, 2000), SIGSTOP, 5000);
  EXPECT_EQ(d.result.exit_code, 0) << d.result.output;
  const auto at = d.result.output.find("gtrain: error: rank 1 (");
  ASSERT_NE(at, std::string::npos) << d.result.output;
  const std::string line = d.result.output.substr(at, d.result.output.find('\n', at) - at);
  EXPECT_NE(line.find("made no progress for"), std::string::npos) << line;
  EXPECT_NE(line.find("(limit 30 s); its heartbeat stopped too"), std::string::npos) << line;
  EXPECT_NE(line.find(" after step "), std::string::npos) << line;
  ASSERT_GE(d.restarts.size(), 1u);
  EXPECT_NE(d.restarts[0].at("cause").get<std::string>().find("hang: rank 1"), std::string::npos);
  // Found (and every rank ended, the restart recorded) within 32 s of the stop.
  ASSERT_GT(d.signal_unix, 0);
  // Its last heartbeat showed progress at most a second before the stop, and the watch looks every
  // second: found within 31.5 s of the stop.
  const double found_after = d.restarts[0].at("detected_unix").get<double>() - d.signal_unix;
  EXPECT_GT(found_after, 25.0);
  EXPECT_LT(found_after, 31.5) << d.result.output;
}

// A failure that repeats at once (rank 0 cannot open metrics.jsonl, a directory) ends the stage
// after schedule.max_restarts restarts, exit 1, with the cause; each restart is recorded.
TEST(Restart, RepeatedFailureEndsAfterMaxRestartsWithTheCause) {
  test::TempDir dir;
  test::write_file(dir.file("job.toml"), mlp_job(50));
  fs::create_directories(dir.file("run/metrics.jsonl"));
  const auto r = test::run_command(GTRAIN_BINARY + " run " + dir.file("job.toml") + " --ranks 2 --run-dir " +
                                   dir.file("run") + " --set schedule.max_restarts=1");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("gtrain: restarting the ranks (restart 1 of 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("gtrain: error: the ranks failed again after 1 restart (schedule.max_restarts = 1; no step "
                          "gained since the last one): mpirun exited 1 (a rank failed)"),
            std::string::npos)
      << r.output;
  // One restart (its ranks may have written their first step, rank 0 opening metrics.jsonl after
  // it, and a "recovered" line with it, before failing again).
  int restarts = 0;
  for (const auto& l : test::lines(test::read_file(dir.file("run/restarts.jsonl"))))
    restarts += nlohmann::json::parse(l).at("kind") == "restart";
  EXPECT_EQ(restarts, 1);
}

// A stop signal while the ranks are still building a large model (before their first step): every
// rank agrees at the next start-up point and the stage ends there, exit 3, nothing trained or saved.
TEST(StopRequest, DuringStartUpEndsTheStageBeforeTheFirstStep) {
  test::TempDir dir;
  test::write_file(dir.file("job.toml"), R"(
[model]
name = "gpt"
n_layer = 12
n_head = 12
n_embd = 768
seq_len = 64
vocab = 50304
[data]
kind = "synthetic"
[train]
global_batch = 4
steps = 1000
threads = 1
[log]
progress = "plain"
)");
  const pid_t pid = test::spawn_gtrain("run " + dir.file("job.toml") + " --ranks 2 --run-dir " + dir.file("run"),
                                       dir.file("out.log"));
  // Both ranks are up (their heartbeats exist: the communicator is open) and building the model.
  for (int i = 0; i < 6000; ++i) {
    if (fs::exists(dir.file("run/.heartbeat/rank-0.json")) && fs::exists(dir.file("run/.heartbeat/rank-1.json"))) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid, SIGUSR1);
  const int rc = test::wait_exit(pid);
  const std::string out = test::read_file(dir.file("out.log"));
  EXPECT_EQ(rc, 3) << out;
  EXPECT_NE(out.find("during start-up ("), std::string::npos) << out;
  EXPECT_NE(out.find("the stage ends before its first step, nothing to save; exit 3"), std::string::npos) << out;
  EXPECT_EQ(test::last_train_step(dir.file("run/metrics.jsonl")), 0) << out;
  EXPECT_TRUE(list_checkpoints(dir.file("run/checkpoints")).empty()) << out;
}

}  // namespace
}  // namespace gtrain
