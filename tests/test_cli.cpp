// test_cli.cpp: the gtrain binary end to end: exit codes, run directory, metrics.jsonl, errors.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "launcher/commands/run_command.h"
#include "launcher/commands/stage_commands.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/core/checkpoint_dirs.h"
#include "runtime/core/errors.h"
#include "tests/support/cli_util.h"
#include "tests/support/test_util.h"

namespace gtrain {
namespace {

namespace fs = std::filesystem;
using test::run_command;

TEST(Cli, RunWritesRunDirectoryAndMetrics) {
  test::TempDir dir;
  test::write_file(dir.file("tiny.toml"), kTiny);
  auto r = run_command("cd " + dir.path() + " && " + GTRAIN_BINARY + " run tiny.toml");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string run = dir.file("runs/tiny");  // <log.root>/<config stem>
  ASSERT_TRUE(fs::exists(run + "/config.toml")) << r.output;
  ASSERT_TRUE(fs::exists(run + "/plan.json"));
  EXPECT_NE(test::read_file(run + "/config.toml").find("global_batch = 32"), std::string::npos);
  auto recs = test::read_jsonl(run + "/metrics.jsonl");
  std::vector<int64_t> steps;
  int evals = 0, finals = 0;
  for (const auto& j : recs) {
    const std::string kind = j.at("kind");
    if (kind == "train") {
      steps.push_back(j.at("step"));
      EXPECT_TRUE(j.at("loss").is_number());
      EXPECT_TRUE(j.contains("lr") && j.contains("grad_norm") && j.contains("samples_per_s") &&
                  j.contains("data_wait_s") && j.contains("elapsed_s"));
    } else if (kind == "eval") {
      ++evals;
      EXPECT_GE(j.at("accuracy").get<double>(), 0.0);
    } else if (kind == "final") {
      ++finals;
      EXPECT_EQ(j.at("step"), 20);
    }
  }
  ASSERT_EQ(steps.size(), 20u);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(steps[i], i + 1);
  EXPECT_EQ(evals, 2);  // step 10 and the end
  EXPECT_EQ(finals, 1);
  // Plain progress lines every 5 steps (not a TTY), plus the summary.
  EXPECT_NE(r.output.find("step 5/20"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("step 20/20"), std::string::npos);
  EXPECT_NE(r.output.find("gtrain: done 20 steps"), std::string::npos);
  EXPECT_TRUE(fs::exists(run + "/checkpoints/step_00000020/manifest.json"));
  EXPECT_TRUE(fs::exists(run + "/checkpoints/step_00000020/shard_0.bin"));
  // The stage ledger has one completed stage, and status reads it back.
  auto stages = test::read_jsonl(run + "/stages.jsonl");
  ASSERT_EQ(stages.size(), 1u);
  EXPECT_EQ(stages[0].at("exit"), "completed");
  EXPECT_EQ(stages[0].at("step_to"), 20);
  auto st = run_command(GTRAIN_BINARY + " status " + run + " --json");
  ASSERT_EQ(st.exit_code, 0) << st.output;
  auto sj = nlohmann::json::parse(st.output);
  EXPECT_EQ(sj.at("step"), 20);
  EXPECT_EQ(sj.at("complete"), true);
  EXPECT_GT(sj.at("goodput").get<double>(), 0.0);
  auto v = run_command(GTRAIN_BINARY + " ckpt verify " + run);
  EXPECT_EQ(v.exit_code, 0) << v.output;
  EXPECT_NE(v.output.find("OK"), std::string::npos);
  // A second run on the same directory resumes from step 20: nothing left to train.
  auto again = run_command("cd " + dir.path() + " && " + GTRAIN_BINARY + " run tiny.toml");
  EXPECT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("resumed from"), std::string::npos) << again.output;
  EXPECT_NE(again.output.find("is complete (step 20 of 20); nothing to do"), std::string::npos) << again.output;
  // ... and leaves the finished run's records as they were: one final record, one completed stage.
  int finals_after = 0;
  for (const auto& j : test::read_jsonl(run + "/metrics.jsonl")) finals_after += j.at("kind") == "final";
  EXPECT_EQ(finals_after, 1);
  EXPECT_EQ(test::read_jsonl(run + "/stages.jsonl").size(), 1u);
}

// A step with both an interval checkpoint and an interval evaluation saves first (an error while
// evaluating loses no step), and a stage that then stops there does not save that step again.
TEST(Cli, IntervalCheckpointComesBeforeIntervalEvaluation) {
  test::TempDir dir;
  test::write_file(dir.file("tiny.toml"), kTiny);
  auto order = [&](const std::string& run) {
    std::vector<std::string> out;  // "checkpoint@10", "eval@10", ...
    for (const auto& j : test::read_jsonl(run + "/metrics.jsonl")) {
      const std::string kind = j.value("kind", "");
      if (kind == "checkpoint" || kind == "eval" || kind == "eval_stopped" || kind == "stage_end")
        out.push_back(kind + "@" + std::to_string(j.value("step", -1)));
    }
    return out;
  };
  auto r = gtrain_run(dir.file("tiny.toml"), dir.file("run"), " --set checkpoint.interval=10");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(order(dir.file("run")), (std::vector<std::string>{"checkpoint@10", "eval@10", "checkpoint@20", "eval@20"}));
  // A deadline within the save lead (at least 7 s) after step 1 ends the stage there, after step 1's save,
  // during its evaluation (a deadline is acted on between an evaluation's rounds of batches).
  auto stop = gtrain_run(dir.file("tiny.toml"), dir.file("run2"),
                         " --set checkpoint.interval=1 --set train.eval_interval=1 --time-limit 5s");
  ASSERT_EQ(stop.exit_code, 3) << stop.output;
  EXPECT_EQ(order(dir.file("run2")), (std::vector<std::string>{"checkpoint@1", "eval_stopped@1", "stage_end@1"}));
  EXPECT_TRUE(fs::exists(dir.file("run2/checkpoints/step_00000001/manifest.json")));
}

// A run started outside every quota window has no window deadline, and says so.
TEST(Cli, RunOutsideEveryQuotaWindowSaysSo) {
  test::TempDir dir;
  const std::time_t now = std::time(nullptr);
  std::tm lt{};
  localtime_r(&now, &lt);
  char hours[32];
  std::snprintf(hours, sizeof(hours), "%02d:00-%02d:30", (lt.tm_hour + 12) % 24, (lt.tm_hour + 12) % 24);
  test::write_file(dir.file("tiny.toml"),
                   kTiny + "[[schedule.window]]\ndays = \"mon-sun\"\nhours = \"" + hours + "\"\nmax_gpus = 4\n");
  auto r = gtrain_run(dir.file("tiny.toml"), dir.file("run"), " --set train.steps=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("gtrain: warning: started outside every [[schedule.window]]"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("stage deadline"), std::string::npos) << r.output;
}

// Resuming with another optimizer is refused by name; a changed seed or precision is named (as a
// warning when the resume check passes, in the error when it does not).
TEST(Cli, ResumeNamesChangedOptimizerSeedAndPrecision) {
  test::TempDir dir;
  test::write_file(dir.file("tiny.toml"), kTiny);
  const std::string base = GTRAIN_BINARY + " run " + dir.file("tiny.toml") + " --run-dir " + dir.file("run");
  auto r = run_command(base + " --set train.steps=4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string config = test::read_file(dir.file("run/config.toml")),
                    plan = test::read_file(dir.file("run/plan.json"));
  r = run_command(base + " --set train.steps=8 --set optimizer.name=sgd");
  EXPECT_EQ(r.exit_code, 2) << r.output;  // the configuration is what to fix
  EXPECT_NE(r.output.find("was written with optimizer.name = adamw, this run has sgd"), std::string::npos) << r.output;
  // The refused start leaves the run's resolved config and plan as they were.
  EXPECT_EQ(test::read_file(dir.file("run/config.toml")), config);
  EXPECT_EQ(test::read_file(dir.file("run/plan.json")), plan);
  r = run_command(base + " --set train.steps=8 --set train.seed=99 --set precision.dtype=bf16");
  EXPECT_NE(r.output.find("train.seed 1234 -> 99, precision.dtype fp32 -> bf16"), std::string::npos) << r.output;
  EXPECT_EQ(r.exit_code, r.output.find("warning: resumed with") != std::string::npos ? 0 : 2) << r.output;
}

// A stage that fails still goes in the ledger, saying how, so gtrain status can show it.
TEST(Cli, FailedStageIsRecordedInTheLedger) {
  test::TempDir dir;
  test::write_file(dir.file("tiny.toml"), kTiny);
  // An absurd learning rate: the loss is no longer finite after a step or two, and training stops.
  auto r = run_command(GTRAIN_BINARY + " run " + dir.file("tiny.toml") + " --run-dir " + dir.file("run") +
                       " --set optimizer.learning_rate=1e30 --set train.warmup_steps=0 --set train.grad_clip=0");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  auto stages = test::read_jsonl(dir.file("run/stages.jsonl"));
  ASSERT_EQ(stages.size(), 1u) << r.output;
  const std::string exit = stages[0].at("exit");
  EXPECT_EQ(exit.rfind("failed: training diverged: loss is ", 0), 0u) << exit;
  EXPECT_EQ(exit.find("-nan"), std::string::npos) << exit;  // "nan", whatever its sign bit
  const int64_t at = stages[0].at("step_to");
  EXPECT_NE(exit.find(" at step " + std::to_string(at)), std::string::npos) << exit;
  EXPECT_GE(at, 1);
  EXPECT_LT(at, 20);
  // The same weights and data diverge again: the stage ends without restarting (errors.h).
  EXPECT_FALSE(std::filesystem::exists(dir.file("run/restarts.jsonl"))) << r.output;
  EXPECT_EQ(r.output.find("restarting the ranks"), std::string::npos) << r.output;
}

TEST(Cli, SetOverridesAndRunDirFlag) {
  test::TempDir dir;
  test::write_file(dir.file("tiny.toml"), kTiny);
  auto r = run_command(GTRAIN_BINARY + " run " + dir.file("tiny.toml") +
                       " --set train.steps=7 --set log.progress=none --run-dir " + dir.file("out"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  int train = 0;
  for (const auto& j : test::read_jsonl(dir.file("out/metrics.jsonl"))) train += j.at("kind") == "train";
  EXPECT_EQ(train, 7);
  EXPECT_EQ(r.output.find("step 5/7"), std::string::npos) << "progress = none prints no step lines";
}

TEST(Cli, BadInputExitsTwoWithOneLine) {
  test::TempDir dir;
  test::write_file(dir.file("bad.toml"), "[train]\nsteps = 5\n[optimizer]\nlerning_rate = 0.1\n");
  auto r = run_command(GTRAIN_BINARY + " run " + dir.file("bad.toml"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output, "gtrain: config error: " + dir.file("bad.toml") +
                          ":4:1: unknown key 'lerning_rate' in [optimizer]; did you mean 'learning_rate'?\n");

  test::write_file(
      dir.file("nodata.toml"),
      "[train]\nsteps = 5\n[data]\nkind = \"tokens\"\npath = \"/no/such/tokens.bin\"\n[model]\nname = \"gpt\"\n");
  r = run_command(GTRAIN_BINARY + " run " + dir.file("nodata.toml"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("/no/such/tokens.bin"), std::string::npos) << r.output;
  EXPECT_EQ(test::lines(r.output).size(), 1u) << r.output;

  r = run_command(GTRAIN_BINARY + " run " + dir.file("missing.toml"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("missing.toml: cannot open config file"), std::string::npos);

  r = run_command(GTRAIN_BINARY + " run " + dir.file("bad.toml") + " --bogus-flag");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--bogus-flag"), std::string::npos) << r.output;

  test::write_file(dir.file("model.toml"),
                   "[train]\nsteps = 5\n[model]\nname = \"resnet\"\n[data]\nkind = \"synthetic\"\n");
  r = run_command(GTRAIN_BINARY + " run " + dir.file("model.toml"));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("unknown model 'resnet'"), std::string::npos) << r.output;

  // Each of these names what is wrong in one line, exit 2.
  test::write_file(dir.file("ok.toml"),
                   "[train]\nsteps = 2\nglobal_batch = 8\n[model]\nname = \"mlp\"\n[data]\n"
                   "kind = \"synthetic\"\nsynthetic_samples = 64\n");
  std::vector<std::pair<std::string, std::string>> cases = {
      {"bogus",
       "gtrain: usage error: gtrain: unknown command 'bogus'; expected one of run, config, probe, plan, "
       "models, sample, distill, sweep, status, report, runs, submit, cancel, cluster, ckpt, tokenize, prepare"},
      {"ckpt bogus",
       "gtrain: usage error: gtrain ckpt: unknown command 'bogus'; expected one of inspect, verify, export"},
      {"run " + dir.file("ok.toml") + " --ranks 0",
       "gtrain: config error: --ranks: expected a whole number of ranks from 1 to 999999, got '0'"
       "; hint: see gtrain --help"},
      {"run " + dir.file("ok.toml") + " --ranks abc",
       "gtrain: config error: --ranks: expected a whole number of ranks from 1 to 999999, got 'abc'"
       "; hint: see gtrain --help"},
      {"run " + dir.path(), "gtrain: config error: " + dir.path() + ": is a directory, expected a TOML config file"},
      {"run " + dir.file("ok.toml") + " --time-limit 1:75:00",
       "gtrain: config error: --time-limit: expected a duration like 90s, 15m, 2h, 1h30m, HH:MM:SS or D-HH[:MM[:SS]] "
       "above 0 and at most 366 days, got '1:75:00'"
       "; hint: see gtrain --help"},
      {"run " + dir.file("ok.toml") + " --time-limit ''",
       "gtrain: config error: --time-limit: expected a duration like 90s, 15m, 2h, 1h30m, HH:MM:SS or D-HH[:MM[:SS]] "
       "above 0 and at most 366 days, got ''"
       "; hint: see gtrain --help"},
      {"run " + dir.file("ok.toml") + " --resume " + dir.path() + " --no-resume",
       "gtrain: config error: --resume excludes --no-resume; hint: see gtrain --help"},
      {"run " + dir.file("ok.toml") + " --set train.threads=5000",
       "gtrain: config error: --set train.threads=5000: train.threads: expected an integer in [0, 1024], got 5000 "
       "(integer)"},
  };
  // Explicit pipeline layouts: every failing factor in one message; micro-batch size set two ways.
  test::write_file(dir.file("pp.toml"),
                   "[train]\nsteps = 2\nglobal_batch = 8\n[model]\nname = \"gpt\"\nn_layer = 1\nn_head = 2\n"
                   "n_embd = 16\nseq_len = 8\n[data]\nkind = \"synthetic\"\n[parallel]\nmode = \"explicit\"\npp = 2\n");
  cases.push_back(
      {"run " + dir.file("pp.toml") + " --ranks 2 --set parallel.pp_microbatches=9",
       "gtrain: config error: parallel (explicit): dp=0 (auto) tp=1 pp=2 zero=0 micro_batch=0 on 2 ranks (2 "
       "per node), 2 heads, 1 blocks, global_batch 8: pp = 2 must not exceed the 1 blocks (a stage needs one); "
       "parallel.pp_microbatches = 9 exceeds the 8 samples of the smallest replica (global batch 8 over dp 1: 8 "
       "samples per replica): a micro-batch would be empty; hint: set parallel.pp_microbatches to at most 8"});
  cases.push_back({"run " + dir.file("pp.toml") + " --set parallel.pp_microbatches=2 --set parallel.micro_batch=2",
                   "gtrain: config error: --set parallel.pp_microbatches=2: [parallel]: set parallel.micro_batch or "
                   "parallel.pp_microbatches, not both (micro-batches per replica decide the micro-batch size, and "
                   "the other way round)"});
  for (const auto& [args, want] : cases) {
    r = run_command(GTRAIN_BINARY + " " + args);
    EXPECT_EQ(r.exit_code, 2) << args;
    EXPECT_EQ(r.output, want + "\n") << args;
  }
  // A global batch the training split cannot fill once.
  r = run_command(GTRAIN_BINARY + " run " + dir.file("ok.toml") + " --run-dir " + dir.file("gb") +
                  " --set train.global_batch=100");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("train.global_batch = 100 exceeds the "), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir.file("gb/metrics.jsonl"))) << r.output;  // nothing trained
  EXPECT_TRUE(committed_checkpoint_dirs(dir.file("gb/checkpoints")).empty()) << r.output;
}

TEST(Cli, EnvironmentOverridesFileButNotSet) {
  test::TempDir dir;
  test::write_file(dir.file("tiny.toml"), kTiny);
  auto r = run_command("GTRAIN_TRAIN_STEPS=4 " + GTRAIN_BINARY + " config show " + dir.file("tiny.toml"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("steps = 4\n"), std::string::npos);
  r = run_command("GTRAIN_TRAIN_STEPS=4 " + GTRAIN_BINARY + " config show " + dir.file("tiny.toml") +
                  " --set train.steps=9");
  EXPECT_NE(r.output.find("steps = 9\n"), std::string::npos);
}

TEST(Cli, ReferenceMatchesCommittedFile) {
  auto r = run_command(GTRAIN_BINARY + " config reference");
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output, test::read_file(GTRAIN_SOURCE_DIR + "/configs/reference.toml"))
      << "regenerate with: build/gtrain config reference > configs/reference.toml";
}

// A user's plugin model, named in the config, trains end to end on IDX files.
TEST(Cli, PluginModelTrainsFromConfig) {
  test::TempDir dir;
  auto be32 = [](uint32_t v) {
    std::string s(4, '\0');
    s[0] = char(v >> 24), s[1] = char(v >> 16), s[2] = char(v >> 8), s[3] = char(v);
    return s;
  };
  // Two classes: bright upper half vs bright lower half.
  std::string img = be32(0x803) + be32(64) + be32(8) + be32(8), lab = be32(0x801) + be32(64);
  for (int i = 0; i < 64; ++i) {
    for (int p = 0; p < 64; ++p) img += char(((p < 32) == (i % 2 == 0)) ? 250 : 5);
    lab += char(i % 2);
  }
  for (const char* split : {"train", "t10k"}) {
    test::write_file(dir.file(std::string(split) + "-images-idx3-ubyte"), img);
    test::write_file(dir.file(std::string(split) + "-labels-idx1-ubyte"), lab);
  }
  test::write_file(dir.file("plugin.toml"), "[model]\nname = \"tiny_resnet\"\nplugin = \"" + GTRAIN_PLUGIN +
                                                "\"\nchannels = [4]\n"
                                                "[data]\nkind = \"idx\"\npath = \"" +
                                                dir.path() +
                                                "\"\n[train]\nglobal_batch = 16\nsteps = 40\n"
                                                "[optimizer]\nlearning_rate = 0.01\n[log]\nprogress = \"none\"\n");
  auto r = run_command(GTRAIN_BINARY + " run " + dir.file("plugin.toml") + " --run-dir " + dir.file("run"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto recs = test::read_jsonl(dir.file("run/metrics.jsonl"));
  ASSERT_FALSE(recs.empty());
  EXPECT_EQ(recs.back().at("kind"), "final");
  EXPECT_GT(recs.back().at("eval_accuracy").get<double>(), 0.9) << r.output;
  r = run_command(GTRAIN_BINARY + " models --plugin " + GTRAIN_PLUGIN);
  EXPECT_NE(r.output.find("tiny_resnet"), std::string::npos);
  // A bare file name means the file in the current directory, as other config paths do.
  fs::copy_file(GTRAIN_PLUGIN, dir.file("libmine.so"));
  r = run_command("cd " + dir.path() + " && " + GTRAIN_BINARY + " models --plugin libmine.so");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tiny_resnet"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace gtrain

// `gtrain` itself does not load LibTorch (it answers in milliseconds and launches the ranks);
// gtrain-worker next to it does the LibTorch work, which `gtrain` hands it (test_torch_free_cli.cpp
// has every command).
TEST(Cli, LauncherIsTorchFreeAndHandsCommandsToTheWorker) {
  const auto ldd = gtrain::test::run_command(std::string("ldd ") + GTRAIN_BINARY);
  ASSERT_EQ(ldd.exit_code, 0) << ldd.output;
  EXPECT_EQ(ldd.output.find("libtorch"), std::string::npos) << ldd.output;
  EXPECT_NE(ldd.output.find("libgtrain_core"), std::string::npos) << ldd.output;
  const std::string no_worker = "GTRAIN_WORKER=/nonexistent/gtrain-worker " + std::string(GTRAIN_BINARY);
  const auto models = gtrain::test::run_command(no_worker + " models");  // answered without the worker
  EXPECT_EQ(models.exit_code, 0) << models.output;
  EXPECT_NE(models.output.find("gpt"), std::string::npos) << models.output;
  const auto missing = gtrain::test::run_command(no_worker + " models --plugin " + GTRAIN_PLUGIN);
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.output.find("cannot start /nonexistent/gtrain-worker"), std::string::npos) << missing.output;
}

namespace gtrain {
namespace {

// checkpoint.interval = 0 on a long stage: the start-up line says what a failure would lose and the
// interval that saves about every 30 minutes; nothing is said for a short stage or with an interval.
TEST(Cli, UnsavedWorkIsSaidAtStartForLongStages) {
  JobConfig cfg;
  Plan plan;
  plan.est_step_seconds = 2.0;
  const std::string note = unsaved_work_note(cfg, plan, 10000);  // 20000 s of training at risk
  EXPECT_NE(note.find("checkpoint.interval = 0: nothing is saved before the end"), std::string::npos) << note;
  EXPECT_NE(note.find("5.6 h of training at the planned 2 s a step"), std::string::npos) << note;
  EXPECT_NE(note.find("checkpoint.interval = 900 saves about every 30 min"), std::string::npos) << note;
  EXPECT_EQ(unsaved_work_note(cfg, plan, 100), "");  // 200 s: the tour's stages say nothing
  cfg.checkpoint.interval = 500;
  EXPECT_EQ(unsaved_work_note(cfg, plan, 10000), "");
}

// train.fused_loss = "on" trains gpt along the same trajectory as the plain output layer.
TEST(Cli, FusedLossFollowsThePlainTrajectory) {
  test::TempDir dir;
  test::write_file(dir.file("g.toml"),
                   "[model]\nname = \"gpt\"\nn_layer = 2\nn_head = 2\nn_embd = 32\nseq_len = 16\n"
                   "vocab = 64\n[data]\nkind = \"synthetic\"\n[train]\nglobal_batch = 8\nsteps = 15\n"
                   "threads = 1\n[checkpoint]\nat_end = false\n[log]\nprogress = \"none\"\n");
  std::vector<double> losses[2];
  int k = 0;
  for (const char* mode : {"off", "on"}) {
    const std::string run = dir.file(std::string("run-") + mode);
    auto r = gtrain_run(dir.file("g.toml"), run, std::string(" --set train.fused_loss=") + mode);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (const auto& j : test::read_jsonl(run + "/metrics.jsonl")) {
      if (j.value("kind", "") == "train") losses[k].push_back(j.at("loss").get<double>());
    }
    ++k;
  }
  ASSERT_EQ(losses[0].size(), 15u);
  ASSERT_EQ(losses[1].size(), 15u);
  for (size_t i = 0; i < losses[0].size(); ++i) {
    EXPECT_NEAR(losses[1][i], losses[0][i], 1e-5 * std::abs(losses[0][i])) << "step " << i + 1;
  }
}

// Shards added to a run's data.path glob: the resume goes on (the probe batch is taken by its saved
// window indices) and says the sample order changed; ids that change model.vocab = 0's vocabulary
// are refused by name (exit 2). The final checkpoint is written before the final evaluation.
TEST(Cli, ResumeAfterShardsAreAdded) {
  test::TempDir dir;
  auto shard = [&](const std::string& name, int n, int mod, int extra_id) {
    std::string bytes;
    for (int i = 0; i < n; ++i) {
      const uint16_t t =
          i == n / 2 && extra_id > 0 ? static_cast<uint16_t>(extra_id) : static_cast<uint16_t>((i * 7) % mod);
      bytes.append(reinterpret_cast<const char*>(&t), 2);
    }
    test::write_file(dir.file(name), bytes);
  };
  shard("s_000.bin", 1000, 50, 0);
  shard("s_001.bin", 1000, 50, 0);
  test::write_file(dir.file("g.toml"),
                   "[model]\nname = \"gpt\"\nn_layer = 1\nn_head = 2\nn_embd = 16\nseq_len = 16\n"
                   "[data]\nkind = \"tokens\"\npath = \"" +
                       dir.file("s_*.bin") +
                       "\"\n[train]\nglobal_batch = 4\nsteps = 4\nthreads = 1\n[log]\nprogress = \"plain\"\n");
  const std::string run = dir.file("run");
  auto first = gtrain_run(dir.file("g.toml"), run);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  std::vector<std::string> kinds;
  for (const auto& j : test::read_jsonl(run + "/metrics.jsonl")) kinds.push_back(j.value("kind", ""));
  const auto ck = std::find(kinds.begin(), kinds.end(), "checkpoint"),
             ev = std::find(kinds.begin(), kinds.end(), "eval");
  ASSERT_NE(ck, kinds.end());
  ASSERT_NE(ev, kinds.end());
  EXPECT_LT(ck - kinds.begin(), ev - kinds.begin()) << "the final evaluation ran before the final save";
  shard("s_002.bin", 1000, 50, 0);
  auto more = gtrain_run(dir.file("g.toml"), run, " --set train.steps=8");
  ASSERT_EQ(more.exit_code, 0) << more.output;
  EXPECT_NE(
      more.output.find(
          "warning: resumed with the training data (tokens 1768 -> 2652 samples; s_002.bin added; data.eval_fraction's "
          "held-out tail "
          "moved with it, data.eval_path would keep it fixed) changed since"),
      std::string::npos)
      << more.output;
  EXPECT_NE(more.output.find("done step 8 (4 this stage)"), std::string::npos) << more.output;
  // The start-up line counts the files and tokens each split found (the tail of 3000 held out).
  EXPECT_NE(more.output.find("data tokens (3 files, 2700 tokens: 2652 train samples; eval 1 file, 300 tokens)"),
            std::string::npos)
      << more.output;
  // A final evaluation that failed after the final save (its records missing) runs at the next
  // start instead of "complete; nothing to do".
  auto count_final = [&] {
    int n = 0;
    for (const auto& j : test::read_jsonl(run + "/metrics.jsonl")) n += j.value("kind", "") == "final" ? 1 : 0;
    return n;
  };
  {
    std::string kept;
    for (const auto& line : test::lines(test::read_file(run + "/metrics.jsonl")))
      if (line.find("\"final\"") == std::string::npos) kept += line + "\n";
    test::write_file(run + "/metrics.jsonl", kept);
  }
  ASSERT_EQ(count_final(), 0);
  auto redo = gtrain_run(dir.file("g.toml"), run, " --set train.steps=8");
  ASSERT_EQ(redo.exit_code, 0) << redo.output;
  EXPECT_NE(redo.output.find("eval loss"), std::string::npos) << redo.output;
  EXPECT_EQ(count_final(), 1);
  auto again = gtrain_run(dir.file("g.toml"), run, " --set train.steps=8");
  EXPECT_NE(again.output.find("is complete (step 8 of 8); nothing to do"), std::string::npos) << again.output;
  EXPECT_EQ(count_final(), 1);
  // A complete run started on grown data trains nothing: no drift warning, only "complete".
  shard("s_003.bin", 1000, 50, 0);
  auto grown = gtrain_run(dir.file("g.toml"), run, " --set train.steps=8");
  EXPECT_EQ(grown.exit_code, 0) << grown.output;
  EXPECT_NE(grown.output.find("is complete (step 8 of 8); nothing to do"), std::string::npos) << grown.output;
  EXPECT_EQ(grown.output.find("resumed with"), std::string::npos) << grown.output;
  shard("s_003.bin", 1000, 50, 59);  // id 59: model.vocab = 0 now gives 60 ids, the checkpoint has 50
  auto wider = gtrain_run(dir.file("g.toml"), run, " --set train.steps=12");
  EXPECT_EQ(wider.exit_code, 2) << wider.output;
  EXPECT_NE(wider.output.find("was written for a different model (model.vocab 50 -> 60 (model.vocab = 0: the data's "
                              "largest id + 1))"),
            std::string::npos)
      << wider.output;
  // A refused --resume of an older checkpoint leaves the newer ones and their records in place.
  const size_t records = test::read_jsonl(run + "/metrics.jsonl").size();
  auto older = gtrain_run(dir.file("g.toml"), run, " --resume " + run + "/checkpoints/step_00000004");
  EXPECT_EQ(older.exit_code, 2) << older.output;
  EXPECT_EQ(older.output.find("moved"), std::string::npos) << older.output;
  EXPECT_TRUE(fs::exists(run + "/checkpoints/step_00000008"));
  EXPECT_EQ(test::read_jsonl(run + "/metrics.jsonl").size(), records);
  // A file replaced by other tokens of the same length is named: a warning where the probe windows
  // lie elsewhere, a refusal (exit 2) where they lie in it; never "report it" (exit 1).
  fs::remove(dir.file("s_003.bin"));
  shard("s_001.bin", 1000, 47, 0);
  auto replaced = gtrain_run(dir.file("g.toml"), run, " --set train.steps=12");
  EXPECT_TRUE(replaced.exit_code == 0 || replaced.exit_code == 2) << replaced.output;
  EXPECT_NE(replaced.output.find("the training data (tokens 2652 samples; s_001.bin changed"), std::string::npos)
      << replaced.output;
}

// A whole-split evaluation of token data can take longer than training: over 1000 batches is named
// at start, with the key that caps it; a capped one is not.
TEST(Cli, LongWholeSplitEvaluationIsNamed) {
  test::TempDir dir;
  std::string text;
  for (int i = 0; i < 40000; ++i) text += static_cast<char>('a' + (i * 7) % 26);
  test::write_file(dir.file("t.txt"), text);
  test::write_file(dir.file("g.toml"),
                   "[model]\nname = \"gpt\"\nn_layer = 1\nn_head = 1\nn_embd = 8\nseq_len = 8\n"
                   "[data]\nkind = \"text_bytes\"\npath = \"" +
                       dir.file("t.txt") +
                       "\"\neval_fraction = 0.5\n[train]\nglobal_batch = 2\nsteps = 1\nthreads = 1\n"
                       "[checkpoint]\nat_end = false\n[log]\nprogress = \"plain\"\n");
  // 20000 held-out bytes: 2499 windows of 8 + 1, 1250 batches of 2.
  auto r = gtrain_run(dir.file("g.toml"), dir.file("a"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("gtrain: warning: train.eval_batches = 0 evaluates the whole held-out split, 1250 batches "
                          "of 2 at each evaluation; set train.eval_batches to cap it"),
            std::string::npos)
      << r.output;
  auto capped = gtrain_run(dir.file("g.toml"), dir.file("b"), " --set train.eval_batches=20");
  ASSERT_EQ(capped.exit_code, 0) << capped.output;
  EXPECT_EQ(capped.output.find("evaluates the whole held-out split"), std::string::npos) << capped.output;
}

// log.profile_start: the profiled steps' summary names the phases and the operators in them, and the
// trajectory is that of an unprofiled run.
TEST(Cli, ProfileWritesWhereTheStepTimeGoes) {
  test::TempDir dir;
  test::write_file(dir.file("g.toml"),
                   "[model]\nname = \"gpt\"\nn_layer = 2\nn_head = 2\nn_embd = 32\nseq_len = 16\n"
                   "vocab = 64\n[data]\nkind = \"synthetic\"\n[train]\nglobal_batch = 8\nsteps = 6\n"
                   "threads = 1\n[checkpoint]\nat_end = false\n[log]\nprogress = \"plain\"\n");
  const std::string run = dir.file("run");
  auto r = gtrain_run(dir.file("g.toml"), run, " --set log.profile_start=3 --set log.profile_steps=2");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("profile of the steps written: " + run + "/profile/profile-rank0.txt"), std::string::npos)
      << r.output;
  const auto j = nlohmann::json::parse(test::read_file(run + "/profile/profile-rank0.json"));
  EXPECT_EQ(j.at("first_step").get<int>(), 3);
  EXPECT_EQ(j.at("last_step").get<int>(), 4);
  const double wall = j.at("wall_us").get<double>();
  EXPECT_GT(wall, 0.0);
  std::map<std::string, std::pair<int64_t, double>> host;
  for (const auto& row : j.at("host")) host[row.at("name")] = {row.at("calls"), row.at("total_us")};
  for (const char* phase : {"gtrain::forward", "gtrain::backward", "gtrain::grad_sync", "gtrain::optimizer"}) {
    ASSERT_TRUE(host.count(phase)) << phase << " missing from " << j.dump();
    EXPECT_EQ(host[phase].first, 2) << phase << ": one per profiled step (one micro-batch each)";
    EXPECT_LE(host[phase].second, wall) << phase;
  }
  // Every phase but grad_sync does measurable work. On one rank with one micro-batch the backward's
  // hooks already wrote the buckets, so grad_sync only finds its collectives done: often under the
  // profiler's microsecond (LibTorch 1.13), and always less than the backward that did the work.
  for (const char* phase : {"gtrain::forward", "gtrain::backward", "gtrain::optimizer"}) {
    EXPECT_GT(host[phase].second, 0.0) << phase;
  }
  EXPECT_LT(host["gtrain::grad_sync"].second, host["gtrain::backward"].second);
  // The products inside forward and backward are recorded, and take less time than the phases.
  ASSERT_TRUE(host.count("aten::mm") || host.count("aten::addmm") || host.count("aten::bmm")) << j.dump();
  EXPECT_LT(host["aten::addmm"].second + host["aten::mm"].second,
            host["gtrain::forward"].second + host["gtrain::backward"].second);
  EXPECT_TRUE(j.at("gpu").empty());  // a CPU run has no kernels
  // Tensor memory: the step's activations and temporaries, beyond the parameters and optimizer
  // state already live; more than one sample's logits ([16, 64] floats), less than the process's peak.
  const double tensor_mb = j.at("peak_tensor_mb").at("cpu").get<double>();
  EXPECT_GT(tensor_mb, 16 * 64 * 4 / 1048576.0);
  double peak_rss_mb = 0;
  for (const auto& x : test::read_jsonl(run + "/metrics.jsonl"))
    peak_rss_mb = std::max(peak_rss_mb, x.value("peak_mem_mb", 0.0));
  EXPECT_LT(tensor_mb, peak_rss_mb);
  const std::string text = test::read_file(run + "/profile/profile-rank0.txt");
  EXPECT_NE(text.find("profile of steps 3-4"), std::string::npos) << text;
  EXPECT_NE(text.find("gtrain::forward"), std::string::npos) << text;
  EXPECT_NE(text.find("tensor memory on cpu: at most"), std::string::npos) << text;
  // Steps outside 3-4 were not recorded, and profiling changed no value.
  // (--force: without the profile it is the run above again, which gtrain would decline to repeat.)
  auto plain = gtrain_run(dir.file("g.toml"), dir.file("plain"), " --force");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  std::vector<double> a, b;
  for (const auto& x : test::read_jsonl(run + "/metrics.jsonl"))
    if (x.value("kind", "") == "train") a.push_back(x.at("loss"));
  for (const auto& x : test::read_jsonl(dir.file("plain") + "/metrics.jsonl"))
    if (x.value("kind", "") == "train") b.push_back(x.at("loss"));
  ASSERT_EQ(a.size(), 6u);
  EXPECT_EQ(a, b);
  // Steps 5-8 asked of a 6-step run: the profile of 5-6 is written when the run ends, and says so.
  auto cut = gtrain_run(dir.file("g.toml"), dir.file("cut"), " --set log.profile_start=5 --set log.profile_steps=4");
  ASSERT_EQ(cut.exit_code, 0) << cut.output;
  EXPECT_NE(cut.output.find("profile of steps 5-6 (cut short: the stage ended before step 8) written: " +
                            dir.file("cut") + "/profile/profile-rank0.txt"),
            std::string::npos)
      << cut.output;
  EXPECT_EQ(nlohmann::json::parse(test::read_file(dir.file("cut") + "/profile/profile-rank0.json")).at("last_step"), 6);
  // --quiet: nothing on the console, LibTorch's profiler warnings included.
  auto quiet = gtrain_run(dir.file("g.toml"), dir.file("quiet"), " --set log.profile_start=2 --quiet");
  ASSERT_EQ(quiet.exit_code, 0) << quiet.output;
  EXPECT_EQ(quiet.output, "");
  // A start after the last step is named, not silently ignored.
  auto late = gtrain_run(dir.file("g.toml"), dir.file("late"), " --set log.profile_start=50");
  ASSERT_EQ(late.exit_code, 0) << late.output;
  EXPECT_NE(late.output.find("warning: log.profile_start = 50 is after the run's last step (6): nothing will be "
                             "profiled"),
            std::string::npos)
      << late.output;
  // A bad value is named.
  auto bad = gtrain_run(dir.file("g.toml"), dir.file("bad"), " --set log.profile_steps=0");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.output.find("log.profile_steps"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace gtrain
