// test_submit.cpp: gtrain submit without a scheduler: option validation, stage planning over quota
// windows, and submitting a chain (dependencies, dry runs, refusals, unreachable schedulers, PBS)
// against a fake scheduler (label cpu).
#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <map>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "launcher/base/run_lock.h"
#include "launcher/chain/chain.h"
#include "launcher/commands/submit_command.h"
#include "launcher/scheduler/batch_script.h"
#include "runtime/core/errors.h"
#include "tests/support/submit_fixture.h"
#include "tests/support/test_util.h"

namespace fs = std::filesystem;
using namespace gtrain;
using namespace gtrain::submit_test;

TEST(SubmitOptions, RejectsBadValues) {
  auto bad = [](auto mutate, const std::string& fragment) {
    SubmitOptions o;
    o.config_path = "x.toml";
    mutate(o);
    try {
      validate_submit_options(o);
      ADD_FAILURE() << "accepted; expected " << fragment;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  bad([](SubmitOptions& o) { o.scheduler = "lsf"; }, "--scheduler 'lsf'");
  bad([](SubmitOptions& o) { o.launcher = "torchrun"; }, "--launcher 'torchrun': expected mpirun or srun");
  bad(
      [](SubmitOptions& o) {
        o.launcher = "srun";
        o.scheduler = "pbs";
      },
      "--launcher srun needs --scheduler slurm");
  bad([](SubmitOptions& o) { o.stages = "0"; }, "--stages '0'");
  bad([](SubmitOptions& o) { o.stages = "two"; }, "--stages 'two'");
  bad([](SubmitOptions& o) { o.gpus = "2,x"; }, "--gpus '2,x'");
  bad([](SubmitOptions& o) { o.gpus = "0"; }, "--gpus '0'");
  bad(
      [](SubmitOptions& o) {
        o.stages = "3";
        o.gpus = "2,4";
      },
      "--gpus lists 2 stages but --stages is 3");
  bad(
      [](SubmitOptions& o) {
        o.gpus = "3";
        o.nodes = "2";
      },
      "cannot be spread evenly over 2 nodes");
  bad([](SubmitOptions& o) { o.time = "1 h"; }, "--time: expected a duration like 90s, 15m, 2h, 1h30m");
  bad([](SubmitOptions& o) { o.gpus = "2,"; }, "--gpus '2,'");
  bad([](SubmitOptions& o) { o.time = "00:00:30"; }, "smallest time limit");
  bad([](SubmitOptions& o) { o.partition = "gpu; rm -rf /"; }, "--partition");
  bad([](SubmitOptions& o) { o.qos = "a b"; }, "--qos");
  bad([](SubmitOptions& o) { o.sbatch_args = {"--x=1\n#SBATCH --y"}; }, "--sbatch-arg");
  bad(
      [](SubmitOptions& o) {
        o.signal_lead_s = 120;
        o.time = "00:01:00";
      },
      "--signal-lead");
  SubmitOptions ok;
  ok.config_path = "x.toml";
  ok.stages = "3";
  ok.gpus = "2,4,1";
  ok.time = "1-02:00:00";
  EXPECT_EQ(validate_submit_options(ok), 3);
  EXPECT_DOUBLE_EQ(parse_slurm_time("1-02:00:00"), 26 * 3600.0);
  EXPECT_DOUBLE_EQ(parse_slurm_time("05:00"), 300.0);
  // Slurm's other forms, read as Slurm reads them ("1-00:30" used to be a day and 30 seconds).
  EXPECT_DOUBLE_EQ(parse_slurm_time("1-00:30"), 86400.0 + 1800);
  EXPECT_DOUBLE_EQ(parse_slurm_time("2-12"), 60 * 3600.0);
  EXPECT_DOUBLE_EQ(parse_slurm_time("90"), 5400.0);
  EXPECT_DOUBLE_EQ(parse_slurm_time("100:00:00"), 100 * 3600.0);
  EXPECT_THROW(parse_slurm_time("1-24:00"), ConfigError);
  EXPECT_THROW(parse_slurm_time("01:60:00"), ConfigError);
  EXPECT_THROW(parse_slurm_time("1:2:3:4"), ConfigError);
  EXPECT_EQ(format_walltime(90000), "25:00:00");
  EXPECT_EQ(format_walltime(3723), "01:02:03");
}

TEST(SubmitPlan, GpusFromListsAndWindows) {
  SubmitOptions o;
  o.gpus = "2,4,1";
  o.time = "00:30:00";
  auto p = plan_stages(o, 3, {}, 1e9);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].gpus, 2);
  EXPECT_EQ(p[1].gpus, 4);
  EXPECT_EQ(p[2].gpus, 1);
  EXPECT_EQ(p[2].begin_unix, 0);

  // Two windows: nights 18:00-08:00 with 8 GPUs, days with 2. Stages of 10 h starting at noon.
  WindowConfig night{"mon-sun", "18:00-08:00", 8}, day{"mon-sun", "08:00-18:00", 2};
  const std::vector<Window> ws = {parse_window(night, "n"), parse_window(day, "d")};
  std::tm tm{};
  tm.tm_year = 126, tm.tm_mon = 10, tm.tm_mday = 30, tm.tm_hour = 12, tm.tm_isdst = -1;
  const double noon = static_cast<double>(std::mktime(&tm));
  SubmitOptions w;
  w.gpus = "";
  w.time = "10:00:00";
  p = plan_stages(w, 2, ws, noon);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].gpus, 2) << "noon is in the day window";
  EXPECT_EQ(p[0].begin_unix, 0);
  EXPECT_EQ(p[1].gpus, 8) << "22:00 is in the night window";
  EXPECT_EQ(p[1].begin_unix, noon + 6 * 3600) << "the night window opens at 18:00";

  // Only a night window: a stage asked for at noon begins at 18:00.
  p = plan_stages(w, 1, {parse_window(night, "n")}, noon);
  EXPECT_EQ(p[0].begin_unix, noon + 6 * 3600);
  EXPECT_EQ(p[0].gpus, 8);
  EXPECT_EQ(slurm_begin(noon + 6 * 3600), "2026-11-30T18:00:00");
  EXPECT_EQ(pbs_begin(noon + 6 * 3600), "202611301800.00");
  EXPECT_EQ(signal_lead_seconds(5.0, 2.0, 5.0), 45);
}

