// test_chain.cpp: the chain's transitions against a fake scheduler: chain-step (failures, auto
// stages, quota windows, requeued and foreign jobs), gtrain cancel, and gtrain status (label cpu).
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

TEST(SubmitChain, FailureCancelsTheRestAndSaysWhy) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  o.stages = "3";
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0);
  const std::string why = chain_step(o.run_dir, 1, 2, "100", fake.runner());
  EXPECT_NE(why.find("stage 1 failed with exit code 2 (bad input)"), std::string::npos) << why;
  EXPECT_EQ(fake.count("scancel"), 2);
  const Chain c = read_chain(o.run_dir);
  EXPECT_EQ(c.state, ChainState::failed);
  EXPECT_EQ(c.stages[1].state, StageState::cancelled);
}

TEST(SubmitChain, AutoStagesSubmitOneMoreWhileResumable) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0);
  ASSERT_EQ(fake.count("sbatch"), 1);
  chain_step(o.run_dir, 1, 3, "100", fake.runner());
  ASSERT_EQ(fake.count("sbatch"), 2);
  const auto& call = fake.calls.back();
  EXPECT_NE(std::find(call.begin(), call.end(), "--dependency=afterany:100"), call.end());
  EXPECT_NE(std::find(call.begin(), call.end(), "--export=ALL,GTRAIN_STAGE=2"), call.end());
  chain_step(o.run_dir, 2, 0, "101", fake.runner());
  const Chain c = read_chain(o.run_dir);
  EXPECT_EQ(c.stages.size(), 2u);
  EXPECT_EQ(c.state, ChainState::completed);
  std::ostringstream cancel;
  EXPECT_EQ(cancel_chain(o.run_dir, fake.runner(), cancel).cancelled, 0);
}

// A cancel the scheduler refuses: exit 1 (runtime), the stage stays queued, the chain running.
TEST(SubmitChain, CancelThatFailsSaysSoAndKeepsTheChain) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  o.stages = "2";
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0);
  fake.answer = [](const std::vector<std::string>& argv) -> std::optional<std::string> {
    if (argv[0] == "scancel" && argv[1] == "101")
      return std::string("scancel: error: Unable to contact slurm controller (connect failure)\ngtrain-rc=1");
    return std::nullopt;
  };
  std::ostringstream cancel;
  try {
    cancel_command(o.run_dir, fake.runner(), cancel);
    ADD_FAILURE() << "cancel succeeded\n" << cancel.str();
  } catch (const ConfigError& e) {
    ADD_FAILURE() << "a failed scancel is not bad input: " << e.what();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 1);
    EXPECT_NE(std::string(e.what()).find("1 job(s) could not be cancelled"), std::string::npos) << e.what();
    EXPECT_EQ(e.hint().rfind("try gtrain cancel ", 0), 0u) << e.hint();
  }
  EXPECT_NE(cancel.str().find("gtrain cancel: 1 job(s) cancelled"), std::string::npos) << cancel.str();
  const Chain c = read_chain(o.run_dir);
  EXPECT_EQ(c.state, ChainState::running);
  EXPECT_EQ(c.stages[0].state, StageState::cancelled);
  EXPECT_EQ(c.stages[1].state, StageState::queued);
}

