// test_stage_record.cpp: the rank side of stages.jsonl (one record a stage, read back for the
// checkpoint) and metrics.jsonl's final record read back.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "runtime/core/run_dir/run_records.h"
#include "runtime/core/run_dir/stage_records.h"
#include "tests/support/test_util.h"

namespace gtrain {
namespace {

TEST(StageLedger, ExitSaysHowTheStageEnded) {
  EXPECT_EQ(stage_exit("", false), "completed");
  EXPECT_EQ(stage_exit("signal 15", true), "resumable: signal 15");
  EXPECT_EQ(stage_exit("failed: training diverged", false), "failed: training diverged");
  EXPECT_EQ(stage_exit("failed: x", true), "failed: x");
}

TEST(StageLedger, RecordHasTheLedgerKeysAndOptionalOnesOnlyWhenSet) {
  StageRecord r;
  r.start = 10.5;
  r.end = 20.25;
  r.allocation = {{"scheduler", "slurm"}};
  r.world = 4;
  r.plan = "dp=4";
  r.step_from = 2;
  r.step_to = 6;
  r.total_steps = 10;
  r.samples = 64;
  r.productive_s = 8.0;
  r.save_s = 0.5;
  r.load_s = 0.25;
  r.exit = "completed";
  const auto j = r.to_json();
  EXPECT_EQ(j.dump(),
            R"({"allocation":{"scheduler":"slurm"},"end":20.25,"exit":"completed","load_s":0.25,"plan":"dp=4",)"
            R"("productive_s":8.0,"samples":64,"save_s":0.5,"start":10.5,"step_from":2,"step_to":6,"total_steps":10,)"
            R"("world":4})");
  r.stop_detail = "7.0 s left";
  r.threads = 2;
  r.threads_measured = "1: 0.5 s, 2: 0.3 s";
  r.config_changes = {{"train.seed", {"3", "4"}}};
  const auto full = r.to_json();
  EXPECT_EQ(full.at("stop_detail"), "7.0 s left");
  EXPECT_EQ(full.at("threads"), 2);
  EXPECT_EQ(full.at("threads_measured"), "1: 0.5 s, 2: 0.3 s");
  EXPECT_EQ(full.at("config_changes").at("train.seed"), nlohmann::json::array({"3", "4"}));
}

TEST(StageLedger, AppendsOneLineAStageAndReadsThemBack) {
  test::TempDir dir;
  const StageLedger none;
  EXPECT_FALSE(none.enabled());
  none.append(StageRecord{});
  EXPECT_EQ(none.records(), nlohmann::json::array());
  const StageLedger ledger(dir.file("stages.jsonl"));
  EXPECT_EQ(ledger.records(), nlohmann::json::array());  // no file yet
  StageRecord a, b;
  a.step_to = 3;
  b.step_from = 3;
  b.step_to = 5;
  ledger.append(a);
  ledger.append(b);
  const auto lines = test::lines(test::read_file(dir.file("stages.jsonl")));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[1], b.to_json().dump());
  const auto records = ledger.records();
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0], a.to_json());
  EXPECT_EQ(records[1].at("step_to"), 5);
}

TEST(MetricsRecords, FinalRecordOfAStep) {
  test::TempDir dir;
  const std::string path = dir.file("metrics.jsonl");
  EXPECT_FALSE(has_final_record(path, 5));  // no file
  test::write_file(path,
                   "{\"kind\":\"train\",\"step\":5}\n"
                   "{\"kind\":\"final\",\"step\":4}\n"
                   "{\"kind\":\"final\",\"step\":\"5\"}\n"
                   "{\"kind\":\"fin");  // a killed run's partial line
  EXPECT_FALSE(has_final_record(path, 5));
  EXPECT_TRUE(has_final_record(path, 4));
  test::write_file(path, "{\"kind\":\"final\",\"step\":5}\n");
  EXPECT_TRUE(has_final_record(path, 5));
}

}  // namespace
}  // namespace gtrain
