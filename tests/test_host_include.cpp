// test_host_include.cpp: `gtrain run --include` (the hosts and GPUs of the allocation a stage runs
// on) and the places `gtrain sweep` gives its trials on a multi-node grant.
#include <gtest/gtest.h>

#include "launcher/launch/host_include.h"
#include "launcher/sweep/sweep_runner.h"
#include "runtime/core/errors.h"
#include "tests/support/test_util.h"

namespace gtrain {
namespace {

std::string message_of(const std::function<void()>& f) {
  return test::error_of<ConfigError>(f);
}

Allocation two_nodes(int gpus_each) {
  Allocation a;
  a.scheduler = SchedulerKind::slurm;
  a.this_host = "node1";
  for (const char* h : {"node1", "node2"}) {
    NodeAllocation n;
    n.host = h;
    for (int i = 0; i < gpus_each; ++i) n.gpus.push_back(i);
    a.nodes.push_back(n);
  }
  return a;
}

TEST(HostInclude, ParsesDeepSpeedSyntaxAndRefusesWhatItCannotRead) {
  const auto inc = parse_include("node2:2,3@node1");
  ASSERT_EQ(inc.size(), 2u);
  EXPECT_EQ(inc[0].host, "node2");
  EXPECT_EQ(inc[0].gpus, (std::vector<int>{2, 3}));
  EXPECT_EQ(inc[1].host, "node1");
  EXPECT_TRUE(inc[1].gpus.empty());
  EXPECT_EQ(format_include(inc[0]), "node2:2,3");
  EXPECT_EQ(format_include(inc[1]), "node1");
  EXPECT_EQ(message_of([] { parse_include("node1@"); }),
            "--include: expected a host name before each ':' and between '@', got 'node1@'");
  EXPECT_EQ(message_of([] { parse_include("node1:0,x"); }),
            "--include: node1: expected GPU indices like 0,1, got '0,x'");
  EXPECT_EQ(message_of([] { parse_include("node1:"); }), "--include: node1: expected GPU indices like 0,1, got ''");
  EXPECT_EQ(message_of([] { parse_include("node1:1,1"); }), "--include: node1 lists GPU 1 twice");
  EXPECT_EQ(message_of([] { parse_include("node1@node1:0"); }), "--include: host node1 is listed twice");
}

TEST(HostInclude, NarrowsTheAllocationKeepingItsOrderAndGivesEachNarrowedHostItsPositions) {
  Allocation a = two_nodes(4);
  a.nodes[1].gpus = {4, 5, 6, 7};  // node2's grant by physical index
  const auto one = include_only(a, parse_include("node2:6,7"));
  ASSERT_EQ(one.alloc.nodes.size(), 1u);
  EXPECT_EQ(one.alloc.nodes[0].host, "node2");
  EXPECT_EQ(one.alloc.nodes[0].gpus, (std::vector<int>{6, 7}));
  EXPECT_EQ(one.alloc.total_gpus(), 2);
  ASSERT_EQ(one.positions.size(), 1u);
  EXPECT_EQ(one.positions[0].second, (std::vector<int>{2, 3}));  // the 3rd and 4th of node2's grant
  const auto both = include_only(a, parse_include("node2@node1:1"));
  ASSERT_EQ(both.alloc.nodes.size(), 2u);
  EXPECT_EQ(both.alloc.nodes[0].host, "node1");  // the allocation's order: mpirun fills it in order
  EXPECT_EQ(both.alloc.nodes[0].gpus, (std::vector<int>{1}));
  EXPECT_EQ(both.alloc.nodes[1].gpus, (std::vector<int>{4, 5, 6, 7}));
  ASSERT_EQ(both.positions.size(), 1u);  // node2 kept all its GPUs: no positions
  EXPECT_EQ(both.positions[0].first, "node1");
  EXPECT_EQ(message_of([&] { include_only(a, parse_include("node3")); }),
            "--include: node3 is not in this job's allocation (node1, node2)");
  EXPECT_EQ(message_of([&] { include_only(a, parse_include("node2:1")); }),
            "--include: node2 has no granted GPU 1 (granted: 4,5,6,7)");
  Allocation cpu = two_nodes(0);
  EXPECT_EQ(message_of([&] { include_only(cpu, parse_include("node1:0")); }),
            "--include: node1 has no granted GPU 0 (granted: none)");
}

std::vector<std::string> wheres(const std::vector<TrialPlace>& p) {
  std::vector<std::string> out;
  for (const auto& t : p) out.push_back(t.where + " | " + t.include + " | " + t.devices);
  return out;
}

// Trials fill every node of a multi-node grant: within a node while it has the GPUs, else whole nodes.
TEST(SweepPlaces, TrialsFillEveryNodeOfTheGrant) {
  const Allocation a = two_nodes(4);
  const std::map<std::string, std::string> env;
  int64_t busiest = 0;
  EXPECT_EQ(wheres(trial_places(a, env, 0, 2, &busiest)),
            (std::vector<std::string>{"node1 GPU 0,1 | node1:0,1 | ", "node1 GPU 2,3 | node1:2,3 | ",
                                      "node2 GPU 0,1 | node2:0,1 | ", "node2 GPU 2,3 | node2:2,3 | "}));
  EXPECT_EQ(busiest, 4);
  // 3 GPUs a trial: one a node, the 4th GPU of each idle.
  EXPECT_EQ(wheres(trial_places(a, env, 0, 3, &busiest)),
            (std::vector<std::string>{"node1 GPU 0,1,2 | node1:0,1,2 | ", "node2 GPU 0,1,2 | node2:0,1,2 | "}));
  EXPECT_EQ(busiest, 3);
  // Wider than a node: both nodes whole.
  EXPECT_EQ(wheres(trial_places(a, env, 0, 6)), (std::vector<std::string>{"node1@node2 | node1@node2 | "}));
  EXPECT_TRUE(trial_places(a, env, 0, 9).empty());
  // --ranks 5 of the 8: this node's 4, then one of node2's.
  EXPECT_EQ(wheres(trial_places(a, env, 5, 1)).size(), 5u);
  EXPECT_EQ(wheres(trial_places(a, env, 5, 1)).back(), "node2 GPU 0 | node2:0 | ");
  // This node listed second by the scheduler still comes first.
  Allocation b = a;
  b.this_host = "node2";
  EXPECT_EQ(trial_places(b, env, 0, 4)[0].include, "node2");
  EXPECT_EQ(trial_places(b, env, 0, 4)[0].where, "node2 GPU 0,1,2,3");
  // One node: CUDA_VISIBLE_DEVICES entries (UUIDs too) and no --include.
  Allocation one = two_nodes(2);
  one.nodes.pop_back();
  EXPECT_EQ(wheres(trial_places(one, {{"CUDA_VISIBLE_DEVICES", "GPU-aa,GPU-bb"}}, 0, 1)),
            (std::vector<std::string>{"GPU GPU-aa |  | GPU-aa", "GPU GPU-bb |  | GPU-bb"}));
}

}  // namespace
}  // namespace gtrain