TEST(SubmitChain, SubmitsDependentStagesAndSteps) {
  test::TempDir dir;
  const std::string run_dir = dir.path() + "/run 'one'";
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, run_dir);
  o.stages = "3";
  o.gpus = "2,4,1";
  o.time = "00:05:00";
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0);
  ASSERT_EQ(fake.count("sbatch"), 3) << out.str();
  EXPECT_EQ(fake.calls[1][fake.calls[1].size() - 3], "--dependency=afterany:100");
  EXPECT_EQ(fake.calls[2][fake.calls[2].size() - 3], "--dependency=afterany:101");
  EXPECT_EQ(fake.calls[0].back(), run_dir + "/stage-1.sbatch");
  EXPECT_TRUE(fs::exists(run_dir + "/stage-3.sbatch"));
  Chain c = read_chain(run_dir);
  ASSERT_EQ(c.stages.size(), 3u);
  EXPECT_EQ(c.stages[2].job, "102");
  EXPECT_EQ(c.stages[1].gpus, 4);

  // A second submit while stages are queued is refused.
  EXPECT_THROW(submit_command(o, {}, fake.runner(), out), ConfigError);

  EXPECT_NE(chain_step(run_dir, 1, 3, "100", fake.runner()).find("stage 2 continues"), std::string::npos);
  EXPECT_NE(chain_step(run_dir, 2, 0, "101", fake.runner()).find("training complete"), std::string::npos);
  c = read_chain(run_dir);
  EXPECT_EQ(c.state, ChainState::completed);
  EXPECT_EQ(c.stages[0].state, StageState::resumable);
  EXPECT_EQ(c.stages[2].state, StageState::cancelled);
  EXPECT_EQ(fake.calls.back(), (std::vector<std::string>{"scancel", "102"}));

  std::ostringstream status;
  print_chain_status(run_dir, fake.runner(), status);
  EXPECT_NE(status.str().find("stage 3  job 102  1 GPU(s) on 1 node(s)  cancelled"), std::string::npos) << status.str();
}

