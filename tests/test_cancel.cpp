// test_cancel.cpp: gtrain cancel against a stage that is just starting (its request must not be lost:
// the script keeps it, gtrain run checks the chain, cancel repeats it until the stage confirms), and
// what cancel --now says (label cpu).
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "launcher/chain/chain.h"
#include "launcher/commands/submit_command.h"
#include "launcher/scheduler/batch_script.h"
#include "runtime/core/errors.h"
#include "tests/support/fake_scheduler.h"
#include "tests/support/test_util.h"

namespace fs = std::filesystem;
using namespace gtrain;
using test::Fake;
using test::mlp_submit;

// USR1 (gtrain cancel's) that reaches the stage's script before gtrain run is up: kept, so gtrain run
// does not start (or gets it), chain-step reports 3, and the script acknowledges it for cancel.
TEST(CancelStage, RequestBeforeGtrainRunStartsIsKept) {
  test::TempDir dir;
  BatchStage b;
  b.gtrain = dir.file("gtrain");
  b.config = dir.file("job.toml");
  b.run_dir = dir.file("run");
  b.work_dir = dir.path();
  b.index = 2;
  b.time = "00:10:00";
  fs::create_directories(b.run_dir);
  const std::string log = dir.file("log");
  // A gtrain run that trains for 3 s unless it gets USR1 (then exits 3).
  test::write_file(b.gtrain, "#!/bin/bash\ncase \"$1\" in\nrun) echo run-started >> " + shell_quote(log) +
                                 "; trap 'echo got-usr1 >> " + shell_quote(log) +
                                 "; exit 3' USR1\n  for i in $(seq 30); do sleep 0.1; done; exit 0;;\n"
                                 "chain-step) echo \"step $*\" >> " +
                                 shell_quote(log) + ";;\nesac\nexit 0\n");
  fs::permissions(b.gtrain, fs::perms::owner_all);
  // The script's start-up (module loads, prolog output) takes a moment before it reaches gtrain run.
  std::string text = slurm_script(b);
  const std::string at = "cd \"$WORK_DIR\" || exit 1\n";
  ASSERT_NE(text.find(at), std::string::npos) << text;
  text.replace(text.find(at), at.size(), at + "sleep 1\n");
  test::write_file(dir.file("s.sbatch"), text);
  const auto r = test::run_command("env SLURM_JOB_ID=77 bash " + shell_quote(dir.file("s.sbatch")) +
                                   " & pid=$!; sleep 0.4; kill -USR1 $pid; wait $pid");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const std::string got = test::read_file(log);
  EXPECT_EQ(got.find("run-started"), std::string::npos) << got << r.output;
  EXPECT_NE(got.find("--stage 2 --exit 3 --job 77"), std::string::npos) << got << r.output;
  EXPECT_NE(r.output.find("asked to stop before gtrain run started"), std::string::npos) << r.output;
  EXPECT_EQ(test::read_file(b.run_dir + "/.stop-ack-2"), "77\n");
}

// gtrain run, started as a stage (GTRAIN_SUBMIT_STAGE) of a chain gtrain cancel cancelled, trains
// nothing and exits 3.
TEST(CancelStage, StageOfACancelledChainDoesNotTrain) {
  test::TempDir dir;
  Fake fake;
  SubmitOptions o = mlp_submit(dir);
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0) << out.str();
  std::ostringstream cancel;
  ASSERT_EQ(cancel_command(o.run_dir, fake.runner(), cancel), 0) << cancel.str();
  ASSERT_EQ(read_chain(o.run_dir).state, ChainState::cancelled);
  const std::string cmd = GTRAIN_BINARY + " run " + o.config_path + " --run-dir " + o.run_dir;
  const auto r = test::run_command("env GTRAIN_SUBMIT_STAGE=1 " + cmd);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("stage 1 of a chain gtrain cancel cancelled"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(o.run_dir + "/metrics.jsonl")) << r.output;
  // gtrain run outside a chain's stage trains as usual.
  EXPECT_EQ(test::run_command(cmd).exit_code, 0);
  EXPECT_TRUE(fs::exists(o.run_dir + "/metrics.jsonl"));
}

