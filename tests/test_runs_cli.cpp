// test_runs_cli.cpp: run identity end to end: `gtrain run` declines to repeat a finished run beside
// it (naming it) unless --force, `gtrain runs` lists a repeat, a staged and a failed run, and
// `gtrain runs diff` names what differs.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "runtime/core/run_dir/run_files.h"
#include "runtime/core/run_dir/run_identity.h"
#include "tests/support/cli_util.h"
#include "tests/support/test_util.h"

namespace gtrain {
namespace {

namespace fs = std::filesystem;
using test::run_command;

// The `gtrain runs` table's row for `dir`: its cells split on runs of two or more spaces.
std::vector<std::string> row_of(const std::string& table, const std::string& dir) {
  for (const auto& line : test::lines(table)) {
    const size_t at = line.find(dir);
    if (at == std::string::npos || (at + dir.size() < line.size() && line[at + dir.size()] != ' ')) continue;
    std::vector<std::string> cells;
    std::string cell;
    for (size_t i = 0; i < line.size(); ++i) {
      if (line[i] == ' ' && i + 1 < line.size() && line[i + 1] == ' ') {
        if (!cell.empty()) cells.push_back(cell);
        cell.clear();
        while (i + 1 < line.size() && line[i + 1] == ' ') ++i;
      } else {
        cell += line[i];
      }
    }
    if (!cell.empty()) cells.push_back(cell);
    return cells;
  }
  return {};
}

TEST(Runs, RepeatIsDeclinedThenForcedAndTheTableListsRepeatStagedAndFailedRuns) {
  test::TempDir dir;
  test::write_file(dir.file("tiny.toml"), kTiny);
  const std::string runs = dir.file("runs"), cfg = dir.file("tiny.toml");
  const std::string opts = " --set log.progress=none --set train.steps=6";
  auto a = gtrain_run(cfg, runs + "/a", opts);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  const auto id = read_run_identity(runs + "/a");
  ASSERT_TRUE(id);
  EXPECT_EQ(id->version, gtrain_version());
  EXPECT_EQ(id->config.count("log.progress"), 0u);  // how it logs defines nothing
  EXPECT_EQ(id->config.at("train.steps"), "6");

  // The same run beside it: declined, naming the finished one; nothing trained.
  auto repeat = gtrain_run(cfg, runs + "/b", opts);
  EXPECT_EQ(repeat.exit_code, 0) << repeat.output;
  EXPECT_NE(repeat.output.find(runs + "/a finished this run already (identity " + id->id() + ": the same config"),
            std::string::npos)
      << repeat.output;
  EXPECT_NE(repeat.output.find("--force trains it again"), std::string::npos) << repeat.output;
  EXPECT_FALSE(fs::exists(RunDir(runs + "/b").metrics()));
  // Only where the run keeps its logs differs: still a repeat.
  auto elsewhere = gtrain_run(cfg, runs + "/b", opts + " --set log.metrics_interval=2");
  EXPECT_NE(elsewhere.output.find("finished this run already"), std::string::npos) << elsewhere.output;
  auto forced = gtrain_run(cfg, runs + "/b", opts + " --force");
  ASSERT_EQ(forced.exit_code, 0) << forced.output;
  EXPECT_TRUE(fs::exists(RunDir(runs + "/b").metrics()));

  // Staged: 3 steps, then resumed to 6 (the identity of its first start stays).
  auto c1 = gtrain_run(cfg, runs + "/c", " --set log.progress=none --set train.steps=3");
  ASSERT_EQ(c1.exit_code, 0) << c1.output;
  auto c2 = gtrain_run(cfg, runs + "/c", opts);
  ASSERT_EQ(c2.exit_code, 0) << c2.output;
  EXPECT_EQ(c2.output.find("finished this run already"), std::string::npos) << c2.output;  // a resume
  // Failed: diverges at step 2.
  auto d = gtrain_run(cfg, runs + "/d", opts + " --set optimizer.learning_rate=1e30");
  ASSERT_NE(d.exit_code, 0) << d.output;

  auto table = run_command(GTRAIN_BINARY + " runs " + runs);
  ASSERT_EQ(table.exit_code, 0) << table.output;
  const auto ra = row_of(table.output, runs + "/a"), rb = row_of(table.output, runs + "/b"),
             rc = row_of(table.output, runs + "/c"), rd = row_of(table.output, runs + "/d");
  ASSERT_EQ(ra.size(), 7u) << table.output;
  EXPECT_EQ(ra[0], id->id());
  EXPECT_EQ(ra[1], "complete");
  EXPECT_EQ(ra[2], "1");
  EXPECT_EQ(ra[3], "6/6");
  EXPECT_NE(ra[4], "-");  // its best eval loss
  ASSERT_EQ(rb.size(), 8u) << table.output;
  EXPECT_EQ(rb[0], id->id());
  EXPECT_EQ(rb[7], "(repeats " + runs + "/a)");
  ASSERT_GE(rc.size(), 7u) << table.output;
  EXPECT_EQ(rc[1], "complete");
  EXPECT_EQ(rc[2], "2");
  EXPECT_EQ(rc[3], "6/6");
  EXPECT_NE(rc[0], id->id());
  ASSERT_GE(rd.size(), 7u) << table.output;
  EXPECT_EQ(rd[1], "failed");
  EXPECT_EQ(rd[3], "2/6");
  EXPECT_EQ(rd[4], "-");
  EXPECT_EQ(table.output.find("(repeats", table.output.find(runs + "/c")), std::string::npos) << table.output;

  auto js = run_command(GTRAIN_BINARY + " runs " + runs + "/d " + runs + "/a --json 2>/dev/null");
  ASSERT_EQ(js.exit_code, 0) << js.output;
  const auto rows = nlohmann::json::parse(js.output);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].at("status"), "failed");
  EXPECT_EQ(rows[1].at("id"), id->id());
  EXPECT_GT(rows[1].at("rank_hours").get<double>(), 0.0);