TEST(SubmitChain, RefusalShowsTheMessageAndTheLargestAcceptedPlan) {
  test::TempDir dir;
  FakeScheduler fake;
  fake.refuse = [](const std::vector<std::string>& argv) {
    // Accept at most 2 GPUs: the script asks for 4 unless the command line overrides it.
    for (const auto& a : argv) {
      if (a.rfind("--gpus-per-node=", 0) == 0) return std::stoi(a.substr(16)) > 2;
    }
    return true;
  };
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  o.gpus = "4";
  o.nodes = "2";
  o.stages = "2";
  o.time = "00:10:00";
  o.partition = "gpu";
  o.cpus_per_gpu = 3;
  o.sbatch_args = {"--comment=two words"};
  std::ostringstream out;
  try {
    submit_command(o, {}, fake.runner(), out);
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("sbatch: error: max 2 GPUs per job"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("largest GPU count the scheduler accepts is 2 (on 2 node(s))"), std::string::npos)
        << e.hint();
    // The command to run instead keeps the other options (it used to drop --nodes, --time, --stages).
    EXPECT_NE(e.hint().find("gtrain submit " + o.config_path + " --run-dir " + o.run_dir +
                            " --stages 2 --gpus 2 --nodes 2 --time 00:10:00 --partition gpu --sbatch-arg "
                            "'--comment=two words' --cpus-per-gpu 3; its plan:"),
              std::string::npos)
        << e.hint();
  }
  EXPECT_EQ(read_chain(o.run_dir).state, ChainState::failed);
}

TEST(SubmitChain, PbsDependsWithW) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  o.scheduler = "pbs";
  o.stages = "2";
  o.gpus = "4";
  o.nodes = "2";
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0);
  ASSERT_EQ(fake.count("qsub"), 2);
  const auto& call = fake.calls[1];
  EXPECT_NE(std::find(call.begin(), call.end(), "depend=afterany:100.pbs01"), call.end());
  EXPECT_NE(test::read_file(o.run_dir + "/stage-1.pbs").find("select=2:ngpus=2"), std::string::npos);
  // -V: the stage runs with the environment submit checked (GTRAIN_* overrides), as Slurm's --export=ALL.
  for (const auto& c : fake.calls) {
    if (c[0] == "qsub") {
      EXPECT_NE(std::find(c.begin(), c.end(), "-V"), c.end());
    }
  }
}

TEST(SubmitChain, DryRunSubmitsNothing) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run $x");
  o.dry_run = true;
  o.stages = "2";
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0);
  EXPECT_TRUE(fake.calls.empty());
  EXPECT_TRUE(fs::exists(o.run_dir + "/stage-2.sbatch"));
  EXPECT_NE(out.str().find("'--chdir=" + o.run_dir + "'"), std::string::npos) << out.str();
}