// Stages --stages auto adds follow the quota windows as the first ones did: one that would start
// outside every window gets --begin at the next opening, and (without --gpus) the cap of the window
// it starts in, put on the sbatch command line (it used to copy stage 1's size and start at once).
TEST(SubmitChain, AutoStagesFollowTheQuotaWindows) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  test::write_file(o.config_path,
                   std::string(kMlp) +
                       "[[schedule.window]]\ndays = \"mon-fri\"\nhours = \"08:00-20:00\"\nmax_gpus = 8\n"
                       "[[schedule.window]]\ndays = \"mon-fri\"\nhours = \"20:00-08:00\"\nmax_gpus = 32\n");
  o.launcher = "srun";
  std::ostringstream out;
  // Every window's size is checked at submit, whenever it runs: 16 samples cannot fill 32 GPUs.
  try {
    submit_command(o, {}, fake.runner(), out);
    ADD_FAILURE() << "a global batch of 16 accepted for the night window's 32 GPUs";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("train.global_batch = 16 is smaller than the 32 data-parallel ranks"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(fake.calls.empty());
  o.sets = {"train.global_batch=64"};
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0) << out.str();
  auto local = [](int mday, int hour) {
    std::tm tm{};
    tm.tm_year = 126, tm.tm_mon = 11, tm.tm_mday = mday, tm.tm_hour = hour, tm.tm_isdst = -1;
    return static_cast<double>(std::mktime(&tm));
  };
  // Stage 1 saves on Saturday 2026-12-05 at 09:00: no window until Monday 08:00, the day's 8 GPUs.
  std::string what = chain_step(o.run_dir, 1, 3, "100", fake.runner(), local(5, 9));
  EXPECT_NE(what.find("begin 2026-12-07T08:00:00 (the next quota window)"), std::string::npos) << what;
  Chain c = read_chain(o.run_dir);
  ASSERT_EQ(c.stages.size(), 2u);
  EXPECT_EQ(c.stages[1].begin, "2026-12-07T08:00:00");
  EXPECT_EQ(c.stages[1].gpus, 8);
  auto has = [](const std::vector<std::string>& call, const std::string& arg) {
    return std::count(call.begin(), call.end(), arg);
  };
  EXPECT_EQ(has(fake.calls.back(), "--begin=2026-12-07T08:00:00"), 1);
  // Stage 2 saves on Tuesday at 21:00, inside the night window: no wait, 32 GPUs, srun's 32 tasks.
  what = chain_step(o.run_dir, 2, 3, "101", fake.runner(), local(8, 21));
  EXPECT_NE(what.find("32 GPU(s) (the quota window's max_gpus)"), std::string::npos) << what;
  EXPECT_EQ(what.find("begin"), std::string::npos) << what;
  c = read_chain(o.run_dir);
  ASSERT_EQ(c.stages.size(), 3u);
  EXPECT_EQ(c.stages[2].gpus, 32);
  EXPECT_EQ(c.stages[2].begin, "");
  const auto& call = fake.calls.back();
  EXPECT_EQ(has(call, "--gpus-per-node=32"), 1);
  EXPECT_EQ(has(call, "--ntasks-per-node=32"), 1);
  EXPECT_EQ(has(call, "--gpus-per-node=8"), 0) << "the previous stage's size is replaced, not repeated";
  EXPECT_EQ(call.back(), o.run_dir + "/stage-1.sbatch");
  // Stage 3 saves on Thursday at 07:57, ahead of the night window's close: stage 4 is for the day
  // window that follows (it was sized and timed for the closing one, and ended at once or waited).
  what = chain_step(o.run_dir, 3, 3, "102", fake.runner(), local(10, 7) + 57 * 60);
  EXPECT_NE(what.find("begin 2026-12-10T08:00:00 (the next quota window)"), std::string::npos) << what;
  EXPECT_NE(what.find("8 GPU(s) (the quota window's max_gpus)"), std::string::npos) << what;
  EXPECT_EQ(read_chain(o.run_dir).stages[3].gpus, 8);
  // PBS: the new size is a new select chunk, with the cores --cpus-per-gpu asked for (kept in chain.json).
  SubmitOptions p = o;
  p.run_dir = dir.path() + "/run-pbs";
  p.scheduler = "pbs";
  p.launcher = "mpirun";
  p.cpus_per_gpu = 4;
  ASSERT_EQ(submit_command(p, {}, fake.runner(), out), 0) << out.str();
  EXPECT_NE(test::read_file(p.run_dir + "/stage-1.pbs").find("#PBS -l select=1:ngpus="), std::string::npos);
  EXPECT_EQ(read_chain(p.run_dir).cpus_per_gpu, 4);
  // Stage 2 waits for Monday's day window: 8 GPUs (stage 1 had the window of the hour the test runs).
  chain_step(p.run_dir, 1, 3, read_chain(p.run_dir).stages[0].job, fake.runner(), local(5, 9));
  EXPECT_EQ(read_chain(p.run_dir).stages[1].gpus, 8);
  what = chain_step(p.run_dir, 2, 3, read_chain(p.run_dir).stages[1].job, fake.runner(), local(8, 21));
  EXPECT_NE(what.find("32 GPU(s) (the quota window's max_gpus)"), std::string::npos) << what;
  EXPECT_EQ(has(fake.calls.back(), "select=1:ngpus=32:ncpus=128:mpiprocs=32"), 1);
}

