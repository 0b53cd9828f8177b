// test_scheduler_slurm.cpp: the Slurm backend: duration, date and TRES parsers, limits from
// recorded scontrol / sacctmgr output, and discovery from recorded SLURM_* environments.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include <chrono>

#include "launcher/base/program_runner.h"
#include "launcher/launch/launch.h"
#include "launcher/launch/run_launch.h"
#include "launcher/scheduler/allocation.h"
#include "launcher/scheduler/hostlist.h"
#include "launcher/scheduler/scheduler_limits.h"
#include "runtime/core/errors.h"
#include "runtime/core/schedule.h"
#include "tests/support/allocation_fixture.h"
#include "tests/support/test_util.h"

namespace gtrain {
namespace {

using namespace alloc_test;

TEST(SchedulerParsers, DurationsDatesTres) {
  EXPECT_EQ(parse_slurm_duration("30").value, 1800);
  EXPECT_EQ(parse_slurm_duration("30:15").value, 1815);
  EXPECT_EQ(parse_slurm_duration("04:00:00").value, 14400);
  EXPECT_EQ(parse_slurm_duration("2-00:00:00").value, 172800);
  EXPECT_EQ(parse_slurm_duration("1-12").value, 129600);
  EXPECT_EQ(parse_slurm_duration("1-12:30").value, 131400);
  EXPECT_EQ(parse_slurm_duration("UNLIMITED").kind, LimitValue::kUnlimited);
  EXPECT_EQ(parse_slurm_duration("N/A").kind, LimitValue::kUnknown);
  EXPECT_EQ(parse_slurm_duration("").kind, LimitValue::kUnknown);
  EXPECT_EQ(parse_slurm_duration("soon").kind, LimitValue::kUnknown);
  EXPECT_EQ(format_duration(172800), "2-00:00:00");
  EXPECT_EQ(format_duration(14400 + 61), "04:01:01");
  EXPECT_EQ(parse_slurm_datetime("Unknown"), 0);
  EXPECT_EQ(parse_slurm_datetime("2024-05-01T14:30:00") - parse_slurm_datetime("2024-05-01T10:30:00"), 4 * 3600);
  EXPECT_EQ(tres_gpu_count("cpu=16,mem=128G,node=2,billing=16,gres/gpu=2"), 2);
  EXPECT_EQ(tres_gpu_count("gres/gpu:a100=2,gres/gpu:v100=1"), 3);
  EXPECT_EQ(tres_gpu_count("gres/gpu=4,gres/gpu:a100=4"), 4);
  EXPECT_EQ(tres_gpu_count("cpu=4"), -1);
  auto rec = parse_scontrol_record("JobId=1 Command=/a b/c.sh Partition=gpu");
  EXPECT_EQ(rec["Command"], "/a b/c.sh");
  EXPECT_EQ(rec["Partition"], "gpu");
}

TEST(SchedulerLimits, RecordedSlurmOutputsAndWhatBinds) {
  FakeRunner r;
  record_slurm_limits(&r);
  const SchedulerLimits L = read_slurm_limits("4242", "", "", "", "", r.runner());
  EXPECT_EQ(L.user, "alice");
  EXPECT_EQ(L.account, "proj");
  EXPECT_EQ(L.partition, "gpu");
  EXPECT_EQ(L.qos, "normal");
  EXPECT_EQ(L.job_time_limit_s.value, 14400);
  EXPECT_EQ(L.job_gpus, 2);
  EXPECT_EQ(L.job_gpu_type, "a100");
  EXPECT_EQ(L.partition_max_time_s.value, 172800);
  EXPECT_EQ(L.partition_max_nodes.value, 4);
  EXPECT_EQ(L.qos_max_wall_s.value, 172800);
  EXPECT_EQ(L.qos_max_gpus_per_job.value, 2);
  EXPECT_EQ(L.qos_max_gpus_per_user.value, 4);
  EXPECT_EQ(L.qos_grp_gpus.kind, LimitValue::kUnlimited);
  EXPECT_EQ(L.account_grp_gpus.value, 16);
  EXPECT_EQ(L.assoc_grp_gpus.value, 8);
  EXPECT_EQ(L.assoc_max_gpus_per_job.kind, LimitValue::kUnlimited);
  EXPECT_EQ(L.assoc_max_wall_s.value, 12 * 3600);
  EXPECT_TRUE(L.notes.empty()) << L.notes.front();

  std::map<std::string, LimitLine> by;
  for (const auto& l : L.lines(2, 2)) by[l.scope + " " + l.name] = l;
  EXPECT_TRUE(by.at("QOS normal MaxTRESPerJob gres/gpu").binds);  // why alice has 2 GPUs
  EXPECT_NE(by.at("QOS normal MaxTRESPerJob gres/gpu").note.find("at 2"), std::string::npos);
  EXPECT_FALSE(by.at("QOS normal MaxTRESPerUser gres/gpu").binds);
  EXPECT_TRUE(by.at("job TimeLimit").binds);
  EXPECT_EQ(by.at("job TimeLimit").value, "04:00:00");
  EXPECT_FALSE(by.at("partition gpu MaxTime").binds);
  EXPECT_EQ(by.at("partition gpu MaxTime").value, "2-00:00:00");
  EXPECT_FALSE(by.at("partition gpu MaxNodes").binds);
  EXPECT_FALSE(by.at("account proj GrpTRES gres/gpu").binds);
  EXPECT_EQ(by.at("association proj/alice GrpTRES gres/gpu").value, "8");
}

TEST(SchedulerLimits, MissingProgramsLeaveEverythingUnknown) {
  FakeRunner r;  // no scontrol, no sacctmgr
  const SchedulerLimits L = read_slurm_limits("4242", "alice", "proj", "gpu", "normal", r.runner());
  EXPECT_FALSE(L.job_time_limit_s.known());
  EXPECT_EQ(L.partition_max_time_s.kind, LimitValue::kUnknown);
  EXPECT_EQ(L.qos_max_gpus_per_job.kind, LimitValue::kUnknown);
  EXPECT_EQ(L.assoc_grp_gpus.kind, LimitValue::kUnknown);
  EXPECT_GE(L.notes.size(), 3u);
  for (const auto& l : L.lines(4, 1)) {
    EXPECT_EQ(l.value, "unknown") << l.scope << " " << l.name;
    EXPECT_FALSE(l.binds);
  }
}

// ---- Slurm ----

Env slurm_single_node() {
  return {{"SLURM_JOB_ID", "4242"},
          {"SLURM_JOB_NODELIST", "gpu07"},
          {"SLURMD_NODENAME", "gpu07"},
          {"SLURM_JOB_GPUS", "0,1,2,3"},
          {"SLURM_GPUS_ON_NODE", "4"},
          {"SLURM_CPUS_ON_NODE", "32"},
          {"SLURM_JOB_CPUS_PER_NODE", "32"},
          {"SLURM_NTASKS", "1"},
          {"SLURM_TASKS_PER_NODE", "1"},
          {"SLURM_JOB_PARTITION", "gpu"},
          {"SLURM_JOB_ACCOUNT", "proj"},
          {"SLURM_JOB_QOS", "normal"},
          {"SLURM_JOB_USER", "alice"},
          {"SLURM_JOB_START_TIME", "1714559400"},
          {"SLURM_JOB_END_TIME", "1714573800"},
          {"CUDA_VISIBLE_DEVICES", "0,1,2,3"},
          {"HOME", "/home/alice"}};
}

TEST(SlurmAllocation, SingleNodeFromVariables) {
  FakeRunner r;
  const Allocation a = discover_allocation(slurm_single_node(), r.runner(), with(cuda_machine("gpu07", 4), false));
  EXPECT_EQ(a.scheduler, SchedulerKind::slurm);
  EXPECT_EQ(a.job_id, "4242");
  ASSERT_EQ(a.nodes.size(), 1u);
  EXPECT_EQ(a.nodes[0].host, "gpu07");
  EXPECT_EQ(a.nodes[0].gpus, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(a.nodes[0].cpus, 32);
  EXPECT_EQ(a.nodes[0].tasks, 1);
  EXPECT_EQ(a.total_gpus(), 4);
  EXPECT_EQ(a.world_size(), 4);
  EXPECT_EQ(a.end_time_unix, 1714573800);
  EXPECT_EQ(a.time_limit_s, 4 * 3600);
  EXPECT_EQ(a.partition, "gpu");
  EXPECT_EQ(a.account, "proj");
  EXPECT_EQ(a.gpu_model, "NVIDIA A100-SXM4-80GB");
  EXPECT_EQ(a.gpu_memory_bytes, 85899345920LL);
  EXPECT_EQ(a.nvlink_links, 12);
  EXPECT_EQ(a.nvlink_peers, 3);
  EXPECT_TRUE(r.calls.empty()) << "end time came from SLURM_JOB_END_TIME and limits were off";
}

// Conflicting GPU variables: the listed indices win, and a note says so; a bad end time is named.
TEST(SlurmAllocation, ConflictingOrBadVariablesAreNoted) {
  Env env = slurm_single_node();
  env["SLURM_JOB_GPUS"] = "0,1";
  FakeRunner r;
  const Allocation a = discover_allocation(env, r.runner(), with(cuda_machine("gpu07", 4), false));
  EXPECT_EQ(a.nodes[0].gpus, (std::vector<int>{0, 1}));
  bool noted = false;
  for (const auto& n : a.notes) {
    noted |= n == "SLURM_GPUS_ON_NODE=4 but SLURM_JOB_GPUS lists 2 GPU(s) (0,1): using the 2 listed";
  }
  EXPECT_TRUE(noted);
  // A SLURM_JOB_END_TIME that is not a unix time is named, not taken for a missing one.
  env = slurm_single_node();
  env["SLURM_JOB_END_TIME"] = "abc";
  const Allocation c = discover_allocation(env, r.runner(), with(cuda_machine("gpu07", 4), false));
  EXPECT_EQ(c.end_time_unix, 0);
  EXPECT_NE(std::find(c.notes.begin(), c.notes.end(), "SLURM_JOB_END_TIME='abc' is not a unix time: ignored"),
            c.notes.end());
  // SLURM_NNODES disagreeing with the node list is noted too.
  env = slurm_single_node();
  env["SLURM_NNODES"] = "3";
  const Allocation d = discover_allocation(env, r.runner(), with(cuda_machine("gpu07", 4), false));
  EXPECT_NE(std::find(d.notes.begin(), d.notes.end(),
                      "SLURM_NNODES=3 but SLURM_JOB_NODELIST lists 1 node(s): using the 1 listed"),
            d.notes.end());
  // Each variable read is listed once, however often it was read.
  std::set<std::string> once(c.sources.begin(), c.sources.end());
  EXPECT_EQ(once.size(), c.sources.size());
  EXPECT_EQ(once.count("SLURM_GPUS_ON_NODE=4"), 1u);
  // Agreeing variables: no such note.
  const Allocation b = discover_allocation(slurm_single_node(), r.runner(), with(cuda_machine("gpu07", 4), false));
  for (const auto& n : b.notes) EXPECT_EQ(n.find("SLURM_GPUS_ON_NODE="), std::string::npos) << n;
}

TEST(SlurmAllocation, MultiNodeWithStepGpusSqueueAndLimits) {
  Env env = {{"SLURM_JOB_ID", "4242"},          {"SLURM_JOB_NODELIST", "gpu[01-02]"},
             {"SLURMD_NODENAME", "gpu01"},      {"SLURM_GPUS_PER_NODE", "a100:4"},
             {"SLURM_STEP_GPUS", "4,5,6,7"},    {"SLURM_JOB_CPUS_PER_NODE", "64(x2)"},
             {"SLURM_TASKS_PER_NODE", "1(x2)"}, {"SLURM_NTASKS", "2"},
             {"SLURM_JOB_PARTITION", "gpu"},    {"SLURM_JOB_ACCOUNT", "proj"},
             {"SLURM_JOB_QOS", "normal"},       {"SLURM_JOB_USER", "alice"}};
  FakeRunner r;
  record_slurm_limits(&r);
  r.outputs["squeue -h -j 4242 -o %e"] = "2024-05-01T14:30:00\n";
  const Allocation a = discover_allocation(env, r.runner(), with(cpu_machine("gpu01", 64)));
  ASSERT_EQ(a.nodes.size(), 2u);
  EXPECT_EQ(a.nodes[0].host, "gpu01");
  EXPECT_EQ(a.nodes[0].gpus, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(a.nodes[1].host, "gpu02");
  EXPECT_EQ(a.nodes[1].gpus, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(a.nodes[1].cpus, 64);
  EXPECT_EQ(a.nodes[1].tasks, 1);
  EXPECT_EQ(a.total_gpus(), 8);
  EXPECT_EQ(a.gpus_per_node(), 4);
  EXPECT_EQ(a.world_size(), 8);
  EXPECT_FALSE(a.cuda_build);
  EXPECT_NE(a.world_size_reason().find("one CPU rank per granted GPU"), std::string::npos);
  EXPECT_EQ(a.gpu_model, "a100");
  EXPECT_EQ(a.end_time_unix, parse_slurm_datetime("2024-05-01T14:30:00"));
  EXPECT_EQ(a.time_limit_s, 14400);
  EXPECT_TRUE(a.limits_read);
  EXPECT_EQ(a.limits.qos_max_gpus_per_job.value, 2);
  for (const auto& n : a.notes) EXPECT_EQ(n.find("assumed"), std::string::npos) << n;  // per-node count was given
  EXPECT_NE(std::find(r.calls.begin(), r.calls.end(), "squeue -h -j 4242 -o %e"), r.calls.end());
  // scontrol's 2 GPUs disagree with the 8 the environment describes: said, not hidden.
  bool noted = false;
  for (const auto& n : a.notes) noted |= n.find("scontrol reports 2 GPUs") != std::string::npos;
  EXPECT_TRUE(noted);
}

// gtrain run reads the allocation without limits, but a Slurm that exports no SLURM_JOB_END_TIME
// (before 23.02) still gives the job's end time through squeue, and the stage's deadline is the
// nearest of --time-limit, that end time and the quota window's close. (The end time was not asked
// for, so the stage logs named the window's close even where the job ended first.)
TEST(SlurmAllocation, RunFindsTheJobsEndTimeAndTheNearestDeadlineWins) {
  Env env = {{"SLURM_JOB_ID", "4242"}, {"SLURM_JOB_NODELIST", "gpu01"}, {"SLURMD_NODENAME", "gpu01"}};
  std::tm tm{};
  tm.tm_year = 126, tm.tm_mon = 10, tm.tm_mday = 30, tm.tm_hour = 12, tm.tm_isdst = -1;
  const double noon = static_cast<double>(std::mktime(&tm));
  FakeRunner r;
  r.outputs["squeue -h -j 4242 -o %e"] = "2026-11-30T14:00:00\n";
  DiscoveryOptions o = with(cpu_machine("gpu01", 4), false);
  o.read_end_time = true;
  Allocation a = discover_allocation(env, r.runner(), o);
  EXPECT_EQ(a.end_time_unix, static_cast<int64_t>(noon) + 2 * 3600);
  EXPECT_EQ(r.calls, (std::vector<std::string>{"squeue -h -j 4242 -o %e"})) << "the end time only, no limits";
  JobConfig cfg;
  cfg.schedule.window = {WindowConfig{"daily", "08:00-20:00", 4}};
  RunOptions run;
  Deadline d = stage_deadline(cfg, run, a, noon);
  EXPECT_EQ(d.unix_time, noon + 2 * 3600);
  EXPECT_EQ(d.source, "slurm end time");
  a.end_time_unix = static_cast<int64_t>(noon) + 10 * 3600;  // 22:00: the window closes first
  d = stage_deadline(cfg, run, a, noon);
  EXPECT_EQ(d.unix_time, noon + 8 * 3600);
  EXPECT_EQ(d.source, "quota window");
  run.time_limit = "1h";
  d = stage_deadline(cfg, run, a, noon);
  EXPECT_EQ(d.unix_time, noon + 3600);
  EXPECT_EQ(d.source, "--time-limit");
  // Without read_end_time (as before), squeue is not asked.
  FakeRunner quiet;
  quiet.outputs = r.outputs;
  EXPECT_EQ(discover_allocation(env, quiet.runner(), with(cpu_machine("gpu01", 4), false)).end_time_unix, 0);
  EXPECT_TRUE(quiet.calls.empty());
}

TEST(SlurmAllocation, Slurm2205GpusOnNodeOnlyAssumesOtherNodes) {
  Env env = {{"SLURM_JOB_ID", "7"},     {"SLURM_JOB_NODELIST", "n[1-3]"},
             {"SLURMD_NODENAME", "n2"}, {"SLURM_GPUS_ON_NODE", "2"},
             {"SLURM_NTASKS", "3"},     {"SLURM_JOB_CPUS_PER_NODE", "2(x2),1"}};
  const Allocation a = discover_allocation(env, no_command_runner(), with(cpu_machine("n2", 8)));
  ASSERT_EQ(a.nodes.size(), 3u);
  EXPECT_EQ(a.total_gpus(), 6);
  EXPECT_EQ(a.nodes[2].cpus, 1);
  bool assumed = false, end_unknown = false;
  for (const auto& n : a.notes) {
    assumed |= n.find("assumed equal to this node's (2)") != std::string::npos;
    end_unknown |= n.find("end time unknown") != std::string::npos;
  }
  EXPECT_TRUE(assumed);
  EXPECT_TRUE(end_unknown);
  EXPECT_EQ(a.end_time_unix, 0);
  EXPECT_FALSE(a.limits.job_time_limit_s.known());
}

TEST(SlurmAllocation, CpuOnlyJobRunsOneRankPerTask) {
  Env env = {{"SLURM_JOB_ID", "8"},
             {"SLURM_JOB_NODELIST", "c[1-2]"},
             {"SLURM_NTASKS", "4"},
             {"SLURM_TASKS_PER_NODE", "2(x2)"},
             {"SLURMD_NODENAME", "c1"}};
  const Allocation a = discover_allocation(env, no_command_runner(), with(cpu_machine("c1", 16), false));
  EXPECT_EQ(a.total_gpus(), 0);
  EXPECT_EQ(a.world_size(), 4);
  EXPECT_NE(a.world_size_reason().find("one per scheduler task"), std::string::npos);
  DiscoveryOptions o = with(cpu_machine("c1", 16), false);
  o.ranks = 3;
  EXPECT_EQ(discover_allocation(env, no_command_runner(), o).world_size(), 3);
}

TEST(SlurmAllocation, GresOnlyFallsBackToCudaVisibleDevices) {
  Env env = {{"SLURM_JOB_ID", "9"}, {"SLURM_JOB_NODELIST", "g1"}, {"CUDA_VISIBLE_DEVICES", "0,1"}};
  const Allocation a = discover_allocation(env, no_command_runner(), with(cpu_machine("g1", 8), false));
  EXPECT_EQ(a.total_gpus(), 2);
}

TEST(SlurmAllocation, MalformedVariablesAreOneLineErrors) {
  Env env = slurm_single_node();
  env["SLURM_JOB_NODELIST"] = "gpu[01-";
  std::string e = error_of([&] { discover_allocation(env, no_command_runner(), with(cpu_machine("gpu07", 4))); });
  EXPECT_NE(e.find("SLURM_JOB_NODELIST='gpu[01-'"), std::string::npos) << e;
  env = slurm_single_node();
  env["SLURM_JOB_GPUS"] = "0,one";
  e = error_of([&] { discover_allocation(env, no_command_runner(), with(cpu_machine("gpu07", 4))); });
  EXPECT_NE(e.find("SLURM_JOB_GPUS"), std::string::npos) << e;
  env = slurm_single_node();
  env["SLURM_NTASKS"] = "many";
  e = error_of([&] { discover_allocation(env, no_command_runner(), with(cpu_machine("gpu07", 4))); });
  EXPECT_NE(e.find("SLURM_NTASKS='many': expected a whole number"), std::string::npos) << e;
  env = slurm_single_node();
  env.erase("SLURM_JOB_GPUS");
  env.erase("SLURM_GPUS_ON_NODE");
  env.erase("CUDA_VISIBLE_DEVICES");
  env["SLURM_GPUS_PER_NODE"] = "a100:four";
  e = error_of([&] { discover_allocation(env, no_command_runner(), with(cpu_machine("gpu07", 4))); });
  EXPECT_NE(e.find("SLURM_GPUS_PER_NODE"), std::string::npos) << e;
}

// SLURM_TASKS_PER_NODE that does not match the node list is named in a note, not dropped silently.
TEST(SlurmAllocation, TasksPerNodeMismatchIsNoted) {
  Env env = {{"SLURM_JOB_ID", "9"},
             {"SLURM_JOB_NODELIST", "c[1-3]"},
             {"SLURMD_NODENAME", "c1"},
             {"SLURM_TASKS_PER_NODE", "2(x9)"}};
  FakeRunner r;
  DiscoveryOptions o = with(cpu_machine("c1", 4));
  o.read_limits = false;
  const Allocation a = discover_allocation(env, r.runner(), o);
  ASSERT_EQ(a.nodes.size(), 3u);
  bool found = false;
  for (const auto& n : a.notes)
    found |= n == "SLURM_TASKS_PER_NODE '2(x9)' lists 9 node(s) but the job has 3: tasks per node ignored";
  EXPECT_TRUE(found) << ::testing::PrintToString(a.notes);
}

}  // namespace
}  // namespace gtrain