// Windows mon-fri 08:00-20:00 (8 GPUs) and 20:00-08:00 (32), 2 h stages submitted at 14:28 on a
// Monday: stages 2 and 3 follow on afterany in the day window, stage 4 waits for 20:00 exactly,
// stage 5 follows it in the night window.
TEST(SubmitPlan, BeginOnlyWhereAStageWaitsForAnotherWindow) {
  WindowConfig day{"mon-fri", "08:00-20:00", 8}, night{"mon-fri", "20:00-08:00", 32};
  const std::vector<Window> ws = {parse_window(day, "d"), parse_window(night, "n")};
  std::tm tm{};
  tm.tm_year = 126, tm.tm_mon = 10, tm.tm_mday = 30, tm.tm_hour = 14, tm.tm_min = 28, tm.tm_isdst = -1;
  const double now = static_cast<double>(std::mktime(&tm));
  ASSERT_EQ(tm.tm_wday, 1) << "2026-11-30 is a Monday";
  SubmitOptions o;
  o.time = "02:00:00";
  const auto p = plan_stages(o, 5, ws, now);
  ASSERT_EQ(p.size(), 5u);
  const std::vector<int> gpus = {8, 8, 8, 32, 32};
  const std::vector<double> begin = {0, 0, 0, now + 5 * 3600 + 32 * 60, 0};  // 20:00 = 14:28 + 5 h 32 min
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_EQ(p[i].gpus, gpus[i]) << "stage " << i + 1;
    EXPECT_EQ(p[i].begin_unix, begin[i]) << "stage " << i + 1;
  }
  EXPECT_EQ(slurm_begin(p[3].begin_unix), "2026-11-30T20:00:00");
  // Outside every window, the first stage waits for the next opening (Tuesday 08:00).
  tm = {};
  tm.tm_year = 126, tm.tm_mon = 11, tm.tm_mday = 1, tm.tm_hour = 8, tm.tm_isdst = -1;
  const double tuesday8 = static_cast<double>(std::mktime(&tm));
  const auto q = plan_stages(o, 1, {parse_window(day, "d")}, now + 6 * 3600);
  EXPECT_EQ(q[0].begin_unix, tuesday8);
}

// Windows 08-20 (2 GPUs) and 20-08 (8), --time 24:00:00 (a partition's limit): a stage in a window
// stops at its close, so the next one starts there, on the next window's GPUs; day and night
// alternate. (Each stage used to be predicted to run its whole 24 h, so every later stage waited for
// the window of the same hour a day later and half of the windows were never planned.)
TEST(SubmitPlan, ATimeLongerThanAWindowPlansEveryWindow) {
  WindowConfig day{"daily", "08:00-20:00", 2}, night{"daily", "20:00-08:00", 8};
  const std::vector<Window> ws = {parse_window(day, "d"), parse_window(night, "n")};
  std::tm tm{};
  tm.tm_year = 126, tm.tm_mon = 10, tm.tm_mday = 30, tm.tm_hour = 14, tm.tm_min = 28, tm.tm_isdst = -1;
  const double now = static_cast<double>(std::mktime(&tm));
  const double h = 3600;
  SubmitOptions o;
  o.time = "24:00:00";
  const auto p = plan_stages(o, 4, ws, now);
  ASSERT_EQ(p.size(), 4u);
  const double d20 = now + 5 * h + 32 * 60;  // Monday 20:00
  const std::vector<int> gpus = {2, 8, 2, 8};
  const std::vector<double> begin = {0, d20, d20 + 12 * h, d20 + 24 * h};
  const std::vector<double> end = {d20, d20 + 12 * h, d20 + 24 * h, d20 + 36 * h};
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_EQ(p[i].gpus, gpus[i]) << "stage " << i + 1;
    EXPECT_EQ(p[i].begin_unix, begin[i]) << "stage " << i + 1;
    EXPECT_EQ(p[i].start_unix, i == 0 ? now : begin[i]) << "stage " << i + 1;
    EXPECT_EQ(p[i].end_unix, end[i]) << "stage " << i + 1;
  }
  EXPECT_EQ(slurm_begin(p[2].begin_unix), "2026-12-01T08:00:00");
}