// After gtrain cancel, the stage still running (scancel TERMs it: it saves and exits 3) reports
// through chain-step, which records it and submits nothing more, even for --stages auto.
TEST(SubmitChain, CancelledAutoChainSubmitsNoMoreStages) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0);
  std::ostringstream cancel;
  EXPECT_EQ(cancel_command(o.run_dir, fake.runner(), cancel), 0);
  const std::string what = chain_step(o.run_dir, 1, 3, "100", fake.runner());
  EXPECT_EQ(what,
            "stage 1 ended (exit 3) after gtrain cancel; nothing more is submitted (resume with gtrain submit again)");
  EXPECT_EQ(fake.count("sbatch"), 1);
  const Chain c = read_chain(o.run_dir);
  EXPECT_EQ(c.state, ChainState::cancelled);
  ASSERT_EQ(c.stages.size(), 1u);
  EXPECT_EQ(c.stages[0].state, StageState::resumable);
  EXPECT_EQ(c.stages[0].exit, 3);
}

// gtrain cancel asks a running stage to save first (scancel --batch --signal=USR1, which the script
// passes to gtrain run as at the time limit) and cancels the waiting ones; --now cancels it outright.
// A stage requeued after it saved (chain.json: resumable, the scheduler: PENDING) is cancelled too.
TEST(SubmitChain, CancelAsksTheRunningStageToSaveFirst) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  o.stages = "3";
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0);
  std::string squeue = "100 RUNNING\n101 PENDING\n102 PENDING\n";
  fake.answer = [&](const std::vector<std::string>& argv) -> std::optional<std::string> {
    if (argv[0] == "squeue") return squeue + "gtrain-rc=0";
    return std::nullopt;
  };
  std::ostringstream cancel;
  EXPECT_EQ(cancel_command(o.run_dir, fake.runner(), cancel), 0) << cancel.str();
  const auto called = [&](const std::vector<std::string>& argv) {
    return std::count(fake.calls.begin(), fake.calls.end(), argv);
  };
  EXPECT_EQ(called({"scancel", "--batch", "--signal=USR1", "100"}), 1);
  EXPECT_EQ(called({"scancel", "100"}), 0) << "the running stage is not cancelled before it saved";
  EXPECT_EQ(called({"scancel", "101"}), 1);
  EXPECT_EQ(called({"scancel", "102"}), 1);
  EXPECT_NE(cancel.str().find("stage 1 job 100: running: asked to save and stop (USR1)"), std::string::npos)
      << cancel.str();
  EXPECT_NE(cancel.str().find("gtrain cancel: 2 job(s) cancelled, 1 running stage(s) saving before they stop"),
            std::string::npos)
      << cancel.str();
  Chain c = read_chain(o.run_dir);
  EXPECT_EQ(c.state, ChainState::cancelled);
  EXPECT_EQ(c.stages[0].state, StageState::queued) << "until its chain-step reports";
  EXPECT_EQ(c.stages[1].state, StageState::cancelled);
  // The stage saves and reports: recorded, nothing more submitted.
  EXPECT_NE(chain_step(o.run_dir, 1, 3, "100", fake.runner()).find("after gtrain cancel"), std::string::npos);
  EXPECT_EQ(read_chain(o.run_dir).stages[0].state, StageState::resumable);
  // Slurm requeued it (--requeue): it waits again though chain.json says resumable. A new submit is
  // refused while it exists, and cancel cancels it, outright with --now even when it runs.
  squeue = "100 PENDING\n";
  try {
    submit_command(o, {}, fake.runner(), out);
    ADD_FAILURE() << "submit must refuse while job 100 waits";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("a chain still has stage 1 (job 100, PENDING)"), std::string::npos)
        << e.what();
  }
  squeue = "100 RUNNING\n";
  cancel.str("");
  EXPECT_EQ(cancel_command(o.run_dir, fake.runner(), cancel, /*now=*/true), 0) << cancel.str();
  EXPECT_EQ(called({"scancel", "100"}), 1);
  EXPECT_EQ(read_chain(o.run_dir).stages[0].state, StageState::cancelled);
  chain_step(o.run_dir, 1, 205, "100", fake.runner());  // what the kill left of gtrain run
  EXPECT_EQ(read_chain(o.run_dir).stages[0].state, StageState::cancelled);
  EXPECT_EQ(read_chain(o.run_dir).stages[0].exit, 205);
  // Once the scheduler has none of the chain's jobs, submit starts a new chain.
  squeue = "";
  EXPECT_EQ(submit_command(o, {}, fake.runner(), out), 0) << out.str();
  EXPECT_EQ(read_chain(o.run_dir).state, ChainState::running);
}

