// test_run_dir_cli.cpp: a run directory over several starts: newer checkpoints moved aside when a
// run starts over, and `gtrain status` on bad or missing records.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

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

// The step a committed checkpoint's manifest records.
int64_t manifest_step(const std::string& ckpt) {
  return nlohmann::json::parse(test::read_file(ckpt + "/manifest.json")).at("step").get<int64_t>();
}

std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name != ".lock") out.push_back(name);  // the run's lock on its checkpoint directory
  }
  std::sort(out.begin(), out.end());
  return out;
}

// --no-resume (or --resume of an older checkpoint) moves the newer checkpoints of the old trajectory
// aside, so pruning keeps the new run's checkpoints and the next start resumes the new run.
TEST(Cli, StartingOverMovesNewerCheckpointsAside) {
  test::TempDir dir;
  test::write_file(dir.file("tiny.toml"), kTiny);
  const std::string run = dir.file("run"), ck = run + "/checkpoints";
  const std::string base = GTRAIN_BINARY + " run " + dir.file("tiny.toml") + " --run-dir " + run +
                           " --set log.progress=none --set checkpoint.interval=1 --set checkpoint.keep=2";
  auto first = run_command(base + " --set train.steps=5");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  EXPECT_EQ(names_in(ck), (std::vector<std::string>{"step_00000004", "step_00000005"}));
  const std::string old5 = test::read_file(ck + "/step_00000005/manifest.json");

  auto over = run_command(base + " --set train.steps=3 --no-resume");
  ASSERT_EQ(over.exit_code, 0) << over.output;
  EXPECT_NE(over.output.find("gtrain: warning: moved 2 checkpoint(s) (step 4, 5) aside to " + ck + "/superseded-"),
            std::string::npos)
      << over.output;
  EXPECT_NE(over.output.find("--no-resume starts the run over"), std::string::npos) << over.output;
  auto names = names_in(ck);
  ASSERT_EQ(names.size(), 3u) << over.output;
  EXPECT_EQ(names[0], "step_00000002");
  EXPECT_EQ(names[1], "step_00000003");
  ASSERT_EQ(names[2].rfind("superseded-", 0), 0u) << names[2];
  EXPECT_EQ(manifest_step(ck + "/step_00000002"), 2);
  EXPECT_EQ(manifest_step(ck + "/step_00000003"), 3);
  const std::string aside = ck + "/" + names[2];
  EXPECT_EQ(names_in(aside), (std::vector<std::string>{"step_00000004", "step_00000005"}));
  EXPECT_EQ(test::read_file(aside + "/step_00000005/manifest.json"), old5);
  // status follows the new run: step 3 of 3, not the old trajectory's 5.
  auto st = run_command(GTRAIN_BINARY + " status " + run + " --json");
  ASSERT_EQ(st.exit_code, 0) << st.output;
  EXPECT_EQ(nlohmann::json::parse(st.output).at("step"), 3) << st.output;

  // A plain start resumes the new run (step 3), not the old one (step 5).
  auto again = run_command(base + " --set train.steps=3");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("resumed from " + ck + "/step_00000003 at step 3"), std::string::npos) << again.output;
  EXPECT_EQ(again.output.find("moved"), std::string::npos) << again.output;

  // --resume of an older checkpoint: the newer one goes aside too.
  auto older = run_command(base + " --set train.steps=3 --resume " + ck + "/step_00000002");
  ASSERT_EQ(older.exit_code, 0) << older.output;
  EXPECT_NE(older.output.find("moved 1 checkpoint(s) (step 3) aside"), std::string::npos) << older.output;
  EXPECT_NE(older.output.find("resuming from the older checkpoint " + ck + "/step_00000002"), std::string::npos)
      << older.output;
  EXPECT_EQ(manifest_step(ck + "/step_00000003"), 3);  // written again by this run
}