// submit with windows says what a --time longer than the windows costs, and prints the calendar and
// the request paragraph (the admin's question) before anything is queued; a fixed clock (Monday
// 14:28) makes the calendar exact.
TEST(SubmitChain, WindowsPrintTheCalendarAndWhatTimeCosts) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  test::write_file(o.config_path, std::string(kMlp) +
                                      "[[schedule.window]]\ndays = \"daily\"\nhours = \"08:00-20:00\"\nmax_gpus = 2\n"
                                      "[[schedule.window]]\ndays = \"daily\"\nhours = \"20:00-08:00\"\nmax_gpus = 8\n");
  std::tm tm{};
  tm.tm_year = 126, tm.tm_mon = 10, tm.tm_mday = 30, tm.tm_hour = 14, tm.tm_min = 28, tm.tm_isdst = -1;
  o.now_unix = static_cast<double>(std::mktime(&tm));
  o.time = "24:00:00";
  o.stages = "3";
  o.dry_run = true;
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0) << out.str();
  const std::string text = out.str();
  EXPECT_NE(text.find("  stage 2: 8 GPU(s) on 1 node(s), begin 2026-11-30T20:00:00, stage-2.sbatch\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  stage 3: 2 GPU(s) on 1 node(s), begin 2026-12-01T08:00:00, stage-3.sbatch\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  --time 24:00:00 is longer than the longest quota window stretch (12 h 0 min): each stage "
                      "stops at its window's close anyway"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  calendar: 2 GPUs daily 08:00-20:00 + 8 GPUs daily 20:00-08:00: done Monday 11-30 14:28 "),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("  request: Project: training mlp"), std::string::npos) << text;
}

// The dry run prints the exact commands, with --begin and GTRAIN_STAGE, each stage after $JOB(k-1).
TEST(SubmitChain, DryRunPrintsTheExactCommands) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  // A window that opens in two hours' time (whole hours, local time): stage 1 begins then.
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char hours[32];
  std::snprintf(hours, sizeof hours, "%02d:00-%02d:00", (local.tm_hour + 2) % 24, (local.tm_hour + 3) % 24);
  test::write_file(o.config_path, std::string(kMlp) + "[[schedule.window]]\nhours = \"" + hours + "\"\nmax_gpus = 2\n");
  o.dry_run = true;
  o.stages = "2";
  o.time = "00:10:00";  // stage 2 follows in the same window: no --begin of its own
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0) << out.str();
  const std::string text = out.str();
  EXPECT_NE(text.find("  JOB1=$(sbatch --parsable"), std::string::npos) << text;
  EXPECT_NE(text.find("--begin="), std::string::npos) << text;
  EXPECT_NE(text.find("--export=ALL,GTRAIN_STAGE=1 " + o.run_dir + "/stage-1.sbatch) && JOB1=${JOB1%%;*}\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\"--dependency=afterany:$JOB1\" --export=ALL,GTRAIN_STAGE=2 " + o.run_dir +
                      "/stage-2.sbatch) && JOB2=${JOB2%%;*}\n"),
            std::string::npos)
      << text;
  // The lines run as they are against a fake sbatch that echoes its arguments and a job id with a
  // cluster name, as --parsable does on a multi-cluster site.
  fs::create_directories(dir.file("bin"));
  test::write_file(dir.file("bin/sbatch"),
                   "#!/bin/bash\necho \"$*\" >> " + dir.file("sbatch.log") + "\necho \"$RANDOM;cluster2\"\n");
  fs::permissions(dir.file("bin/sbatch"), fs::perms::owner_all);
  std::string commands;
  for (const auto& line : test::lines(text)) {
    if (line.rfind("  JOB", 0) == 0) commands += line + "\n";
  }
  test::write_file(dir.file("cmds.sh"), "set -eu\n" + commands + "echo \"$JOB1 $JOB2\"\n");
  const auto r = test::run_command("PATH=" + dir.file("bin") + ":$PATH bash " + dir.file("cmds.sh"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const auto calls = test::lines(test::read_file(dir.file("sbatch.log")));
  ASSERT_EQ(calls.size(), 2u);
  const auto ids = test::lines(r.output);
  ASSERT_FALSE(ids.empty());
  const std::string job1 = ids.back().substr(0, ids.back().find(' '));
  EXPECT_EQ(job1.find(';'), std::string::npos) << r.output;
  EXPECT_NE(calls[1].find("--dependency=afterany:" + job1 + " "), std::string::npos) << calls[1] << "\n" << r.output;
}

// What gtrain run refuses at once, submit refuses before writing anything.
TEST(SubmitChain, RefusesWhatRunWouldRefuseBeforeWritingScripts) {
  test::TempDir dir;
  FakeScheduler fake;
  auto expect_refused = [&](const std::string& config, const std::vector<std::string>& sets,
                            const std::string& needle) {
    SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
    test::write_file(o.config_path, config);
    o.sets = sets;
    o.dry_run = true;
    std::ostringstream out;
    try {
      submit_command(o, {}, fake.runner(), out);
      ADD_FAILURE() << "accepted; expected " << needle << "\n" << out.str();
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(o.run_dir + "/stage-1.sbatch"));
  };
  std::string unknown = kMlp;
  unknown.replace(unknown.find("\"mlp\""), 5, "\"resnet9000\"");
  expect_refused(unknown, {}, "resnet9000");
  expect_refused(kMlp, {"parallel.pp_microbatches=100000"}, "parallel.pp_microbatches = 100000 exceeds");
  // The stage scripts stop gtrain run with USR1: without it in the list, USR1 would kill the stage unsaved.
  expect_refused(kMlp, {"schedule.stop_signals=[\"TERM\", \"INT\"]"},
                 "schedule.stop_signals = [\"TERM\", \"INT\"] lacks \"USR1\", which the stage scripts send");
  // A GPT sized from its shape opens no data; its token files must exist all the same.
  const std::string gpt =
      "[model]\nname = \"gpt\"\nn_layer = 2\nn_head = 2\nn_embd = 64\nseq_len = 32\nvocab = 256\n"
      "[data]\nkind = \"tokens\"\npath = \"" +
      dir.file("missing.bin") + "\"\n[train]\nsteps = 10\nglobal_batch = 8\n";
  expect_refused(gpt, {}, "data.path: file \"" + dir.file("missing.bin") + "\" does not exist");
  expect_refused(gpt, {"data.path=\"" + dir.file("shard_*.bin") + "\""},
                 "data.path: no file matches \"" + dir.file("shard_*.bin") + "\"");
  test::write_file(dir.file("shard_0.bin"), std::string(4096, '\0'));
  expect_refused(gpt,
                 {"data.path=\"" + dir.file("shard_*.bin") + "\"", "data.eval_path=\"" + dir.file("val.bin") + "\""},
                 "data.eval_path: file \"" + dir.file("val.bin") + "\" does not exist");
  EXPECT_TRUE(fake.calls.empty());
}

// submit refuses a run directory a gtrain run works in now: its stages could not start.
TEST(SubmitChain, RefusesARunDirectoryInUse) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  fs::create_directories(o.run_dir);
  const auto lock = RunLock::acquire(o.run_dir, "");
  std::ostringstream out;
  try {
    submit_command(o, {}, fake.runner(), out);
    ADD_FAILURE() << "submit must refuse a run directory in use";
  } catch (const BusyError& e) {
    EXPECT_NE(std::string(e.what()).find("is in use by another gtrain run"), std::string::npos) << e.what();
  }
  EXPECT_EQ(fake.count("sbatch"), 0);
  EXPECT_FALSE(chain_exists(o.run_dir));
}

