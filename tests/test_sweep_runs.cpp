// test_sweep_runs.cpp: `gtrain sweep` end to end (issue 52): a 27-trial ASHA of a tiny gpt in bitwise
// mode, uninterrupted on 2 CPU ranks, against the same sweep killed -9 at three moments and resumed
// on 1, 3 and 2 ranks, and against it cut by a time limit and finished on 1 rank (the same trials,
// promotions, best trial and bitwise-equal metrics); a grid
// with a diverging trial (recorded with its cause, the sweep goes on); --best's TOML trains.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/support/test_util.h"

namespace gtrain {
namespace {

std::string sweep_file(const std::string& search) {
  return R"([model]
name = "gpt"
n_layer = 1
n_embd = 16
n_head = 2
seq_len = 16
[data]
kind = "text_bytes"
path = "/usr/share/common-licenses/GPL-3"
eval_fraction = 0.1
[train]
global_batch = 8
steps = 27
eval_batches = 2
threads = 1
warmup_steps = 0
reproducible = "bitwise"
[log]
progress = "none"
metrics_interval = 1
[checkpoint]
interval = 0
)" + search;
}

const std::string kAsha = R"([search]
method = "asha"
trials = 27
eta = 3
min_steps = 1
seed = 3
[search.space]
"optimizer.learning_rate" = { log_uniform = [1e-3, 3e-1] }
"optimizer.weight_decay" = { choice = [0.0, 0.1] }
)";

nlohmann::json ledger(const std::string& dir) {
  return nlohmann::json::parse(test::read_file(dir + "/sweep.json"));
}

// Results the ledger in `dir` holds (0 without one).
int64_t results_in(const std::string& dir) {
  std::ifstream f(dir + "/sweep.json");
  const auto j = nlohmann::json::parse(f, nullptr, false);
  int64_t n = 0;
  if (!j.is_object()) return 0;
  for (const auto& t : j["trials"])
    for (const auto& r : t["results"]) n += !r.is_null();
  return n;
}

