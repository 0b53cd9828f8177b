// test_resume_notes.cpp: what a start says about the run it continues: refused when every
// checkpoint is invalid, changed settings named with their effect and recorded in the ledger, why
// records were trimmed, why a deadline stopped the stage.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/core/checkpoint_dirs.h"
#include "tests/support/test_util.h"
#include "tests/support/tiny_configs.h"

namespace gtrain {
namespace {

namespace fs = std::filesystem;
using test::run_command;

const std::string kJob = test::tiny_job("mlp", {{"optimizer.learning_rate", "0.003"},
                                                {"train.eval_interval", "0"},
                                                {"train.warmup_steps", "2"},
                                                {"train.threads", "1"},
                                                {"checkpoint.interval", "10"},
                                                {"log.progress", "\"none\""},
                                                {"log.interval", "10"}});

test::CommandResult gtrain_run(const test::TempDir& dir, const std::string& extra = "") {
  return run_command(std::string(GTRAIN_BINARY) + " run " + dir.file("job.toml") + " --run-dir " + dir.file("run") +
                     extra);
}

// Overwrites every data file of a checkpoint with zeros of the same size (the manifest stays).
void zero_data(const fs::path& ckpt) {
  for (const auto& e : fs::directory_iterator(ckpt)) {
    if (e.path().extension() == ".json") continue;
    const auto size = fs::file_size(e.path());
    std::ofstream f(e.path(), std::ios::binary | std::ios::trunc);
    f << std::string(size, '\0');
  }
}

// Every checkpoint damaged: the start is refused (exit 2) with what was found and how to start over,
// and nothing is moved; --no-resume then starts over, moving them aside.
TEST(ResumeNotes, EveryCheckpointInvalidIsRefusedNotRestarted) {
  test::TempDir dir;
  test::write_file(dir.file("job.toml"), kJob);
  ASSERT_EQ(gtrain_run(dir).exit_code, 0);
  const auto ckpts = committed_checkpoint_dirs(dir.file("run/checkpoints"));
  ASSERT_EQ(ckpts.size(), 2u);
  for (const auto& [step, path] : ckpts) zero_data(path);

  auto r = gtrain_run(dir, " --set train.steps=30");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("has saved before (2 checkpoint(s) in " + dir.file("run/checkpoints") +
                          " (step 10, 20), none valid; metrics.jsonl records 2 save(s), the last at step 20)"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("--no-resume starts the run over at step 0"), std::string::npos) << r.output;
  EXPECT_EQ(committed_checkpoint_dirs(dir.file("run/checkpoints")).size(), 2u) << "a refused start moved them";
  EXPECT_EQ(test::last_train_step(dir.file("run/metrics.jsonl")), 20) << "a refused start touched metrics.jsonl";

  // Deleted checkpoints are refused the same way: metrics.jsonl remembers the saves.
  fs::remove_all(dir.file("run/checkpoints"));
  r = gtrain_run(dir);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("metrics.jsonl records 2 save(s), the last at step 20"), std::string::npos) << r.output;

