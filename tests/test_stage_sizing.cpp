// test_stage_sizing.cpp: `gtrain submit --gpus auto` against a fake Slurm (label cpu): each
// candidate count's start from sbatch --test-only, the planner's run time, the earliest finish
// chosen (ties and --objective gpu-hours: fewer GPU-hours), refusals shown per count, and a chain
// with --stages auto that sizes every stage it adds with fresh estimates.
#include <gtest/gtest.h>

#include <cmath>
#include <ctime>
#include <sstream>

#include "launcher/base/text_util.h"
#include "launcher/chain/chain.h"
#include "launcher/chain/stage_sizing.h"
#include "launcher/launch/run_launch.h"
#include "runtime/core/config/job_config.h"
#include "runtime/core/errors.h"
#include "tests/support/submit_fixture.h"

using namespace gtrain;
using namespace gtrain::submit_test;

namespace {

std::string gpt_job(int64_t steps) {
  return "[model]\nname = \"gpt\"\nn_layer = 2\nn_head = 2\nn_embd = 64\nseq_len = 32\nvocab = 32\n"
         "[data]\nkind = \"synthetic\"\n[train]\nglobal_batch = 16\nthreads = 1\nsteps = " +
         std::to_string(steps) + "\n";
}

// A Slurm whose test submissions start `wait_s[g]` seconds after `now` for g GPUs (missing: refused).
struct BusySlurm {
  FakeScheduler fake;
  double now = 0;
  std::map<int, double> wait_s;
  BusySlurm() {
    fake.answer = [this](const std::vector<std::string>& argv) -> std::optional<std::string> {
      if (argv[0] != "sbatch" || std::find(argv.begin(), argv.end(), "--test-only") == argv.end()) return std::nullopt;
      int per_node = 0;
      for (const auto& a : argv)
        if (a.rfind("--gpus-per-node=", 0) == 0) per_node = std::stoi(a.substr(16));
      const auto it = wait_s.find(per_node);
      if (it == wait_s.end())
        return std::string("sbatch: error: Requested node configuration is not available\ngtrain-rc=1");
      return "sbatch: Job 9 to start at " + text::local_time(now + it->second, "%Y-%m-%dT%H:%M:%S") +
             " using 4 processors on nodes node1 in partition debug\ngtrain-rc=0";
    };
  }
};

SizingContext context(const test::TempDir& dir, int64_t steps, BusySlurm& slurm) {
  test::write_file(dir.file("job.toml"), gpt_job(steps));
  SizingContext c;
  c.cfg = load_job_config(dir.file("job.toml"), {}, {});
  c.run_dir = dir.file("run");
  c.limit_s = 3600;
  c.backend = &scheduler_backend(SchedulerKind::slurm);
  c.submit_argv = {"sbatch", "--parsable", dir.file("stage-1.sbatch")};
  c.runner = slurm.fake.runner();
  c.now = slurm.now;
  return c;
}

// The planner's step time at `gpus` for `steps` of gpt_job.
double step_seconds(const SizingContext& c, int gpus) {
  JobConfig cfg = c.cfg;
  cfg.parallel.memory_gb = 1e9;
  return plan_run(cfg, *model_stats_from_config(cfg), gpus, gpus).est_step_seconds;
}

const SizingRow& row(const SizingDecision& d, int gpus) {
  for (const auto& r : d.rows)
    if (r.gpus == gpus) return r;
  throw std::runtime_error("no row");
}

}  // namespace

TEST(StageSizing, CandidatesFromAutoRangesAndLists) {
  EXPECT_EQ(parse_gpu_candidates("auto", 8), (std::vector<int>{1, 2, 4, 8}));
  EXPECT_EQ(parse_gpu_candidates("auto", 6), (std::vector<int>{1, 2, 4, 6}));
  EXPECT_EQ(parse_gpu_candidates("2-4", 8), (std::vector<int>{2, 3, 4}));
  EXPECT_EQ(parse_gpu_candidates("8,1,4,2", 8), (std::vector<int>{1, 2, 4, 8}));
  for (const char* bad : {"4-2", "0-3", "x", "2,", "1,0"}) {
    EXPECT_THROW(parse_gpu_candidates(bad, 8), ConfigError) << bad;
  }
}