// The first USR1 reached a job whose script was not up yet (the scheduler drops it): cancel repeats it
// until the script acknowledges (.stop-ack-K with the job id), and says so. chain.json says cancelled
// before the first signal.
TEST(CancelStage, CancelRepeatsTheRequestUntilTheStageConfirms) {
  test::TempDir dir;
  Fake fake;
  SubmitOptions o = mlp_submit(dir);
  o.stages = "2";
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0) << out.str();
  fake.squeue = "100 RUNNING\n101 PENDING\n";
  const std::vector<std::string> usr1 = {"scancel", "--batch", "--signal=USR1", "100"};
  std::string state_at_first_signal;
  fake.on_call = [&](const std::vector<std::string>& argv) {
    if (argv != usr1) return;
    if (state_at_first_signal.empty()) state_at_first_signal = state_name(read_chain(o.run_dir).state);
    if (fake.count(usr1) == 3) test::write_file(o.run_dir + "/.stop-ack-1", "100\n");  // the third one arrives
  };
  std::ostringstream cancel;
  EXPECT_EQ(cancel_command(o.run_dir, fake.runner(), cancel, false, CancelRetry{10, 0.05}), 0) << cancel.str();
  EXPECT_EQ(fake.count(usr1), 3) << cancel.str();
  EXPECT_EQ(fake.count({"scancel", "101"}), 1);
  EXPECT_EQ(state_at_first_signal, "cancelled");
  EXPECT_NE(cancel.str().find("stage 1 job 100: stopping: its script acknowledged the request after 3 request(s)"),
            std::string::npos)
      << cancel.str();
  // A job that ends without acknowledging (it was gone) ends the repeats too.
  fs::remove(o.run_dir + "/.stop-ack-1");
  Chain c = read_chain(o.run_dir);
  c.state = ChainState::running;
  write_chain(o.run_dir, c);
  fake.calls.clear();
  fake.on_call = [&](const std::vector<std::string>& argv) {
    if (argv == usr1 && fake.count(usr1) == 2) fake.squeue = "";
  };
  cancel.str("");
  EXPECT_EQ(cancel_command(o.run_dir, fake.runner(), cancel, false, CancelRetry{10, 0.05}), 0) << cancel.str();
  EXPECT_EQ(fake.count(usr1), 2) << cancel.str();
  EXPECT_NE(cancel.str().find("stopping: its job has ended after 2 request(s)"), std::string::npos) << cancel.str();
}

// cancel --now says what the scheduler does to a running stage (TERM, then KILL after its grace
// time, the ranks saving if they can), not that the save is skipped: the stage may well save.
TEST(CancelStage, CancelNowSaysWhatHappens) {
  test::TempDir dir;
  Fake fake;
  SubmitOptions o = mlp_submit(dir);
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0) << out.str();
  fake.squeue = "100 RUNNING\n";
  std::ostringstream cancel;
  EXPECT_EQ(cancel_command(o.run_dir, fake.runner(), cancel, /*now=*/true), 0) << cancel.str();
  EXPECT_EQ(fake.count({"scancel", "100"}), 1);
  EXPECT_NE(cancel.str().find("stage 1 job 100: running: cancelled (scancel): the scheduler sends it TERM, then "
                              "KILL after KillWait (often 30 s); the ranks save if they can before that"),
            std::string::npos)
      << cancel.str();
  EXPECT_EQ(cancel.str().find("without"), std::string::npos) << cancel.str();
  // It saved (exit 3): recorded as resumable, as it is.
  chain_step(o.run_dir, 1, 3, "100", fake.runner());
  EXPECT_EQ(read_chain(o.run_dir).stages[0].state, StageState::resumable);
}