  r = gtrain_run(dir, " --no-resume");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(test::last_train_step(dir.file("run/metrics.jsonl")), 20);
}

// A run that never saved (killed before its first checkpoint, or checkpoints off) loses nothing by
// starting over: no refusal.
TEST(ResumeNotes, RunThatNeverSavedStartsOver) {
  test::TempDir dir;
  test::write_file(dir.file("job.toml"), kJob);
  ASSERT_EQ(gtrain_run(dir, " --set checkpoint.interval=0 --set checkpoint.at_end=false").exit_code, 0);
  const auto r = gtrain_run(dir, " --set checkpoint.interval=0 --set checkpoint.at_end=false");
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

// Hyper-parameters changed at a resume: one line per key that changes the trajectory, with its
// effect; every changed key in the stage's ledger line.
TEST(ResumeNotes, ChangedHyperParametersAreNamedAndRecorded) {
  test::TempDir dir;
  test::write_file(dir.file("job.toml"), kJob);
  ASSERT_EQ(gtrain_run(dir, " --set train.steps=10").exit_code, 0);
  const auto r = gtrain_run(dir,
                            " --set optimizer.learning_rate=0.0001 --set optimizer.weight_decay=0.05 "
                            "--set checkpoint.interval=5");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string ckpt = dir.file("run/checkpoints/step_00000010");
  EXPECT_NE(r.output.find("gtrain: warning: optimizer.learning_rate 0.003 -> 0.0001 since " + ckpt +
                          ": changes the peak learning rate from step 10 on; the learning rate at step 10 goes "),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("gtrain: warning: train.steps 10 -> 20 since " + ckpt + ": changes the run's length"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("gtrain: warning: optimizer.weight_decay 0.01 -> 0.05 since"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("checkpoint.interval"), std::string::npos) << "not a trajectory key: ledger only";
  // The lr the line names: the checkpoint's next lr at peak 0.003 (cosine over 10 steps: its end,
  // the minimum) and this run's at step 10 of 20 with peak 0.0001.
  const auto stages = test::read_jsonl(dir.file("run/stages.jsonl"));
  ASSERT_EQ(stages.size(), 2u);
  EXPECT_FALSE(stages[0].contains("config_changes"));
  const auto& changes = stages[1].at("config_changes");
  EXPECT_EQ(changes.at("optimizer.learning_rate"), nlohmann::json({"0.003", "0.0001"}));
  EXPECT_EQ(changes.at("train.steps"), nlohmann::json({"10", "20"}));
  EXPECT_EQ(changes.at("checkpoint.interval"), nlohmann::json({"10", "5"}));
  EXPECT_EQ(changes.size(), 4u) << changes.dump();

  // The same settings again: nothing changed, nothing said.
  const auto again = gtrain_run(dir,
                                " --set optimizer.learning_rate=0.0001 --set optimizer.weight_decay=0.05 "
                                "--set checkpoint.interval=5 --set train.steps=25");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_EQ(again.output.find("optimizer.learning_rate"), std::string::npos) << again.output;
  EXPECT_EQ(test::count_of(again.output, "gtrain: warning: train.steps 20 -> 25"), 1u) << again.output;
}

// Records after the resumed step are dropped with the reason that applies: --resume of an older
// checkpoint, a newest checkpoint that is invalid.
TEST(ResumeNotes, TrimmedRecordsSayWhy) {
  test::TempDir dir;
  test::write_file(dir.file("job.toml"), kJob);
  ASSERT_EQ(gtrain_run(dir).exit_code, 0);
  const std::string older = dir.file("run/checkpoints/step_00000010");
  auto r = gtrain_run(dir, " --resume " + older);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("after step 10 (up to step 20): --resume " + older +
                          " goes back to step 10: the later steps are trained again from there"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("ran past its last checkpoint"), std::string::npos) << r.output;

  const auto ckpts = committed_checkpoint_dirs(dir.file("run/checkpoints"));
  ASSERT_EQ(ckpts.size(), 2u);
  zero_data(ckpts.back().second);
  r = gtrain_run(dir);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("after step 10 (up to step 20): the newer checkpoint(s) (step 20) are invalid, so the run "
                          "resumes at step 10 and trains the later steps again"),
            std::string::npos)
      << r.output;
}

// A stage stopped by its deadline says what was left and the lead it keeps.
TEST(ResumeNotes, DeadlineStopSaysWhy) {
  test::TempDir dir;
  test::write_file(dir.file("job.toml"), kJob);
  const auto r = gtrain_run(dir, " --set train.steps=100000000 --time-limit 7s");
  ASSERT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("s left before the deadline (--time-limit) < next step "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("+ schedule.min_lead_s 5 s"), std::string::npos) << r.output;
  const auto stages = test::read_jsonl(dir.file("run/stages.jsonl"));
  ASSERT_EQ(stages.size(), 1u);
  EXPECT_NE(stages[0].value("stop_detail", "").find("s left before the deadline (--time-limit)"), std::string::npos)
      << stages[0].dump();
}

}  // namespace
}  // namespace gtrain