// A --time beyond the partition's MaxTime would pend for ever (PartitionTimeLimit): refused before
// anything is written, naming both.
TEST(SubmitChain, TimeBeyondThePartitionsMaxTimeIsRefused) {
  test::TempDir dir;
  FakeScheduler fake;
  fake.answer = [](const std::vector<std::string>& argv) -> std::optional<std::string> {
    if (argv[0] == "scontrol")
      return std::string(
          "PartitionName=gpu MaxTime=UNLIMITED State=UP\n"
          "PartitionName=debug Default=YES MaxTime=00:02:00 State=UP\n");
    return std::nullopt;
  };
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  o.time = "00:05:00";
  std::ostringstream out;
  try {
    submit_command(o, {}, fake.runner(), out);
    ADD_FAILURE() << "accepted a --time the default partition never runs";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--time 00:05:00 exceeds partition debug's MaxTime 00:02:00"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(fake.count("sbatch"), 0);
  EXPECT_FALSE(fs::exists(o.run_dir));
  o.partition = "gpu";  // unlimited
  EXPECT_EQ(submit_command(o, {}, fake.runner(), out), 0) << out.str();
  o.run_dir = dir.path() + "/run2";
  o.partition.clear();
  o.time = "00:02:00";
  EXPECT_EQ(submit_command(o, {}, fake.runner(), out), 0) << out.str();
}

// sbatch that cannot reach the controller is a runtime failure (exit 1) with sbatch's message, not
// a refusal of the job's options (exit 2).
TEST(SubmitChain, UnreachableControllerIsARuntimeError) {
  // A controller that does not answer, and a Slurm installed without a configuration to find it.
  for (const std::string message :
       {"sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)",
        "sbatch: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host\nsbatch: error: fetch_config: DNS "
        "SRV lookup failed\nsbatch: error: _establish_config_source: failed to fetch config\nsbatch: fatal: Could "
        "not establish a configuration source"}) {
    test::TempDir dir;
    FakeScheduler fake;
    fake.answer = [message](const std::vector<std::string>& argv) -> std::optional<std::string> {
      if (argv[0] == "sbatch") return message + "\ngtrain-rc=1";
      return std::nullopt;
    };
    SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
    std::ostringstream out;
    try {
      submit_command(o, {}, fake.runner(), out);
      ADD_FAILURE() << "accepted";
    } catch (const ConfigError& e) {
      ADD_FAILURE() << "reported as bad input: " << e.what();
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 1);
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("sbatch could not submit stage 1 (scheduler unreachable, exit 1)", 0), 0u) << what;
      EXPECT_NE(what.find("\n" + message), std::string::npos) << what;
    }
    EXPECT_EQ(fake.count("sbatch"), 1) << "no --test-only probing of a scheduler that is not there";
    EXPECT_EQ(read_chain(o.run_dir).state, ChainState::failed);
  }
}