// PBS: a running stage (qstat -f: job_state = R) gets qsig -s USR1; a queued one qdel.
TEST(SubmitChain, PbsCancelSignalsTheRunningStage) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  o.scheduler = "pbs";
  o.stages = "2";
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0);
  fake.answer = [](const std::vector<std::string>& argv) -> std::optional<std::string> {
    if (argv[0] == "qstat" && argv.size() == 3)
      return std::string("Job Id: ") + argv[2] + "\n    job_state = " + (argv[2] == "100.pbs01" ? "R" : "Q") +
             "\ngtrain-rc=0";
    if (argv[0] == "qsig") return std::string("gtrain-rc=0");
    return std::nullopt;
  };
  std::ostringstream cancel;
  EXPECT_EQ(cancel_command(o.run_dir, fake.runner(), cancel), 0) << cancel.str();
  EXPECT_EQ(
      std::count(fake.calls.begin(), fake.calls.end(), std::vector<std::string>{"qsig", "-s", "USR1", "100.pbs01"}), 1);
  EXPECT_EQ(std::count(fake.calls.begin(), fake.calls.end(), std::vector<std::string>{"qdel", "101.pbs01"}), 1);
  EXPECT_EQ(std::count(fake.calls.begin(), fake.calls.end(), std::vector<std::string>{"qdel", "100.pbs01"}), 0);
}

// A job that is not the chain's stage (an earlier chain's, requeued or still saving) leaves chain.json
// alone; chain-step waits for a cancel or submit that holds the chain's lock, so neither writes back a
// stale copy over the other's changes.
TEST(SubmitChain, StepOfAnotherChainsJobAndConcurrentChangesAreSafe) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0);
  const std::string before = test::read_file(o.run_dir + "/chain.json");
  EXPECT_EQ(chain_step(o.run_dir, 1, 2, "77", fake.runner()),
            "job 77 is not in this run directory's chain (its stage 1 is job 100); chain.json unchanged");
  EXPECT_EQ(test::read_file(o.run_dir + "/chain.json"), before);
  std::string what;
  std::optional<ChainLock> held;
  held.emplace(o.run_dir);
  std::thread step([&] { what = chain_step(o.run_dir, 1, 3, "100", fake.runner()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_EQ(test::read_file(o.run_dir + "/chain.json"), before) << "chain-step must wait for the lock";
  Chain changed = read_chain(o.run_dir);
  changed.reason = "changed under the lock";
  write_chain(o.run_dir, changed);
  held.reset();
  step.join();
  EXPECT_NE(what.find("submitted stage 2"), std::string::npos) << what;
  const Chain c = read_chain(o.run_dir);
  EXPECT_EQ(c.reason, "changed under the lock") << "chain-step read the chain after the change";
  EXPECT_EQ(c.stages.size(), 2u);
}

// PBS_JOBID may carry the server's full name where qsub answered with its short one: the same job.
TEST(SubmitChain, PbsJobIdsMatchWithTheServersFullName) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  o.scheduler = "pbs";
  o.stages = "2";
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0);
  ASSERT_EQ(read_chain(o.run_dir).stages[0].job, "100.pbs01");
  EXPECT_NE(chain_step(o.run_dir, 1, 3, "100.pbs01.example.org", fake.runner()).find("stage 2 continues"),
            std::string::npos);
  EXPECT_EQ(read_chain(o.run_dir).stages[0].state, StageState::resumable);
  EXPECT_NE(chain_step(o.run_dir, 2, 0, "7.pbs01", fake.runner()).find("not in this run directory's chain"),
            std::string::npos);
  EXPECT_EQ(read_chain(o.run_dir).stages[1].state, StageState::queued);
}