// 2 GPUs are free now; 4 only when a job holding them ends in 120 s; 8 never on one node. A short
// job finishes first on 2 now; a long one on 4 later. --objective gpu-hours trades a finish within
// the slack for fewer GPU-hours.
TEST(StageSizing, ShortJobStartsNowSmallAndALongOneWaitsForMore) {
  test::TempDir dir;
  BusySlurm slurm;
  slurm.now = static_cast<double>(std::time(nullptr));
  slurm.wait_s = {{1, 0}, {2, 0}, {4, 120}};
  SizingPolicy policy;
  policy.candidates = {1, 2, 4, 8};
  auto ctx = context(dir, 400, slurm);
  const double s2 = step_seconds(ctx, 2), s4 = step_seconds(ctx, 4);
  ASSERT_LT(s4, 0.9 * s2) << "the model must run faster on 4";
  SizingDecision d = decide_stage_size(policy, ctx);
  EXPECT_EQ(d.chosen, 2) << render_sizing(d);
  EXPECT_NEAR(row(d, 4).start, slurm.now + 120, 1.0);
  EXPECT_EQ(row(d, 4).start_from, "scheduler");
  EXPECT_NEAR(row(d, 2).run_s, 400 * s2, 1e-6);
  EXPECT_NEAR(row(d, 2).gpu_hours, 400 * s2 * 2 / 3600, 1e-9);
  EXPECT_EQ(row(d, 8).refused, "sbatch: error: Requested node configuration is not available");
  EXPECT_TRUE(row(d, 2).chosen);

  // Long enough that 4 GPUs make up three times their wait: 4, starting in 120 s.
  const int64_t steps = static_cast<int64_t>(std::ceil(3 * 120 / (s2 - s4)));
  ctx = context(dir, steps, slurm);
  d = decide_stage_size(policy, ctx);
  EXPECT_EQ(d.chosen, 4) << render_sizing(d);
  EXPECT_NEAR(row(d, 4).finish, slurm.now + 120 + steps * s4, 1e-3);
  // gpu-hours within 10%: still 4 (2 finishes 2 x 120 s later, more than 10% of the time);
  // within a slack that covers it, 2 (fewer GPU-hours).
  policy.objective = "gpu-hours";
  policy.slack = 0.10;
  EXPECT_EQ(decide_stage_size(policy, ctx).chosen, 4);
  policy.slack = 1.0;
  d = decide_stage_size(policy, ctx);
  EXPECT_EQ(d.chosen, 2) << render_sizing(d);
  // A quota window's cap rules counts above it out.
  policy.objective = "finish";
  ctx.cap = 2;
  d = decide_stage_size(policy, ctx);
  EXPECT_EQ(d.chosen, 2);
  EXPECT_EQ(row(d, 4).refused, "above the quota window's max_gpus 2");
}

// A chain with --stages auto: stage 1 sized while 4 GPUs are busy, stage 2 (added by chain-step) when
// they are free; chain.json keeps both decisions, gtrain status shows the latest.
TEST(StageSizing, AutoChainSizesEveryStageItAdds) {
  test::TempDir dir;
  BusySlurm slurm;
  slurm.now = static_cast<double>(std::time(nullptr));
  slurm.wait_s = {{1, 0}, {2, 0}, {4, 3600}};
  test::write_file(dir.file("job.toml"), gpt_job(4000));
  SubmitOptions o;
  o.config_path = dir.file("job.toml");
  o.run_dir = dir.file("run");
  o.gtrain = "/bin/true";
  o.gpus = "auto";
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, slurm.fake.runner(), out), 0) << out.str();
  EXPECT_NE(out.str().find("sizing stage 1 (--gpus auto, objective finish)"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("<- chosen"), std::string::npos) << out.str();
  Chain c = read_chain(o.run_dir);
  ASSERT_EQ(c.stages.size(), 1u);
  EXPECT_EQ(c.stages[0].gpus, 2);
  EXPECT_EQ(c.stages[0].decision.value("chosen", 0), 2);
  EXPECT_EQ(c.sizing.candidates, (std::vector<int>{1, 2, 4, 8}));
  const auto& first = slurm.fake.calls.back();  // the submission, after the test submissions
  EXPECT_EQ(std::find(first.begin(), first.end(), "--test-only"), first.end());
  // The 4 GPUs free up; the stage saves: stage 2 goes on 4.
  slurm.wait_s[4] = 0;
  chain_step(o.run_dir, 1, 3, "100", slurm.fake.runner());
  c = read_chain(o.run_dir);
  ASSERT_EQ(c.stages.size(), 2u);
  EXPECT_EQ(c.stages[1].gpus, 4);
  EXPECT_EQ(c.stages[1].decision.value("chosen", 0), 4);
  const auto& submit = slurm.fake.calls.back();
  EXPECT_EQ(submit[0], "sbatch");
  EXPECT_NE(std::find(submit.begin(), submit.end(), "--gpus-per-node=4"), submit.end());
  EXPECT_EQ(std::find(submit.begin(), submit.end(), "--test-only"), submit.end());
  std::ostringstream status;
  print_chain_status(o.run_dir, slurm.fake.runner(), status);
  EXPECT_NE(status.str().find("stage 2's size, chosen at"), std::string::npos) << status.str();
  EXPECT_NE(status.str().find("<- chosen"), std::string::npos) << status.str();
}