  auto diff = run_command(GTRAIN_BINARY + " runs diff " + runs + "/a " + runs + "/d");
  ASSERT_EQ(diff.exit_code, 0) << diff.output;
  EXPECT_NE(diff.output.find("1 difference"), std::string::npos) << diff.output;
  EXPECT_NE(diff.output.find("optimizer.learning_rate: 0.001 -> 1e+30"), std::string::npos) << diff.output;
  auto same = run_command(GTRAIN_BINARY + " runs diff " + runs + "/a " + runs + "/b");
  EXPECT_NE(same.output.find("have one identity (" + id->id() + ")"), std::string::npos) << same.output;
  auto bad = run_command(GTRAIN_BINARY + " runs diff " + runs + "/a " + dir.path());
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find(dir.path() + ": not a gtrain run directory"), std::string::npos) << bad.output;
  auto none = run_command(GTRAIN_BINARY + " runs " + dir.file("tiny.toml"));
  EXPECT_EQ(none.exit_code, 2) << none.output;
}

TEST(Runs, DataFingerprintsNameTheFileThatChanged) {
  test::TempDir dir;
  test::write_file(dir.file("corpus.txt"), std::string(200000, 'a'));
  JobConfig cfg;
  cfg.data.kind = DataKind::text_bytes;
  cfg.data.path = dir.file("corpus.txt");
  const RunIdentity before = run_identity(cfg, "dp=1 tp=1 pp=1 zero=0");
  ASSERT_EQ(before.data.size(), 1u);
  EXPECT_EQ(before.data[0].at("bytes"), 200000);
  std::string text(200000, 'a');
  text[199990] = 'b';  // in the last 64 KiB
  test::write_file(dir.file("corpus.txt"), text);
  const RunIdentity after = run_identity(cfg, "dp=1 tp=1 pp=1 zero=0");
  EXPECT_NE(before.id(), after.id());
  EXPECT_EQ(identity_differences(before, after),
            std::vector<std::string>{"data: train:corpus.txt changed (200000 -> 200000 bytes)"});
  // Another layout is another order of sums, unless bitwise mode makes it one.
  EXPECT_NE(run_identity(cfg, "dp=2 tp=1 pp=1 zero=0").id(), after.id());
  cfg.train.reproducible = Reproducible::bitwise;
  EXPECT_EQ(run_identity(cfg, "dp=2 tp=1 pp=1 zero=0").id(), run_identity(cfg, "dp=1 tp=1 pp=1 zero=0").id());
  // Moving the corpus keeps the identity: its content, not its path, defines the run.
  fs::create_directories(dir.file("moved"));
  fs::rename(dir.file("corpus.txt"), dir.file("moved/corpus.txt"));
  cfg.train.reproducible = Reproducible::off;
  cfg.data.path = dir.file("moved/corpus.txt");
  EXPECT_EQ(run_identity(cfg, "dp=1 tp=1 pp=1 zero=0").id(), after.id());
}

}  // namespace
}  // namespace gtrain