// status and cancel on JSON of the wrong shape: one clear line naming the file and line or key.
TEST(Cli, StatusAndCancelNameBadJson) {
  test::TempDir dir;
  test::write_file(dir.file("tiny.toml"), kTiny);
  const std::string run = dir.file("run");
  auto r = run_command(GTRAIN_BINARY + " run " + dir.file("tiny.toml") + " --run-dir " + run +
                       " --set log.progress=none --set train.steps=4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string ledger = test::read_file(run + "/stages.jsonl");
  // A bad stages.jsonl line is skipped with a warning naming file:line and the key.
  test::write_file(run + "/stages.jsonl", "[1,2]\n" + ledger + "{\"step_to\": \"x\"}\n");
  auto st = run_command(GTRAIN_BINARY + " status " + run);
  EXPECT_EQ(st.exit_code, 0) << st.output;
  EXPECT_NE(st.output.find("gtrain: warning: " + run + "/stages.jsonl:1: expected a JSON object"), std::string::npos)
      << st.output;
  EXPECT_NE(st.output.find(run + "/stages.jsonl:3: key 'step_to' must be an integer"), std::string::npos) << st.output;
  EXPECT_NE(st.output.find("step 4 / 4  (complete)"), std::string::npos) << st.output;
  EXPECT_NE(st.output.find("stages     1\n"), std::string::npos) << st.output;
  EXPECT_EQ(st.output.find("json.exception"), std::string::npos) << st.output;
  // chain.json of the wrong shape: exit 2, one line naming the file and key.
  const std::vector<std::pair<std::string, std::string>> chains = {
      {"[]", "chain.json: must be a JSON object"},
      {"{\"stages\": [{\"gpus\": \"2\"}]}", "chain.json: key 'stages[0].gpus' must be an integer"},
      {"{\"stages\": 5}", "chain.json: key 'stages' must be an array"},
      {"{\"state\": 1}", "chain.json: key 'state' must be a string"}};
  for (const auto& [text, want] : chains) {
    test::write_file(run + "/chain.json", text);
    for (const std::string cmd : {"status", "status --json", "cancel"}) {
      auto c = run_command(std::string(GTRAIN_BINARY) + " " + cmd.substr(0, cmd.find(' ')) + " " + run +
                           (cmd.find("--json") != std::string::npos ? " --json" : ""));
      EXPECT_EQ(c.exit_code, 2) << cmd << ": " << c.output;
      EXPECT_EQ(test::lines(c.output).size(), 1u) << cmd << ": " << c.output;
      EXPECT_NE(c.output.find(run + "/" + want), std::string::npos) << cmd << ": " << c.output;
    }
  }
}

// status: not a run directory is an error; without a ledger (kill -9) the total comes from the run's
// config.toml and no goodput is claimed; the checkpoint named is the newest complete one.
TEST(Cli, StatusWithoutLedgerAndWithBrokenNewestCheckpoint) {
  test::TempDir dir;
  std::filesystem::create_directories(dir.file("empty"));
  auto none = run_command(GTRAIN_BINARY + " status " + dir.file("empty"));
  EXPECT_EQ(none.exit_code, 2) << none.output;
  EXPECT_NE(
      none.output.find(
          dir.file("empty") +
          ": not a gtrain run directory (no config.toml, metrics.jsonl, stages.jsonl, chain.json or checkpoints/)"),
      std::string::npos)
      << none.output;

  test::write_file(dir.file("tiny.toml"), kTiny);
  const std::string run = dir.file("run");
  auto r = run_command(GTRAIN_BINARY + " run " + dir.file("tiny.toml") + " --run-dir " + run +
                       " --set log.progress=none --set train.steps=6 --set checkpoint.interval=3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  fs::remove(run + "/stages.jsonl");
  // The newest checkpoint's data file is cut short (a kill during a copy, a full disk): not named.
  const std::string shard = run + "/checkpoints/step_00000006/shard_0.bin";
  test::write_file(shard, test::read_file(shard).substr(0, 10));
  auto st = run_command(GTRAIN_BINARY + " status " + run);
  EXPECT_EQ(st.exit_code, 0) << st.output;
  EXPECT_NE(st.output.find("progress   step 6 / 6\n"), std::string::npos) << st.output;
  EXPECT_EQ(st.output.find("goodput"), std::string::npos) << st.output;
  EXPECT_NE(st.output.find("checkpoint " + run + "/checkpoints/step_00000003 (unverified: gtrain ckpt verify checks"),
            std::string::npos)
      << st.output;
  auto js = run_command(GTRAIN_BINARY + " status " + run + " --json");
  ASSERT_EQ(js.exit_code, 0) << js.output;
  auto j = nlohmann::json::parse(js.output);
  EXPECT_EQ(j.at("total_steps"), 6);
  EXPECT_TRUE(j.at("goodput").is_null());
  EXPECT_EQ(j.at("latest_checkpoint"), run + "/checkpoints/step_00000003");
}

// A full disk (a 2.5 MiB tmpfs the test mounts; skipped where mount is not allowed) during an async
// interval save: the partial checkpoint is removed before anything else, the error names the writer
// and what holds the space (the checkpoint.keep hint, whichever writer met it first, TensorBoard
// on), the stage ends at once instead of restarting into the same wall, and stages.jsonl records
// it as "disk full" from the reserve the launcher kept.
TEST(Cli, FullDiskEndsTheStageAtOnceWithItsRecord) {
  test::TempDir dir;
  const std::string disk = dir.file("disk");
  fs::create_directories(disk);
  if (::geteuid() != 0 || run_command("mount -t tmpfs -o size=2560k tmpfs " + disk).exit_code != 0)
    GTEST_SKIP() << "cannot mount a small tmpfs here (needs root)";
  struct Unmount {
    std::string path;
    ~Unmount() { run_command("umount -l " + path); }
  } unmount{disk};
  // ~116k parameters: a checkpoint (weights and AdamW's two moments) is about 1.4 MB: one fits.
  test::write_file(dir.file("gpt.toml"),
                   "[model]\nname = \"gpt\"\nn_layer = 2\nn_head = 2\nn_embd = 64\nseq_len = 32\nvocab = 256\n"
                   "[data]\nkind = \"synthetic\"\n[train]\nglobal_batch = 4\nsteps = 12\nthreads = 1\n"
                   "[checkpoint]\ninterval = 2\nkeep = 2\n[log]\nprogress = \"none\"\ntensorboard = true\n"
                   "[schedule]\nmax_restarts = 2\n");
  const std::string run = disk + "/run";
  auto r = gtrain_run(dir.file("gpt.toml"), run);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("gtrain: disk full: " + run), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("No space left on device while writing"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" in " + run + "/checkpoints hold"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(checkpoint.keep = 2)"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("restarting the ranks"), std::string::npos) << r.output;
  for (const auto& e : fs::directory_iterator(run + "/checkpoints"))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  EXPECT_TRUE(fs::exists(run + "/checkpoints/step_00000002/manifest.json"));
  const auto ledger = test::lines(test::read_file(run + "/stages.jsonl"));
  ASSERT_FALSE(ledger.empty());
  const auto last = nlohmann::json::parse(ledger.back());
  EXPECT_EQ(last.at("exit").get<std::string>().rfind("failed: disk full: " + run, 0), 0u) << ledger.back();
  // The next start finds the stage recorded: no "launcher was killed" guess.
  auto st = run_command(GTRAIN_BINARY + " status " + run);
  EXPECT_NE(st.output.find("disk full"), std::string::npos) << st.output;
  EXPECT_EQ(st.output.find("was killed"), std::string::npos) << st.output;
}

}  // namespace
}  // namespace gtrain