// Starts `cmd` (exec'd by sh, so the pid is gtrain's) and kills it with SIGKILL `delay_s` after its
// ledger in `dir` has recorded `more` results than before (the moment falls inside trials' runs,
// whatever the machine's speed); false when it ended first.
bool run_and_kill(const std::string& cmd, const std::string& dir, int64_t more, double delay_s) {
  const int64_t target = results_in(dir) + more;
  const pid_t pid = fork();
  if (pid == 0) {
    execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  while (results_in(dir) < target) {
    if (waitpid(pid, &status, WNOHANG) == pid) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(delay_s));
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return true;
}

TEST(SweepRuns, AshaKilledThreeTimesOnOtherRankCountsEqualsUninterrupted) {
  test::TempDir d;
  test::write_file(d.file("sweep.toml"), sweep_file(kAsha));
  const std::string base = GTRAIN_BINARY + " sweep " + d.file("sweep.toml") + " --quiet --dir ";
  const auto t0 = std::chrono::steady_clock::now();
  const auto whole = test::run_command(base + d.file("a") + " --ranks 2");
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(whole.exit_code, 0) << whole.output;
  EXPECT_NE(whole.output.find("27 trials, 1 done, 26 stopped early, 0 failed, 13 promotions"), std::string::npos)
      << whole.output;
  std::cout << "uninterrupted 27-trial sweep on 2 ranks: " << wall << " s" << std::endl;
  // Killed in three starts (2, 1 and 3 ranks), each a moment after its 8th new result, when other
  // trials are mid-run, then finished on 2.
  const std::string b = base + d.file("b") + " >> " + d.file("b.log") + " 2>&1";
  int killed = 0;
  const std::pair<const char*, double> starts[] = {{" --ranks 2", 0.15}, {" --ranks 1", 0.05}, {" --ranks 3", 0.3}};
  for (const auto& [ranks, delay] : starts) killed += run_and_kill(b + ranks, d.file("b"), 8, delay);
  EXPECT_EQ(killed, 3) << test::read_file(d.file("b.log"));
  const auto rest = test::run_command(base + d.file("b") + " --ranks 2");
  ASSERT_EQ(rest.exit_code, 0) << rest.output;
  const auto la = ledger(d.file("a")), lb = ledger(d.file("b"));
  ASSERT_EQ(la["trials"].size(), 27u);
  int64_t runs_a = 0, runs_b = 0;
  for (size_t i = 0; i < 27; ++i) {
    const auto &ta = la["trials"][i], &tb = lb["trials"][i];
    EXPECT_EQ(ta["params"], tb["params"]) << i;
    EXPECT_EQ(ta["state"], tb["state"]) << i;
    EXPECT_EQ(ta["results"], tb["results"]) << i;  // bitwise: the JSON numbers print every digit
    runs_a += ta["runs"].get<int64_t>(), runs_b += tb["runs"].get<int64_t>();
  }
  std::set<std::pair<int64_t, int64_t>> pa, pb;
  for (const auto& p : la["promotions"]) pa.insert({p["trial"].get<int64_t>(), p["to_rung"].get<int64_t>()});
  for (const auto& p : lb["promotions"]) pb.insert({p["trial"].get<int64_t>(), p["to_rung"].get<int64_t>()});
  EXPECT_EQ(pa, pb);
  EXPECT_EQ(pa.size(), 13u);
  EXPECT_EQ(la["best"], lb["best"]);
  EXPECT_GE(la["best"].get<int64_t>(), 0);
  EXPECT_EQ(runs_a, 40);  // 27 + 9 + 3 + 1 rungs run
  EXPECT_GE(runs_b, 40);  // and the runs the kills cut short, again
  std::cout << "killed and resumed: " << runs_b << " trial runs (uninterrupted: " << runs_a << ")" << std::endl;
  // A stage of the sweep with a time limit (as a quota window's): its trials save and pause by then,
  // exit 3; the next stage finishes it, equal to the uninterrupted sweep.
  const auto limited = test::run_command(base + d.file("c") + " --ranks 2 --time-limit " +
                                         std::to_string(static_cast<int>(0.5 * wall) + 5) + "s");
  EXPECT_EQ(limited.exit_code, 3) << limited.output;
  EXPECT_NE(limited.output.find("paused: run the same command to continue"), std::string::npos) << limited.output;
  const auto after = test::run_command(base + d.file("c") + " --ranks 1");
  ASSERT_EQ(after.exit_code, 0) << after.output;
  const auto lc = ledger(d.file("c"));
  for (size_t i = 0; i < 27; ++i) EXPECT_EQ(la["trials"][i]["results"], lc["trials"][i]["results"]) << i;
  EXPECT_EQ(la["best"], lc["best"]);
  // The best trial's final evaluation is in its run directory.
  const std::string best = la["trials"][la["best"].get<size_t>()]["name"];
  EXPECT_NE(test::read_file(d.file("a/trials/" + best + "/metrics.jsonl")).find("\"kind\":\"final\""),
            std::string::npos);
}

// A grid whose second learning rate diverges: that trial fails with its cause, the other finishes,
// the sweep exits 0; --best prints a TOML that `gtrain run` trains.
TEST(SweepRuns, DivergingTrialIsRecordedAndSkipped) {
  test::TempDir d;
  test::write_file(d.file("sweep.toml"), sweep_file(R"([search]
method = "grid"
[search.space]
"optimizer.learning_rate" = { choice = [0.01, 1e30] }
)"));
  const std::string base = GTRAIN_BINARY + " sweep " + d.file("sweep.toml") + " --dir " + d.file("s");
  const auto r = test::run_command(base + " --ranks 2 --set train.steps=4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("2 trials, 1 done, 0 stopped early, 1 failed"), std::string::npos) << r.output;
  const auto l = ledger(d.file("s"));
  EXPECT_EQ(l["trials"][0]["state"], "done");
  EXPECT_EQ(l["trials"][1]["state"], "failed");
  EXPECT_NE(l["trials"][1]["failure"].get<std::string>(), "") << l.dump(2);
  std::cout << "the diverging trial's cause: " << l["trials"][1]["failure"].get<std::string>() << std::endl;
  EXPECT_EQ(l["best"], 0);
  // gtrain status on the sweep directory: the counts, the best trial, the failure's cause.
  const auto st = test::run_command(GTRAIN_BINARY + " status " + d.file("s"));
  ASSERT_EQ(st.exit_code, 0) << st.output;
  EXPECT_NE(st.output.find("trials  1 done, 0 stopped, 1 failed"), std::string::npos) << st.output;
  EXPECT_NE(st.output.find("best    t000: eval_loss"), std::string::npos) << st.output;
  EXPECT_NE(st.output.find("training diverged"), std::string::npos) << st.output;
  const auto best = test::run_command(base + " --best --set train.steps=4");
  ASSERT_EQ(best.exit_code, 0) << best.output;
  EXPECT_NE(best.output.find("best trial t000 (optimizer.learning_rate = 0.01)"), std::string::npos) << best.output;
  test::write_file(d.file("best.toml"), best.output);
  const auto run =
      test::run_command(GTRAIN_BINARY + " run " + d.file("best.toml") + " --run-dir " + d.file("run") + " --quiet");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  // The same command again: the sweep is finished and stays so.
  const auto again = test::run_command(base + " --ranks 1 --set train.steps=4 --quiet");
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(ledger(d.file("s"))["trials"], l["trials"]);
}

// --preview: the rungs and their trial-steps, the runs, the planner's step time for one trial, and
// with quota windows in the file the calendar of when it finishes; nothing trains.
TEST(SweepRuns, PreviewCountsRungsStepsAndFinish) {
  test::TempDir d;
  test::write_file(d.file("sweep.toml"), sweep_file(kAsha + R"(
[[schedule.window]]
hours = "08:00-20:00"
max_gpus = 2
[[schedule.window]]
hours = "20:00-08:00"
max_gpus = 8
)"));
  // --dir names where a sweep would write: the preview must leave it absent.
  const auto r = test::run_command(GTRAIN_BINARY + " sweep " + d.file("sweep.toml") + " --preview --ranks 2 --dir " +
                                   d.file("sweep"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Rungs 1, 3, 9, 27 steps holding 27, 9, 3, 1 trials: 27 x 1 + 9 x 2 + 3 x 6 + 1 x 18 trial-steps.
  EXPECT_NE(r.output.find("  3     27     1       18          18\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("40 runs (13 of them resume a paused trial), 81 trial-steps"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("s/step on cpu"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("calendar: 2 GPUs mon-sun 08:00-20:00 + 8 GPUs mon-sun 20:00-08:00: done"), std::string::npos)
      << r.output;
  EXPECT_FALSE(std::filesystem::exists(d.file("sweep"))) << "the preview trained";
}

}  // namespace
}  // namespace gtrain