// PBS: no QOS; a log per stage; the summary says how a stage stops (no early signal on PBS).
TEST(SubmitChain, PbsQosLogsAndStopping) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  o.scheduler = "pbs";
  o.qos = "high";
  EXPECT_THROW(
      {
        try {
          validate_submit_options(o);
        } catch (const ConfigError& e) {
          EXPECT_NE(std::string(e.what()).find("--qos 'high': PBS has no QOS"), std::string::npos) << e.what();
          throw;
        }
      },
      ConfigError);
  o.qos.clear();
  o.stages = "auto";
  o.time = "01:00:00";
  o.signal_lead_s = 45;
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0) << out.str();
  EXPECT_EQ(out.str().find("USR1"), std::string::npos) << out.str();
  // One lead: the deadline is the walltime less the exit margin (here --signal-lead 45); gtrain run
  // itself saves ahead of it by its measured save time.
  EXPECT_NE(out.str().find("gtrain run --time-limit 3555s less the script's start-up (PBS sends no early signal"),
            std::string::npos)
      << out.str();
  const std::string script = test::read_file(o.run_dir + "/stage-1.pbs");
  EXPECT_NE(script.find("TIME_LIMIT=$(( 3555 - SECONDS ))"), std::string::npos) << script;
  EXPECT_NE(script.find("#PBS -l walltime=01:00:00\n"), std::string::npos) << script;
  chain_step(o.run_dir, 1, 3, "100.pbs01", fake.runner());  // auto: one more stage
  ASSERT_EQ(fake.count("qsub"), 2);
  auto output_of = [](const std::vector<std::string>& call) {
    auto it = std::find(call.begin(), call.end(), "-o");
    return it == call.end() ? std::string() : *(it + 1);
  };
  EXPECT_EQ(output_of(fake.calls[0]), o.run_dir + "/pbs-stage-1.out");
  EXPECT_EQ(output_of(fake.calls.back()), o.run_dir + "/pbs-stage-2.out");
  o.signal_lead_s = 0;  // the default exit margin, 30 s
  o.run_dir = dir.path() + "/run2";
  std::ostringstream out2;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out2), 0) << out2.str();
  EXPECT_NE(test::read_file(o.run_dir + "/stage-1.pbs").find("TIME_LIMIT=$(( 3570 - SECONDS ))"), std::string::npos);
  // PBS walltime has no days: Slurm's D-HH:MM:SS is written as hours.
  o.time = "1-00:30:00";
  o.run_dir = dir.path() + "/run3";
  std::ostringstream out3;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out3), 0) << out3.str();
  EXPECT_NE(test::read_file(o.run_dir + "/stage-1.pbs").find("#PBS -l walltime=24:30:00\n"), std::string::npos);
}
