// test_scheduler_pbs_lsf.cpp: the PBS and LSF backends: discovery from recorded PBS_* / LSB_*
// environments, PBS_NODEFILE, PBS_GPUFILE and qstat -f output.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include <chrono>

#include "launcher/base/program_runner.h"
#include "launcher/launch/launch.h"
#include "launcher/scheduler/allocation.h"
#include "launcher/scheduler/hostlist.h"
#include "launcher/scheduler/scheduler_limits.h"
#include "runtime/core/errors.h"
#include "tests/support/allocation_fixture.h"
#include "tests/support/test_util.h"

namespace gtrain {
namespace {

using namespace alloc_test;

// ---- PBS ----

const char* kQstat =
    "Job Id: 1234.pbs01\n"
    "    Job_Name = train\n"
    "    Job_Owner = alice@login01\n"
    "    job_state = R\n"
    "    queue = gpu\n"
    "    Account_Name = proj42\n"
    "    Resource_List.ncpus = 16\n"
    "    Resource_List.ngpus = 8\n"
    "    Resource_List.nodect = 2\n"
    "    Resource_List.select = 2:ncpus=8:ngpus=4\n"
    "    Resource_List.walltime = 04:00:00\n"
    "    exec_host = node1/0*8+node2/0*8\n"
    "    exec_vnode = (node1:ncpus=8:ngpus=4)+(node2:ncpus=8\n"
    "\t:ngpus=4)\n"
    "    stime = Wed May  1 10:30:00 2024\n";

TEST(PbsAllocation, ProFromNodefileAndQstat) {
  test::TempDir dir;
  test::write_file(dir.file("nodes"), "node1\nnode1\nnode2\nnode2\n");
  Env env = {{"PBS_JOBID", "1234.pbs01"}, {"PBS_NODEFILE", dir.file("nodes")}, {"CUDA_VISIBLE_DEVICES", "0,1,2,3"}};
  FakeRunner r;
  r.outputs["qstat -f 1234.pbs01"] = kQstat;
  const Allocation a = discover_allocation(env, r.runner(), with(cpu_machine("node1", 16)));
  EXPECT_EQ(a.scheduler, SchedulerKind::pbs);
  ASSERT_EQ(a.nodes.size(), 2u);
  EXPECT_EQ(a.nodes[0].host, "node1");
  EXPECT_EQ(a.nodes[0].tasks, 2);
  EXPECT_EQ(a.nodes[0].cpus, 8);
  EXPECT_EQ(a.nodes[1].gpus.size(), 4u);
  EXPECT_EQ(a.total_gpus(), 8);
  EXPECT_EQ(a.tasks, 4);
  EXPECT_EQ(a.partition, "gpu");
  EXPECT_EQ(a.account, "proj42");
  EXPECT_EQ(a.time_limit_s, 4 * 3600);
  EXPECT_GT(a.end_time_unix, 0);
  const auto vn = parse_pbs_exec_vnode("(n1[0]:ncpus=4:ngpus=2)+(n1[1]:ncpus=4:ngpus=2)+(n2:ngpus=1)");
  ASSERT_EQ(vn.size(), 2u);
  EXPECT_EQ(vn[0].first, "n1");
  EXPECT_EQ(vn[0].second.second, 4);
  EXPECT_EQ(vn[0].second.first, 8);
}

// An unusable PBS_NODEFILE gives one note saying what is wrong with it; extra fields on a line
// (some sites append slot counts) are not part of the host name.
TEST(PbsAllocation, NodefileProblemsAreOneAccurateNote) {
  test::TempDir dir;
  auto notes_for = [&](const std::string& nodefile) {
    Env env = {{"PBS_JOBID", "1.srv"}, {"PBS_NODEFILE", nodefile}};
    FakeRunner r;
    DiscoveryOptions o = with(cpu_machine("here", 4));
    o.read_limits = false;
    return discover_allocation(env, r.runner(), o).notes;
  };
  auto expect_one = [](const Strings& notes, const std::string& want) {
    int pbs_notes = 0;
    for (const auto& n : notes) pbs_notes += n.find("PBS_NODEFILE") != std::string::npos;
    EXPECT_EQ(pbs_notes, 1) << ::testing::PrintToString(notes);
    bool found = false;
    for (const auto& n : notes) found |= n == want;
    EXPECT_TRUE(found) << want << "\n" << ::testing::PrintToString(notes);
  };
  expect_one(notes_for(dir.file("missing")),
             "PBS_NODEFILE " + dir.file("missing") + " does not exist; no exec_vnode either: assuming this node only");
  expect_one(notes_for(dir.path()), "PBS_NODEFILE " + dir.path() +
                                        " is a directory, not a file; no exec_vnode either: assuming this node only");
  test::write_file(dir.file("empty"), "\n  \n");
  expect_one(notes_for(dir.file("empty")),
             "PBS_NODEFILE " + dir.file("empty") + " lists no hosts; no exec_vnode either: assuming this node only");

  test::write_file(dir.file("nodes"), "n1 extra\nn1\n  n2\textra 2\n");
  Env env = {{"PBS_JOBID", "1.srv"}, {"PBS_NODEFILE", dir.file("nodes")}};
  FakeRunner r;
  DiscoveryOptions o = with(cpu_machine("n1", 4));
  o.read_limits = false;
  const Allocation a = discover_allocation(env, r.runner(), o);
  ASSERT_EQ(a.nodes.size(), 2u);
  EXPECT_EQ(a.nodes[0].host, "n1");
  EXPECT_EQ(a.nodes[0].tasks, 2);
  EXPECT_EQ(a.nodes[1].host, "n2");
  for (const auto& n : a.notes) EXPECT_EQ(n.find("PBS_NODEFILE"), std::string::npos) << n;
}

TEST(PbsAllocation, TorqueGpuFileAndWalltime) {
  test::TempDir dir;
  test::write_file(dir.file("nodes"), "t1\nt2\n");
  test::write_file(dir.file("gpus"), "t1-gpu0\nt1-gpu1\nt2-gpu0\nt2-gpu1\n");
  Env env = {{"PBS_JOBID", "55.torque"},
             {"PBS_NODEFILE", dir.file("nodes")},
             {"PBS_GPUFILE", dir.file("gpus")},
             {"PBS_WALLTIME", "3600"},
             {"PBS_QUEUE", "batch"}};
  const Allocation a = discover_allocation(env, no_command_runner(), with(cpu_machine("t1", 8)));
  EXPECT_EQ(a.total_gpus(), 4);
  EXPECT_EQ(a.nodes[1].gpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(a.time_limit_s, 3600);
  EXPECT_EQ(a.partition, "batch");
}

// ---- LSF ----

TEST(LsfAllocation, McpuHostsAndVisibleDevices) {
  Env env = {{"LSB_JOBID", "77"},
             {"LSB_MCPU_HOSTS", "hostA 4 hostB 4"},
             {"CUDA_VISIBLE_DEVICES", "0,1"},
             {"LSB_QUEUE", "gpuq"},
             {"LSB_PROJECT_NAME", "projx"}};
  const Allocation a = discover_allocation(env, no_command_runner(), with(cpu_machine("hostA", 8)));
  EXPECT_EQ(a.scheduler, SchedulerKind::lsf);
  ASSERT_EQ(a.nodes.size(), 2u);
  EXPECT_EQ(a.nodes[0].gpus, (std::vector<int>{0, 1}));
  EXPECT_EQ(a.nodes[1].gpus.size(), 2u);
  EXPECT_EQ(a.tasks, 8);
  EXPECT_EQ(a.partition, "gpuq");
  EXPECT_EQ(a.account, "projx");
  env["LSB_MCPU_HOSTS"] = "hostA four";
  EXPECT_NE(error_of([&] {
              discover_allocation(env, no_command_runner(), with(cpu_machine("hostA", 8)));
            }).find("LSB_MCPU_HOSTS='hostA four'"),
            std::string::npos);
  env["LSB_MCPU_HOSTS"] = "";  // set but empty: said so, not "not set"
  const Allocation e = discover_allocation(env, no_command_runner(), with(cpu_machine("hostA", 8)));
  EXPECT_NE(std::find(e.notes.begin(), e.notes.end(), "LSB_MCPU_HOSTS is empty: assuming this node only"),
            e.notes.end());
}

}  // namespace
}  // namespace gtrain