// A chain that had ended (stopped, failed) when a stage Slurm requeued reports again: the result is
// recorded and nothing more is submitted, even for --stages auto; gtrain cancel of such a stage marks
// the chain cancelled.
TEST(SubmitChain, EndedChainSubmitsNothingForARequeuedStage) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0);
  Chain c = read_chain(o.run_dir);
  c.state = ChainState::failed;
  c.reason = "set by the test";
  write_chain(o.run_dir, c);
  const std::string what = chain_step(o.run_dir, 1, 3, "100", fake.runner());
  EXPECT_NE(what.find("after the chain ended (failed); nothing more is submitted"), std::string::npos) << what;
  EXPECT_EQ(fake.count("sbatch"), 1);
  EXPECT_EQ(read_chain(o.run_dir).stages[0].state, StageState::resumable);
  fake.answer = [](const std::vector<std::string>& argv) -> std::optional<std::string> {
    if (argv[0] == "squeue") return std::string("100 RUNNING\ngtrain-rc=0");
    return std::nullopt;
  };
  std::ostringstream cancel;
  EXPECT_EQ(cancel_command(o.run_dir, fake.runner(), cancel), 0) << cancel.str();
  EXPECT_EQ(read_chain(o.run_dir).state, ChainState::cancelled) << cancel.str();
}

// A stage killed outright (no chain-step) stays "queued" in chain.json: when the scheduler says it
// no longer knows the job, cancel marks it ended instead of failing forever, and a new submit is
// not refused for it. A scheduler that cannot be asked still counts as queued.
TEST(SubmitChain, StageThatDiedWithoutReportingDoesNotHoldTheChain) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  o.stages = "2";
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0);
  bool squeue_answers = false;
  fake.answer = [&](const std::vector<std::string>& argv) -> std::optional<std::string> {
    if (argv[0] == "scancel" && argv[1] == "100")
      return std::string("scancel: error: Kill job error on job id 100: Invalid job id specified\ngtrain-rc=1");
    if (argv[0] == "squeue" && argv[3] == "100")
      return squeue_answers ? std::string("slurm_load_jobs error: Invalid job id specified\ngtrain-rc=1")
                            : std::string("bash: squeue: command not found\ngtrain-rc=127");
    return std::nullopt;
  };
  std::ostringstream cancel;
  EXPECT_THROW(cancel_command(o.run_dir, fake.runner(), cancel), Error) << "squeue could not be asked";
  EXPECT_EQ(read_chain(o.run_dir).stages[0].state, StageState::queued);
  squeue_answers = true;
  cancel.str("");
  EXPECT_EQ(cancel_command(o.run_dir, fake.runner(), cancel), 0) << cancel.str();
  EXPECT_NE(cancel.str().find("stage 1 job 100: already ended without reporting (scancel: error: Kill job error on "
                              "job id 100: Invalid job id specified)"),
            std::string::npos)
      << cancel.str();
  Chain c = read_chain(o.run_dir);
  EXPECT_EQ(c.state, ChainState::cancelled);
  EXPECT_EQ(c.stages[0].state, StageState::ended);
  EXPECT_EQ(c.stages[1].state, StageState::cancelled);
  // A chain whose only queued stage the scheduler no longer lists (squeue prints no state) is over.
  c.stages[1].state = StageState::queued;
  write_chain(o.run_dir, c);
  fake.answer = [](const std::vector<std::string>& argv) -> std::optional<std::string> {
    if (argv[0] == "squeue") return std::string("gtrain-rc=0");
    return std::nullopt;
  };
  EXPECT_EQ(submit_command(o, {}, fake.runner(), out), 0) << out.str();
  EXPECT_EQ(read_chain(o.run_dir).state, ChainState::running);
}

