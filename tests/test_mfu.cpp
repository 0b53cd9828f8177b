// test_mfu.cpp: model FLOPs utilisation: each metrics.jsonl train record's mfu is the planner's FLOPs
// per step over the step's time at the devices' peak, computed here by hand from `gtrain plan
// --json` (the model's FLOPs per sample, the hardware profile's peak); the end line gives the stage's.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "tests/support/cli_util.h"
#include "tests/support/test_util.h"

namespace gtrain {
namespace {

TEST(Mfu, EveryTrainRecordCarriesTheHandComputedMfu) {
  test::TempDir dir;
  test::write_file(dir.file("job.toml"), kTiny);
  auto plan = test::run_command(GTRAIN_BINARY + " plan " + dir.file("job.toml") + " --json");
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  const auto p = nlohmann::json::parse(plan.output);
  const double flops_per_step = p.at("model").at("flops_per_sample").get<double>() * p.at("global_batch").get<double>();
  const double peak = p.at("hardware").at("fp32_flops").get<double>() * p.at("nodes").get<double>();  // CPU: per host
  ASSERT_GT(flops_per_step, 0);
  ASSERT_GT(peak, 0);

  auto r = test::run_command(GTRAIN_BINARY + " run " + dir.file("job.toml") + " --run-dir " + dir.file("run") +
                             " --set log.progress=none --set train.steps=12");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  int seen = 0;
  double seconds = 0;
  for (const auto& j : test::read_jsonl(dir.file("run/metrics.jsonl"))) {
    if (j.at("kind") != "train") continue;
    ++seen;
    const double t = j.at("step_time_s").get<double>();
    seconds += t;
    const double want = flops_per_step / (t * peak);
    EXPECT_NEAR(j.at("mfu").get<double>(), want, 1e-9 * want) << j.dump();
  }
  EXPECT_EQ(seen, 12);
  const auto pj = nlohmann::json::parse(test::read_file(dir.file("run/plan.json")));
  EXPECT_DOUBLE_EQ(pj.at("flops_per_step").get<double>(), flops_per_step);
  EXPECT_DOUBLE_EQ(pj.at("peak_flops").get<double>(), peak);
  // The end line: the stage's MFU, "done 12 steps in ... (N samples/s, data wait X s, MFU Y%)".
  const auto at = r.output.find(", MFU ");
  ASSERT_NE(at, std::string::npos) << r.output;
  const double shown = std::stod(r.output.substr(at + 6));
  EXPECT_GT(shown, 0.0);
  EXPECT_LT(shown, 100.0);
}

}  // namespace
}  // namespace gtrain