// Unix time of a local date and time (a fixed clock for the window tests).
double local(int year, int month, int day, int hour, int minute) {
  std::tm tm{};
  tm.tm_year = year - 1900, tm.tm_mon = month - 1, tm.tm_mday = day, tm.tm_hour = hour, tm.tm_min = minute;
  tm.tm_isdst = -1;
  return static_cast<double>(std::mktime(&tm));
}

// gpt_job with quota windows: days 08-20 with at most 2 GPUs, nights 20-08 with 4.
std::string day_night_job(int64_t steps) {
  return gpt_job(steps) +
         "[[schedule.window]]\ndays = \"daily\"\nhours = \"08:00-20:00\"\nmax_gpus = 2\n"
         "[[schedule.window]]\ndays = \"daily\"\nhours = \"20:00-08:00\"\nmax_gpus = 4\n";
}

SubmitOptions auto_submit(const test::TempDir& dir, const std::string& job, double now) {
  test::write_file(dir.file("job.toml"), job);
  SubmitOptions o;
  o.config_path = dir.file("job.toml");
  o.run_dir = dir.file("run");
  o.gtrain = "/bin/true";
  o.gpus = "auto";
  o.time = "24:00:00";
  o.now_unix = now;
  return o;
}

// --stages auto --gpus auto over a day window (2 GPUs) and a night window (4): stage 1, submitted at
// 19:50, is sized for the day; stage 2, added as stage 1 stops before 20:00, is held until the night
// window opens and sized for it: 4 GPUs, its table's expected start 20:00. (The candidates were fixed
// at the first submit (1, 2) and the cap read at the moment of chain-step, so stage 2 ran on 2 GPUs
// with a start of 19:55 in its table.)
TEST(StageSizing, EachAutoStageIsSizedForTheWindowItStartsIn) {
  test::TempDir dir;
  BusySlurm slurm;
  slurm.now = local(2026, 11, 30, 19, 50);
  slurm.wait_s = {{1, 0}, {2, 0}, {4, 0}};
  const SubmitOptions o = auto_submit(dir, day_night_job(400000), slurm.now);
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, slurm.fake.runner(), out), 0) << out.str();
  Chain c = read_chain(o.run_dir);
  ASSERT_EQ(c.stages.size(), 1u);
  EXPECT_EQ(c.stages[0].gpus, 2) << out.str();
  EXPECT_EQ(c.stages[0].begin, "");
  slurm.now = local(2026, 11, 30, 19, 55);
  const std::string what = chain_step(o.run_dir, 1, 3, "100", slurm.fake.runner(), slurm.now);
  c = read_chain(o.run_dir);
  ASSERT_EQ(c.stages.size(), 2u) << what;
  const double night = local(2026, 11, 30, 20, 0);
  EXPECT_EQ(c.stages[1].gpus, 4) << what << "\n" << render_sizing(c.stages[1].decision);
  EXPECT_EQ(c.stages[1].begin, "2026-11-30T20:00:00");
  const auto& d = c.stages[1].decision;
  EXPECT_EQ(d.value("cap", 0), 4);
  EXPECT_EQ(d.value("begin", 0.0), night);
  for (const auto& r : d["rows"]) {
    EXPECT_EQ(r.value("start", 0.0), night) << r.dump();
    EXPECT_EQ(r.value("start_from", ""), "begin") << r.dump();
  }
  const std::string table = render_sizing(d);
  EXPECT_NE(table.find("held until its quota window opens at 11-30 20:00:00 (at most 4 GPUs)"), std::string::npos)
      << table;
  const auto& submit = slurm.fake.calls.back();
  EXPECT_NE(std::find(submit.begin(), submit.end(), "--gpus-per-node=4"), submit.end());
}