// gtrain status shows the scheduler's whole reason, spaces and all, for each stage.
TEST(SubmitChain, StatusKeepsReasonsWithSpaces) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  o.stages = "2";
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0);
  fake.answer = [](const std::vector<std::string>& argv) -> std::optional<std::string> {
    if (argv[0] == "squeue")
      return std::string("100 PENDING ReqNodeNotAvail, UnavailableNodes:gpu[01-02]\n101 PENDING Dependency\n");
    return std::nullopt;
  };
  std::ostringstream status;
  print_chain_status(o.run_dir, fake.runner(), status);
  EXPECT_EQ(status.str().find("node(s)  running"), std::string::npos) << status.str();
  EXPECT_NE(status.str().find("queued  scheduler: PENDING (ReqNodeNotAvail, UnavailableNodes:gpu[01-02])"),
            std::string::npos)
      << status.str();
  EXPECT_NE(status.str().find("job 101  1 GPU(s) on 1 node(s)  queued  scheduler: PENDING (Dependency)"),
            std::string::npos)
      << status.str();
  // A stage the scheduler runs shows as running (chain.json still says queued until it reports).
  fake.answer = [](const std::vector<std::string>& argv) -> std::optional<std::string> {
    if (argv[0] == "squeue") return std::string("100 RUNNING None\n101 PENDING Dependency\n");
    return std::nullopt;
  };
  std::ostringstream running;
  print_chain_status(o.run_dir, fake.runner(), running);
  EXPECT_NE(running.str().find("job 100  1 GPU(s) on 1 node(s)  running  scheduler: RUNNING\n"), std::string::npos)
      << running.str();
  EXPECT_NE(running.str().find("job 101  1 GPU(s) on 1 node(s)  queued  scheduler: PENDING (Dependency)"),
            std::string::npos)
      << running.str();
  EXPECT_EQ(read_chain(o.run_dir).stages[0].state, StageState::queued);
  // A stage neither squeue nor sacct knows any more ended without reporting: not shown as queued.
  fake.answer = [](const std::vector<std::string>& argv) -> std::optional<std::string> {
    if (argv[0] == "squeue") return std::string("101 PENDING Dependency\n");
    return std::nullopt;
  };
  std::ostringstream gone;
  print_chain_status(o.run_dir, fake.runner(), gone);
  EXPECT_NE(gone.str().find("job 100  1 GPU(s) on 1 node(s)  queued  scheduler: gone (neither queued nor running; its "
                            "script did not report)"),
            std::string::npos)
      << gone.str();
  EXPECT_NE(gone.str().find("job 101  1 GPU(s) on 1 node(s)  queued  scheduler: PENDING (Dependency)"),
            std::string::npos)
      << gone.str();
}

// chain.json keeps names: a scheduler that cannot submit, or a state outside the name tables, is
// refused naming the key.
TEST(SubmitChain, ChainJsonNamesAreChecked) {
  test::TempDir dir;
  auto error_of = [&](const std::string& text) {
    test::write_file(dir.file("chain.json"), text);
    try {
      read_chain(dir.path());
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(error_of("{\"scheduler\": \"lsf\"}"),
            chain_path(dir.path()) + ": key 'scheduler' must be one of slurm, pbs, got 'lsf'");
  EXPECT_EQ(error_of("{\"state\": \"paused\"}"), chain_path(dir.path()) +
                                                     ": key 'state' must be one of running, completed, failed, "
                                                     "stopped, cancelled, got 'paused'");
  EXPECT_NE(error_of("{\"stages\": [{\"state\": \"waiting\"}]}").find("key 'stages[0].state' must be one of planned"),
            std::string::npos);
  test::write_file(dir.file("chain.json"),
                   "{\"scheduler\": \"pbs\", \"state\": \"stopped\", \"stages\": "
                   "[{\"state\": \"refused\"}]}");
  const Chain c = read_chain(dir.path());
  EXPECT_EQ(c.scheduler, SchedulerKind::pbs);
  EXPECT_EQ(c.state, ChainState::stopped);
  EXPECT_EQ(c.stages.at(0).state, StageState::refused);
}
