// test_ledger.cpp: the stage ledger and gtrain status against real one-rank runs: a stage whose
// launcher was killed (kill -9) is added by the next start from metrics.jsonl, with the time it
// trained; gtrain status shows the stage running now; chain stages share the ledger's numbering
// (label cpu).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "launcher/chain/chain.h"
#include "launcher/commands/submit_command.h"
#include "tests/support/test_util.h"
#include "tests/support/tiny_configs.h"

namespace fs = std::filesystem;
using namespace gtrain;

namespace {

const std::string kGpt = test::tiny_job("gpt_small", {{"train.steps", "100000"}, {"checkpoint.interval", "5"}});

bool wait_for_step(const std::string& metrics, int step) {
  for (int i = 0; i < 6000; ++i) {
    if (test::last_train_step(metrics) >= step) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

std::vector<nlohmann::json> ledger(const std::string& run) {
  std::vector<nlohmann::json> out;
  for (const auto& l : test::lines(test::read_file(run + "/stages.jsonl"))) out.push_back(nlohmann::json::parse(l));
  return out;
}

}  // namespace

// kill -9 of gtrain run: nothing writes the stage's record then. The next start adds it from what
// metrics.jsonl shows (steps, the time it trained) and names the pid the lock file held.
TEST(Ledger, StageWhoseLauncherWasKilledIsAddedByTheNextStart) {
  test::TempDir dir;
  test::write_file(dir.file("job.toml"), kGpt);
  const std::string run = dir.file("run");
  const pid_t pid = test::spawn_gtrain("run " + dir.file("job.toml") + " --run-dir " + run, dir.file("first.log"));
  ASSERT_TRUE(wait_for_step(run + "/metrics.jsonl", 12)) << test::read_file(dir.file("first.log"));
  kill(pid, SIGKILL);
  EXPECT_EQ(test::wait_exit(pid), 128 + SIGKILL);
  const int killed_at = test::last_train_step(run + "/metrics.jsonl");
  EXPECT_TRUE(ledger(run).empty()) << "nothing could record the killed stage";

  const auto second = test::run_command(GTRAIN_BINARY + " run " + dir.file("job.toml") + " --run-dir " + run +
                                        " --set train.steps=" + std::to_string(killed_at + 5));
  EXPECT_EQ(second.exit_code, 0) << second.output;
  EXPECT_NE(second.output.find("had no record of the stage that trained steps 0-" + std::to_string(killed_at)),
            std::string::npos)
      << second.output;
  const auto st = ledger(run);
  ASSERT_EQ(st.size(), 2u) << second.output;
  const auto& lost = st[0];
  EXPECT_EQ(lost.at("step_from"), 0) << lost.dump();
  EXPECT_EQ(lost.at("step_to"), killed_at) << lost.dump();
  EXPECT_EQ(lost.at("samples"), 16 * killed_at) << lost.dump();
  EXPECT_EQ(lost.at("reported_by"), "next start") << lost.dump();
  EXPECT_NE(lost.at("exit").get<std::string>().find("failed: its launcher (pid " + std::to_string(pid) + ")"),
            std::string::npos)
      << lost.dump();
  // The time it trained, not 0: within the stage's wall time, and at least its steps' share of it.
  const double productive = lost.at("productive_s").get<double>();
  const double wall = lost.at("end").get<double>() - lost.at("start").get<double>();
  EXPECT_GT(productive, 0.0) << lost.dump();
  EXPECT_LE(productive, wall + 0.05) << lost.dump();
  EXPECT_EQ(st[1].at("exit"), "completed") << st[1].dump();
  EXPECT_LE(st[1].at("step_from").get<int64_t>(), killed_at);
  // status: both stages, goodput from both.
  const auto status = test::run_command(GTRAIN_BINARY + " status " + run);
  EXPECT_NE(status.output.find("  stages     2\n"), std::string::npos) << status.output;
  EXPECT_NE(status.output.find("failed: its launcher"), std::string::npos) << status.output;
  // A third start finds nothing more to add.
  const auto third = test::run_command(GTRAIN_BINARY + " run " + dir.file("job.toml") + " --run-dir " + run +
                                       " --set train.steps=" + std::to_string(killed_at + 5));
  EXPECT_EQ(third.output.find("had no record"), std::string::npos) << third.output;
}

// gtrain status while a stage runs: the running stage (since, steps, steps/s), an ETA at its speed,
// and the stage counted, from metrics.jsonl (the ledger has nothing of it yet).
TEST(Status, ShowsTheRunningStage) {
  test::TempDir dir;
  test::write_file(dir.file("job.toml"), kGpt);
  const std::string run = dir.file("run");
  const pid_t pid = test::spawn_gtrain("run " + dir.file("job.toml") + " --run-dir " + run, dir.file("out.log"));
  ASSERT_TRUE(wait_for_step(run + "/metrics.jsonl", 20)) << test::read_file(dir.file("out.log"));
  const auto status = test::run_command(GTRAIN_BINARY + " status " + run);
  const auto json = test::run_command(GTRAIN_BINARY + " status --json " + run);
  kill(pid, SIGUSR1);
  EXPECT_EQ(test::wait_exit(pid), 3) << test::read_file(dir.file("out.log"));
  EXPECT_EQ(status.exit_code, 0) << status.output;
  EXPECT_NE(status.output.find("  running    since "), std::string::npos) << status.output;
  EXPECT_NE(status.output.find("(pid " + std::to_string(pid) + "): steps 0-"), std::string::npos) << status.output;
  EXPECT_NE(status.output.find(" steps/s\n"), std::string::npos) << status.output;
  EXPECT_EQ(status.output.find("eta        unknown"), std::string::npos) << status.output;
  EXPECT_NE(status.output.find("at the running stage's speed"), std::string::npos) << status.output;
  EXPECT_NE(status.output.find("  stages     1 (1 running)\n"), std::string::npos) << status.output;
  EXPECT_NE(status.output.find("  running\n"), std::string::npos) << "the table's row\n" << status.output;
  const auto j = nlohmann::json::parse(json.output);
  ASSERT_TRUE(j.at("running").is_object()) << json.output;
  EXPECT_EQ(j["running"].at("pid"), pid);
  const auto& now = j["running"].at("stage");
  EXPECT_GE(now.at("step_to").get<int64_t>(), 20) << json.output;
  EXPECT_GT(now.at("steps_per_s").get<double>(), 0.0) << json.output;
  EXPECT_GT(j.at("eta_s").get<double>(), 0.0) << json.output;
  // Once it ended, the ledger has it and nothing is running.
  const auto after = test::run_command(GTRAIN_BINARY + " status " + run);
  EXPECT_EQ(after.output.find("running"), std::string::npos) << after.output;
  EXPECT_NE(after.output.find("  stages     1\n"), std::string::npos) << after.output;
  // The stop signal in words (not "signal 10"), the newest checkpoint marked as not read by status,
  // the ETA with its units.
  EXPECT_NE(after.output.find("  resumable: USR1 (the scheduler's warning before the time limit, or gtrain cancel)"),
            std::string::npos)
      << after.output;
  EXPECT_EQ(after.output.find("signal 10"), std::string::npos) << after.output;
  EXPECT_NE(after.output.find(" (unverified: gtrain ckpt verify "), std::string::npos) << after.output;
  EXPECT_TRUE(std::regex_search(after.output, std::regex("  eta        [0-9]+ (s|min|h [0-9]+ min|days? [0-9]+ h) at "
                                                         "the last stage's speed\n")))
      << after.output;
  EXPECT_NE(test::read_file(run + "/stages.jsonl").find("\"resumable: signal 10\""), std::string::npos)
      << "the ledger keeps its own words";
}

// The chain's stages are numbered after the stages the run directory has had, so chain stage K is
// row K of gtrain status's table.
TEST(Status, ChainStagesFollowTheLedgersNumbering) {
  test::TempDir dir;
  auto sbatch = [next = 100](const std::vector<std::string>& argv) mutable -> std::optional<std::string> {
    if (argv.size() > 4 && argv[0] == "bash" && argv[4] == "sbatch") return std::to_string(next++) + "\ngtrain-rc=0";
    return std::nullopt;
  };
  test::write_file(dir.file("mlp.toml"),
                   "[model]\nname = \"mlp\"\n[data]\nkind = \"synthetic\"\nsynthetic_samples = 128\n[train]\n"
                   "global_batch = 16\nsteps = 8\n");
  SubmitOptions o;
  o.config_path = dir.file("mlp.toml");
  o.run_dir = dir.file("run");
  o.gtrain = "/bin/true";
  o.stages = "2";
  fs::create_directories(o.run_dir);
  test::write_file(o.run_dir + "/stages.jsonl",
                   "{\"start\":1,\"end\":2,\"step_from\":0,\"step_to\":3,\"exit\":\"resumable: signal 10\"}\n");
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, sbatch, out), 0) << out.str();
  const Chain c = read_chain(o.run_dir);
  ASSERT_EQ(c.stages.size(), 2u);
  EXPECT_EQ(c.stages[0].index, 2);
  EXPECT_EQ(c.stages[1].index, 3);
  EXPECT_TRUE(fs::exists(o.run_dir + "/stage-2.sbatch"));
  EXPECT_NE(test::read_file(o.run_dir + "/stage-3.sbatch").find("STAGE=\"${GTRAIN_STAGE:-3}\""), std::string::npos);
  EXPECT_NE(out.str().find("  stage 2: "), std::string::npos) << out.str();
}