// The first stage held for a night window: sized for that window's cap, its rows starting at the
// opening (not at the moment of submit). With --stages 3, a later stage that starts in the day window
// is sized for its cap.
TEST(StageSizing, StagesOfAFixedChainAreSizedForTheirWindows) {
  test::TempDir dir;
  BusySlurm slurm;
  slurm.now = local(2026, 11, 30, 7, 0);  // a night: 4 GPUs until 08:00
  slurm.wait_s = {{1, 0}, {2, 0}, {4, 0}};
  SubmitOptions o = auto_submit(dir, day_night_job(400000), slurm.now);
  o.stages = "3";
  o.dry_run = true;
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, slurm.fake.runner(), out), 0) << out.str();
  // Stage 1: 07:00-08:00 on 4; stage 2: 08:00-20:00 on 2 (day); stage 3: 20:00 on 4.
  EXPECT_NE(out.str().find("stage 1: 4 GPU(s)"), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("stage 2: 2 GPU(s) on 1 node(s), begin 2026-11-30T08:00:00"), std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("stage 3: 4 GPU(s) on 1 node(s), begin 2026-11-30T20:00:00"), std::string::npos)
      << out.str();

  // Only a night window, submitted at noon: stage 1 waits for 20:00; its rows start there.
  test::TempDir dir2;
  slurm.now = local(2026, 11, 30, 12, 0);
  SubmitOptions n =
      auto_submit(dir2, gpt_job(400000) + "[[schedule.window]]\nhours = \"20:00-08:00\"\nmax_gpus = 4\n", slurm.now);
  n.stages = "1";
  n.dry_run = true;
  std::ostringstream out2;
  ASSERT_EQ(submit_command(n, {}, slurm.fake.runner(), out2), 0) << out2.str();
  EXPECT_NE(out2.str().find("stage 1: 4 GPU(s) on 1 node(s), begin 2026-11-30T20:00:00"), std::string::npos)
      << out2.str();
  EXPECT_NE(out2.str().find("11-30 20:00:00 "), std::string::npos) << "expected start in the table\n" << out2.str();
  EXPECT_EQ(out2.str().find("11-30 12:00:00 "), std::string::npos) << out2.str();
}

// A scheduler that cannot be reached while sizing is a runtime failure (exit 1) with its message,
// after one test submission; not "no GPU count can run" (exit 2).
TEST(StageSizing, UnreachableSchedulerWhileSizingIsARuntimeError) {
  test::TempDir dir;
  FakeScheduler fake;
  fake.answer = [](const std::vector<std::string>& argv) -> std::optional<std::string> {
    if (argv[0] == "sbatch")
      return std::string(
          "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)\n"
          "gtrain-rc=1");
    return std::nullopt;
  };
  const SubmitOptions o = auto_submit(dir, gpt_job(100), 0);
  std::ostringstream out;
  try {
    submit_command(o, {}, fake.runner(), out);
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    ADD_FAILURE() << "reported as bad input: " << e.what();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 1);
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("sbatch --test-only could not reach the scheduler to size stage 1 (--gpus auto)", 0), 0u)
        << what;
    EXPECT_NE(what.find("Unable to contact slurm controller"), std::string::npos) << what;
    EXPECT_EQ(e.hint(), "try again when it answers");
  }
  EXPECT_EQ(fake.count("sbatch"), 1) << "one test submission, no more";
}

TEST(StageSizing, BadOptionsAndNoRunnableSizeAreOneLine) {
  test::TempDir dir;
  test::write_file(dir.file("job.toml"), gpt_job(100));
  SubmitOptions o;
  o.config_path = dir.file("job.toml");
  o.run_dir = dir.file("run");
  const auto error = [&](SubmitOptions x) {
    try {
      validate_submit_options(x);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  o.gpus = "4-2";
  EXPECT_EQ(error(o), "--gpus '4-2': expected a range from 1 up, such as 2-8");
  o.gpus = "auto";
  o.objective = "fast";
  EXPECT_EQ(error(o), "--objective 'fast': expected finish or gpu-hours");
  o.objective = "finish";
  o.nodes = "1,2";
  EXPECT_NE(error(o).find("sizes each stage when submitted"), std::string::npos);
  // Slurm's node range: one GPU count the most nodes divide, the mpirun launcher, Slurm only.
  o.gpus = "4";
  o.nodes = "1-2";
  EXPECT_EQ(error(o), "accepted");
  o.nodes = "2-1";
  EXPECT_EQ(error(o), "--nodes '2-1': expected a range MIN-MAX with 1 <= MIN < MAX");
  o.nodes = "1-2";
  o.gpus = "3";
  EXPECT_NE(error(o).find("needs one --gpus count for 2 nodes that they divide"), std::string::npos);
  o.gpus = "4";
  o.launcher = "srun";
  EXPECT_NE(error(o).find("with --launcher srun"), std::string::npos);
  o.launcher = "mpirun";
  o.scheduler = "pbs";
  EXPECT_EQ(error(o), "--nodes 1-2: pbs has no node-count range");
  o.scheduler = "slurm";
  o.gpus = "auto";
  o.nodes = "1";
  // Every count refused: each one's reason.
  BusySlurm slurm;
  std::ostringstream out;
  o.gtrain = "/bin/true";
  try {
    submit_command(o, {}, slurm.fake.runner(), out);
    ADD_FAILURE() << "submitted: " << out.str();
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no GPU count of --gpus auto can run:"), std::string::npos) << what;
    EXPECT_NE(what.find("4 GPU(s): sbatch: error: Requested node configuration is not available"), std::string::npos)
        << what;
  }
  EXPECT_EQ(slurm.fake.count("sbatch"), 4);  // four test submissions, no submission
}
