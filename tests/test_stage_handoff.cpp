// test_stage_handoff.cpp: StageHandoff, what a launching gtrain tells its ranks, through the
// environment and back.
#include <gtest/gtest.h>

#include "launcher/launch/stage_handoff.h"

namespace gtrain {
namespace {

// What the launcher hands the ranks: each host's granted GPUs, found again by exact or short name;
// an unlisted host or malformed text means "discover it yourself".
TEST(StageHandoff, GrantedListRoundTripsPerHost) {
  const std::string text = format_granted({{"node1.cluster", {0, 1, 2, 3}}, {"node2", {5, 7}}, {"cpuhost", {}}});
  EXPECT_EQ(text, "node1.cluster=0,1,2,3;node2=5,7;cpuhost=");
  EXPECT_EQ(granted_for_host(text, "node1.cluster"), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(granted_for_host(text, "node1"), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(granted_for_host(text, "node2.cluster"), (std::vector<int>{5, 7}));
  EXPECT_EQ(granted_for_host(text, "cpuhost"), std::vector<int>{});
  EXPECT_FALSE(granted_for_host(text, "node3").has_value());
  EXPECT_FALSE(granted_for_host("", "node1").has_value());
  EXPECT_FALSE(granted_for_host("node1=0,x", "node1").has_value());
  EXPECT_FALSE(granted_for_host("=0,1", "node1").has_value());
}

// Every field survives to_env() -> from_env(), under the documented variable names and encodings.
TEST(StageHandoff, EveryFieldRoundTripsThroughTheEnvironment) {
  StageHandoff h;
  h.locked_run_dir = "/runs/a";
  h.has_deadline = true;
  h.deadline_unix = 1767225600;
  h.deadline_source = "Slurm end time";
  h.allocation_json = R"({"scheduler":"slurm","ranks":2})";
  h.has_granted = true;
  h.granted = {{"n1.cluster", {0, 1}}, {"n2", {}}};
  h.positions = {{"n2", {2, 3}}};
  h.stop_file = "/runs/a/.stop-request";
  h.outcome_file = "/runs/a/.stage-outcome";
  h.heartbeat_dir = "/runs/a/.heartbeat";
  h.restarts = 2;
  const auto env = h.to_env();
  EXPECT_EQ(env.size(), StageHandoff::variables().size());
  EXPECT_EQ(env.at("GTRAIN_INTERNAL_LOCKED"), "/runs/a");
  EXPECT_EQ(env.at("GTRAIN_INTERNAL_DEADLINE"), "1767225600.000000|Slurm end time");
  EXPECT_EQ(env.at("GTRAIN_INTERNAL_GRANTED"), "n1.cluster=0,1;n2=");
  for (const auto& name : StageHandoff::variables()) EXPECT_EQ(env.count(name), 1u) << name;

  const StageHandoff back = StageHandoff::from_env(env);
  EXPECT_EQ(back.locked_run_dir, h.locked_run_dir);
  EXPECT_TRUE(back.has_deadline);
  EXPECT_DOUBLE_EQ(back.deadline_unix, h.deadline_unix);
  EXPECT_EQ(back.deadline_source, h.deadline_source);
  EXPECT_EQ(back.allocation_json, h.allocation_json);
  EXPECT_TRUE(back.has_granted);
  EXPECT_EQ(back.granted, h.granted);
  EXPECT_EQ(back.granted_for("n1"), (std::vector<int>{0, 1}));
  EXPECT_EQ(env.at("GTRAIN_INTERNAL_POSITIONS"), "n2=2,3");
  EXPECT_EQ(back.positions_for("n2"), (std::vector<int>{2, 3}));
  EXPECT_TRUE(back.positions_for("n1").empty());
  EXPECT_EQ(back.stop_file, h.stop_file);
  EXPECT_EQ(back.outcome_file, h.outcome_file);
  EXPECT_EQ(back.heartbeat_dir, h.heartbeat_dir);
  EXPECT_EQ(back.restarts, 2);
}

// A rank started without a launching gtrain (srun) sees nothing: it locks, discovers and finds its
// deadline itself; malformed granted text is ignored the same way.
TEST(StageHandoff, AbsentOrMalformedVariablesLeaveFieldsEmpty) {
  const StageHandoff none = StageHandoff::from_env({{"PATH", "/bin"}});
  EXPECT_TRUE(none.locked_run_dir.empty());
  EXPECT_FALSE(none.has_deadline);
  EXPECT_FALSE(none.has_granted);
  EXPECT_FALSE(none.granted_for("n1").has_value());
  EXPECT_TRUE(none.to_env().empty());
  const StageHandoff bad = StageHandoff::from_env({{"GTRAIN_INTERNAL_GRANTED", "n1=0,x"}});
  EXPECT_FALSE(bad.has_granted);
}

}  // namespace
}  // namespace gtrain
