// test_report.cpp: `gtrain report` on real runs (label multiproc): three stages on 2, 1 and 2 ranks,
// the first stopped by a signal, the second killed -9 after its last checkpoint; the report's lost
// work is the steps the third stage trained again, and its rank-hours and goodput are what the
// ledger and the buckets give by hand. Bad directories: one line, exit 2.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "tests/support/multiproc_util.h"

namespace gtrain {
namespace {

namespace fs = std::filesystem;

const char* kJob = R"([model]
name = "gpt"
n_layer = 2
n_head = 2
n_embd = 64
seq_len = 32
vocab = 64
[data]
kind = "synthetic"
[train]
global_batch = 16
steps = 120
eval_interval = 40
threads = 1
[checkpoint]
interval = 10
[log]
progress = "none"
)";

// Waits until metrics.jsonl's last train record reaches `step` (false after 120 s).
bool wait_for_step(const std::string& metrics, int step) {
  for (int i = 0; i < 2400; ++i) {
    if (test::last_train_step(metrics) >= step) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

TEST(Report, KilledStagesLostWorkIsTheStepsTrainedAgain) {
  test::TempDir dir;
  test::write_file(dir.file("job.toml"), kJob);
  const std::string run = dir.file("run"), metrics = run + "/metrics.jsonl";
  const std::string args = "run " + dir.file("job.toml") + " --run-dir " + run;
  // Stage 1: 2 ranks, asked to stop (saves, exit 3).
  pid_t pid = test::spawn_gtrain(args + " --ranks 2", dir.file("s1.log"));
  ASSERT_TRUE(wait_for_step(metrics, 25)) << test::read_file(dir.file("s1.log"));
  ::kill(pid, SIGUSR1);
  ASSERT_EQ(test::wait_exit(pid), 3) << test::read_file(dir.file("s1.log"));
  // Stage 2: 1 rank, killed -9 with its launcher 15 steps past a checkpoint.
  const int from = test::last_train_step(metrics);
  pid = test::spawn_gtrain(args + " --ranks 1", dir.file("s2.log"));
  ASSERT_TRUE(wait_for_step(metrics, (from / 10 + 1) * 10 + 15)) << test::read_file(dir.file("s2.log"));
  ::kill(-pid, SIGKILL);
  test::wait_exit(pid);
  const int killed_at = test::last_train_step(metrics);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the rank's own process group follows its parent
  // Stage 3: 2 ranks to the end.
  auto third = test::run_command(GTRAIN_BINARY + " " + args + " --ranks 2");
  ASSERT_EQ(third.exit_code, 0) << third.output;

  auto r = test::run_command(GTRAIN_BINARY + " report " + run + " --format json -o -");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rep = nlohmann::json::parse(r.output);
  const auto ledger = test::read_jsonl(run + "/stages.jsonl");
  ASSERT_EQ(ledger.size(), 3u) << test::read_file(run + "/stages.jsonl");
  ASSERT_EQ(rep.at("stages").size(), 3u) << rep.dump(2);
  EXPECT_EQ(rep.at("state"), "complete");
  // The steps trained again: from the third stage's resume step to where the kill stopped the second.
  const int resumed = ledger[2].at("step_from");
  EXPECT_LT(resumed, killed_at);
  EXPECT_NEAR(rep.at("lost_steps").get<int>(), killed_at - resumed, 1) << rep.dump(2);
  EXPECT_GT(rep.at("stages")[1].at("seconds").at("lost work").get<double>(), 0);
  EXPECT_TRUE(fs::exists(run + "/metrics.superseded.jsonl"));

  // By hand: rank-hours = sum (end - start) x ranks; goodput = training / allocated rank-seconds,
  // and every stage's buckets add up to its wall time.
  double rank_s = 0, training = 0;
  for (size_t i = 0; i < 3; ++i) {
    const auto& s = rep.at("stages")[i];
    const double wall = s.at("end").get<double>() - s.at("start").get<double>();
    EXPECT_NEAR(s.at("seconds").at("allocated").get<double>(), wall, 1e-6 + 1e-9 * wall) << s.dump(2);
    EXPECT_EQ(s.at("units"), ledger[i].at("world"));
    rank_s += wall * s.at("units").get<double>();
    training += s.at("seconds").at("training").get<double>() * s.at("units").get<double>();
  }
  EXPECT_NEAR(rep.at("unit_hours").get<double>(), rank_s / 3600.0, 1e-9);
  EXPECT_NEAR(rep.at("goodput").get<double>(), training / rank_s, 1e-9);
  EXPECT_GT(rep.at("goodput").get<double>(), 0.05);
  EXPECT_EQ(rep.at("unit"), "rank");
  EXPECT_FALSE(rep.at("request").at("rows").empty()) << rep.at("request").dump(2);
  EXPECT_NE(rep.at("request").at("calibration").get<std::string>().find("Calibrated on this run: stage 3"),
            std::string::npos);
  // The row for the count stage 3 ran on (2 ranks) is that stage: its measured step time and the
  // layout that ran, not a modelled one beside a calibration sentence that says otherwise.
  const auto& req = rep.at("request");
  int measured_rows = 0;
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  for (const auto& row : req.at("rows")) {
    if (row.at("measured").get<bool>()) {
      ++measured_rows;
      EXPECT_EQ(row.at("units"), 2) << row.dump();
      EXPECT_NE(row.at("layout").get<std::string>().find("(ran)"), std::string::npos) << row.dump();
      EXPECT_NE(req.at("calibration").get<std::string>().find("on 2 ranks"), std::string::npos) << req.dump(2);
    }
  }
  EXPECT_EQ(measured_rows, 1) << req.dump(2);
  // More CPU ranks than the host has cores share them: no row past the cores (or the 2 that ran) is
  // offered, and the table says so.
  for (const auto& row : req.at("rows")) EXPECT_LE(row.at("units").get<int>(), std::max(cores, 2)) << req.dump(2);
  if (cores < 8) {
    EXPECT_NE(req.at("left_out").get<std::string>().find("CPU ranks share them"), std::string::npos);
  }
  // A complete run's paragraph speaks of a rerun, not of steps to go.
  EXPECT_TRUE(req.at("complete").get<bool>());
  const std::string summary = rep.at("summary");
  EXPECT_NE(summary.find("A rerun of all 120 steps would take"), std::string::npos) << summary;
  EXPECT_EQ(summary.find("to go"), std::string::npos) << summary;

  // The HTML file (default name) and the Markdown one, with a price.
  auto html = test::run_command(GTRAIN_BINARY + " report " + run + " --price-per-gpu-hour 2");
  ASSERT_EQ(html.exit_code, 0) << html.output;
  EXPECT_NE(html.output.find("gtrain report: " + run + "/report.html (complete, 3 stages, step 120 / 120"),
            std::string::npos)
      << html.output;
  EXPECT_EQ(test::count_of(test::read_file(run + "/report.html"), "<svg class=\"chart\""), 6u);
  auto md = test::run_command(GTRAIN_BINARY + " report " + run + " -o " + dir.file("r.md") + " --price-per-gpu-hour 2");
  ASSERT_EQ(md.exit_code, 0) << md.output;
  const std::string text = test::read_file(dir.file("r.md"));
  EXPECT_NE(text.find("| rank-hours | "), std::string::npos) << text;
  EXPECT_NE(text.find(", cost "), std::string::npos) << text;
  EXPECT_NE(text.find("## Resource request"), std::string::npos) << text;
  // Times and hours in units a person reads: no "6.91e-06 rank-hours", no bare "0.004387" seconds.
  const size_t request_at = text.find("## Resource request");
  const std::string request_md = text.substr(request_at, text.find("\n## ", request_at + 1) - request_at);
  EXPECT_EQ(request_md.find("e-0"), std::string::npos) << request_md;
  EXPECT_NE(text.find("a rerun of all 120 steps (the run is complete)"), std::string::npos) << text;
}

TEST(Report, DirectoriesItCannotReadAreOneLineAndExit2) {
  test::TempDir dir;
  const auto one_line = [](const test::CommandResult& r) { return test::lines(r.output).size() == 1; };
  auto missing = test::run_command(GTRAIN_BINARY + " report " + dir.file("nope"));
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_TRUE(one_line(missing)) << missing.output;
  EXPECT_NE(missing.output.find("no such run directory"), std::string::npos) << missing.output;
  auto not_run = test::run_command(GTRAIN_BINARY + " report " + dir.path());
  EXPECT_EQ(not_run.exit_code, 2) << not_run.output;
  EXPECT_NE(not_run.output.find("not a gtrain run directory"), std::string::npos) << not_run.output;
  // A run that has not trained a step (starting, or queued).
  fs::create_directories(dir.file("run"));
  test::write_file(dir.file("run/config.toml"), kJob);
  auto early = test::run_command(GTRAIN_BINARY + " report " + dir.file("run"));
  EXPECT_EQ(early.exit_code, 2) << early.output;
  EXPECT_NE(early.output.find("metrics.jsonl: no train record yet"), std::string::npos) << early.output;
  // An older gtrain's records, without times.
  test::write_file(dir.file("run/metrics.jsonl"), "{\"kind\":\"train\",\"step\":1,\"loss\":2.0}\n");
  auto old = test::run_command(GTRAIN_BINARY + " report " + dir.file("run"));
  EXPECT_EQ(old.exit_code, 2) << old.output;
  EXPECT_NE(old.output.find("older gtrain"), std::string::npos) << old.output;
  auto format = test::run_command(GTRAIN_BINARY + " report " + dir.file("run") + " -o x.pdf --format pdf");
  EXPECT_EQ(format.exit_code, 2) << format.output;
  EXPECT_NE(format.output.find("--format"), std::string::npos) << format.output;
}

}  // namespace
}  // namespace gtrain
