// test_allocation.cpp: hostlists; Slurm, PBS, LSF and CUDA_VISIBLE_DEVICES discovery from recorded
// environments; limits from recorded scontrol / sacctmgr / qstat output; the command runner.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include <chrono>

#include "launcher/allocation.h"
#include "launcher/hostlist.h"
#include "launcher/launch.h"
#include "launcher/program_runner.h"
#include "launcher/scheduler_limits.h"
#include "runtime/common/errors.h"
#include "tests/test_util.h"

namespace gtrain {
namespace {

using Env = std::map<std::string, std::string>;
using Strings = std::vector<std::string>;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// ---- hostlists ----

TEST(Hostlist, ExpandsRangesListsPaddingAndProducts) {
  EXPECT_EQ(expand_hostlist("gpu[01-03,07],cpu5", "X"), (Strings{"gpu01", "gpu02", "gpu03", "gpu07", "cpu5"}));
  EXPECT_EQ(expand_hostlist("a[1-2]-ib,b3", "X"), (Strings{"a1-ib", "a2-ib", "b3"}));
  EXPECT_EQ(expand_hostlist("n[8-11]", "X"), (Strings{"n8", "n9", "n10", "n11"}));
  EXPECT_EQ(expand_hostlist("n[08-11]", "X"), (Strings{"n08", "n09", "n10", "n11"}));
  EXPECT_EQ(expand_hostlist("node[001-002,010]", "X"), (Strings{"node001", "node002", "node010"}));
  EXPECT_EQ(expand_hostlist("rack[1-2]-n[1-2]", "X"), (Strings{"rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"}));
  EXPECT_EQ(expand_hostlist("login1", "X"), (Strings{"login1"}));
  EXPECT_EQ(expand_hostlist("x[5]", "X"), (Strings{"x5"}));
  EXPECT_EQ(expand_hostlist("gpu01.cluster.local,gpu_b", "X"), (Strings{"gpu01.cluster.local", "gpu_b"}));
  EXPECT_EQ(expand_hostlist("a,b[2-3],c[9-10]d", "X"), (Strings{"a", "b2", "b3", "c9d", "c10d"}));
  EXPECT_TRUE(expand_hostlist("", "X").empty());
  EXPECT_EQ(expand_hostlist("big[0001-1000]", "X").size(), 1000u);
  EXPECT_EQ(expand_hostlist("big[0001-1000]", "X").back(), "big1000");
}

TEST(Hostlist, MalformedListsNameTheVariable) {
  for (const std::string bad : {"gpu[01-", "gpu]", "gpu[3-1]", "gpu[a-b]", "gpu[]", "a,,b", "gpu[1-2,]", "a b",
                                "gpu[[1]]", "gpu[1-2", ",a", "gpu[1-99999999]"}) {
    const std::string e = error_of([&] { expand_hostlist(bad, "SLURM_JOB_NODELIST"); });
    EXPECT_NE(e.find("SLURM_JOB_NODELIST='" + bad + "'"), std::string::npos) << bad << " -> " << e;
    EXPECT_NE(e.find("expected a Slurm hostlist"), std::string::npos) << e;
  }
  // A host named twice would be counted twice (3 GPUs granted for 2 nodes).
  EXPECT_NE(error_of([] {
              expand_hostlist("node[01-02],node01", "SLURM_JOB_NODELIST");
            }).find("SLURM_JOB_NODELIST='node[01-02],node01': host node01 appears more than once"),
            std::string::npos);
}

TEST(Hostlist, SameHostComparesShortNames) {
  EXPECT_TRUE(same_host("node1", "node1"));
  EXPECT_TRUE(same_host("node1", "node1.cluster.example"));
  EXPECT_TRUE(same_host("node1.a", "node1.b"));
  EXPECT_FALSE(same_host("node1", "node10"));
  EXPECT_FALSE(same_host("node1.cluster", "node2.cluster"));
}

TEST(Hostlist, CompressRoundTrips) {
  for (const std::string s :
       {"gpu[01-03,07],cpu5", "a1-ib,a2-ib,b3", "n[8-11]", "node[001-002,010]", "login1", "gpu[01-02],cpu[1-3]"}) {
    const auto hosts = expand_hostlist(s, "X");
    EXPECT_EQ(expand_hostlist(compress_hostlist(hosts), "X"), hosts) << s << " -> " << compress_hostlist(hosts);
  }
  EXPECT_EQ(compress_hostlist({"gpu01", "gpu02", "gpu03", "gpu07", "cpu5"}), "gpu[01-03,07],cpu5");
}

TEST(Hostlist, CountLists) {
  EXPECT_EQ(expand_count_list("2(x2),1", "X"), (std::vector<int>{2, 2, 1}));
  EXPECT_EQ(expand_count_list("72(x3)", "X"), (std::vector<int>{72, 72, 72}));
  EXPECT_EQ(expand_count_list("4", "X"), (std::vector<int>{4}));
  for (const std::string bad : {"", "2(x)", "x", "2(x2", "2(y2)", "2,,1", "2(x0)"}) {
    EXPECT_NE(error_of([&] { expand_count_list(bad, "SLURM_JOB_CPUS_PER_NODE"); }).find("SLURM_JOB_CPUS_PER_NODE"),
              std::string::npos)
        << bad;
  }
}

// ---- recorded scheduler output ----

// A runner that replays recorded outputs by command line and records what was asked.
struct FakeRunner {
  std::map<std::string, std::string> outputs;
  std::vector<std::string> calls;
  CommandRunner runner() {
    return [this](const std::vector<std::string>& argv) -> std::optional<std::string> {
      std::string key;
      for (const auto& a : argv) key += (key.empty() ? "" : " ") + a;
      calls.push_back(key);
      auto it = outputs.find(key);
      if (it == outputs.end()) return std::nullopt;
      return it->second;
    };
  }
};

HardwareInfo cpu_machine(const std::string& host, int cores) {
  HardwareInfo hw;
  hw.hostname = host;
  hw.cores = cores;
  hw.memory_bytes = 8LL << 30;
  hw.cuda_build = false;
  return hw;
}

HardwareInfo cuda_machine(const std::string& host, int gpus) {
  HardwareInfo hw = cpu_machine(host, 64);
  hw.cuda_build = true;
  for (int i = 0; i < gpus; ++i) {
    hw.gpus.push_back({i, "NVIDIA A100-SXM4-80GB", "GPU-" + std::to_string(1000 + i), 85899345920LL, 12, gpus - 1});
  }
  return hw;
}

DiscoveryOptions with(const HardwareInfo& hw, bool limits = true) {
  DiscoveryOptions o;
  o.hardware = hw;
  o.read_limits = limits;
  return o;
}

const char* kScontrolJob =
    "JobId=4242 JobName=train UserId=alice(1001) GroupId=alice(1001) MCS_label=N/A Priority=4294901 Nice=0 "
    "Account=proj QOS=normal JobState=RUNNING Reason=None Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 "
    "Reboot=0 ExitCode=0:0 RunTime=00:10:02 TimeLimit=04:00:00 TimeMin=N/A SubmitTime=2024-05-01T10:19:00 "
    "EligibleTime=2024-05-01T10:19:00 AccrueTime=2024-05-01T10:19:00 StartTime=2024-05-01T10:30:00 "
    "EndTime=2024-05-01T14:30:00 Deadline=N/A SuspendTime=None SecsPreSuspend=0 LastSchedEval=2024-05-01T10:30:00 "
    "Scheduler=Main Partition=gpu AllocNode:Sid=login01:12345 ReqNodeList=(null) ExcNodeList=(null) "
    "NodeList=gpu[01-02] BatchHost=gpu01 NumNodes=2 NumCPUs=16 NumTasks=2 CPUs/Task=8 ReqB:S:C:T=0:0:*:* "
    "TRES=cpu=16,mem=128G,node=2,billing=16,gres/gpu=2 Socks/Node=* NtasksPerN:B:S:C=1:0:*:* CoreSpec=* "
    "MinCPUsNode=8 MinMemoryNode=64G MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=OK "
    "Contiguous=0 Licenses=(null) Network=(null) Command=/home/alice/train.sh WorkDir=/home/alice "
    "StdErr=/home/alice/slurm-4242.out StdIn=/dev/null StdOut=/home/alice/slurm-4242.out Power= "
    "TresPerNode=gres/gpu:a100:1\n";
const char* kScontrolPartition =
    "PartitionName=gpu AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=NO QoS=N/A "
    "DefaultTime=01:00:00 DisableRootJobs=NO ExclusiveUser=NO GraceTime=0 Hidden=NO MaxNodes=4 MaxTime=2-00:00:00 "
    "MinNodes=0 LLN=NO MaxCPUsPerNode=UNLIMITED Nodes=gpu[01-16] PriorityJobFactor=1 PriorityTier=1 RootOnly=NO "
    "ReqResv=NO OverSubscribe=NO OverTimeLimit=NONE PreemptMode=OFF State=UP TotalCPUs=1024 TotalNodes=16 "
    "SelectTypeParameters=NONE JobDefaults=(null) DefMemPerCPU=4000 MaxMemPerNode=UNLIMITED "
    "TRES=cpu=1024,mem=8000G,node=16,billing=1024,gres/gpu=64\n";
const char* kSacctmgrQos = "normal|2-00:00:00|gres/gpu=2|gres/gpu=4|\n";
const char* kSacctmgrAssoc =
    "proj|||gres/gpu=16||\n"
    "proj|alice||gres/gpu=8||12:00:00\n"
    "proj|bob|||cpu=64|\n";

void record_slurm_limits(FakeRunner* r) {
  r->outputs["scontrol show job -o 4242"] = kScontrolJob;
  r->outputs["scontrol show partition -o gpu"] = kScontrolPartition;
  r->outputs["sacctmgr -P -n show qos where name=normal format=Name,MaxWall,MaxTRESPerJob,MaxTRESPerUser,GrpTRES"] =
      kSacctmgrQos;
  r->outputs["sacctmgr -P -n show assoc where account=proj format=Account,User,Partition,GrpTRES,MaxTRES,MaxWall"] =
      kSacctmgrAssoc;
}

// Rank detection: mpirun's variables, or one task of a several-task srun step; an srun task without
// PMIx is refused before MPI_Init would abort it, with the flag that fixes it.
TEST(RankEnvironment, MpirunSrunAndTheWireUp) {
  auto m = detect_rank_environment({{"OMPI_COMM_WORLD_SIZE", "4"},
                                    {"OMPI_COMM_WORLD_RANK", "2"},
                                    {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                                    {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  EXPECT_TRUE(m.launched);
  EXPECT_EQ(m.launcher, "mpirun");
  EXPECT_EQ(m.rank, 2);
  EXPECT_NO_THROW(require_mpi_wireup(m));
  std::map<std::string, std::string> srun = {{"SLURM_STEP_ID", "0"},
                                             {"SLURM_PROCID", "1"},
                                             {"SLURM_NTASKS", "2"},
                                             {"SLURM_LOCALID", "1"},
                                             {"SLURM_STEP_NUM_TASKS", "2"}};
  auto bare = detect_rank_environment(srun);
  EXPECT_TRUE(bare.launched);
  EXPECT_EQ(bare.launcher, "srun");
  EXPECT_EQ(bare.rank, 1);
  EXPECT_FALSE(bare.pmix);
  try {
    require_mpi_wireup(bare);
    ADD_FAILURE() << "an srun task without PMIx was accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "started as task 1 of 2 by srun without PMIx, which Open MPI ranks need to find each other: use srun "
              "--mpi=pmix");
    EXPECT_NE(e.hint().find("MpiDefault=none"), std::string::npos) << e.hint();
    EXPECT_EQ(e.exit_code(), 2);
  }
  srun["PMIX_RANK"] = "1";
  auto wired = detect_rank_environment(srun);
  EXPECT_TRUE(wired.pmix);
  EXPECT_NO_THROW(require_mpi_wireup(wired));
  // A batch script's shell (no step) and a one-task step are not ranks.
  EXPECT_FALSE(detect_rank_environment({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}}).launched);
  EXPECT_FALSE(
      detect_rank_environment({{"SLURM_STEP_ID", "0"}, {"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}).launched);
  EXPECT_NO_THROW(require_mpi_wireup(detect_rank_environment({})));
}

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

// ---- CUDA_VISIBLE_DEVICES and the bare machine ----

TEST(VisibleDevices, IndicesUuidsEmptyNoneAll) {
  auto d = parse_visible_devices("2,3", "CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(d.kind, VisibleDevices::kList);
  EXPECT_EQ(d.indices, (std::vector<int>{2, 3}));
  d = parse_visible_devices("GPU-8f6c2a1e-0000-1111-2222-333344445555,GPU-1a2b", "CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(d.indices, (std::vector<int>{0, 1}));
  EXPECT_EQ(d.uuids.size(), 2u);
  d = parse_visible_devices("MIG-abcd", "CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(d.uuids.size(), 1u);
  for (const std::string none : {"", "none", "void", "NoDevFiles", "-1"}) {
    EXPECT_EQ(parse_visible_devices(none, "X").kind, VisibleDevices::kNone) << none;
  }
  EXPECT_EQ(parse_visible_devices("all", "X").kind, VisibleDevices::kAll);
  EXPECT_NE(error_of([] { parse_visible_devices("0,x", "CUDA_VISIBLE_DEVICES"); }).find("CUDA_VISIBLE_DEVICES='0,x'"),
            std::string::npos);
  // One GPU twice would put two ranks on it (NCCL refuses that): named, never granted.
  EXPECT_EQ(error_of([] { parse_visible_devices("1,0,1", "CUDA_VISIBLE_DEVICES"); }),
            "CUDA_VISIBLE_DEVICES='1,0,1': GPU 1 is listed twice");
  EXPECT_EQ(error_of([] { parse_visible_devices("GPU-a,GPU-b,GPU-a", "X"); }),
            "X='GPU-a,GPU-b,GPU-a': GPU GPU-a is listed twice");
  EXPECT_EQ(error_of([] { parse_index_list("0-2,2", "SLURM_JOB_GPUS"); }),
            "SLURM_JOB_GPUS='0-2,2': GPU 2 is listed twice");
  EXPECT_NE(error_of([] { parse_visible_devices("99999999999", "X"); }).find("expected GPU indices"),
            std::string::npos);
  EXPECT_NE(error_of([] { parse_index_list("0-99999999999", "X"); }).find("expected GPU indices"), std::string::npos);
}

TEST(CudaEnvAllocation, FromVisibleDevicesWithoutScheduler) {
  Allocation a =
      discover_allocation({{"CUDA_VISIBLE_DEVICES", "2,3"}}, no_command_runner(), with(cuda_machine("w", 4)));
  EXPECT_EQ(a.scheduler, SchedulerKind::cuda_env);
  EXPECT_EQ(a.nodes[0].gpus, (std::vector<int>{2, 3}));
  EXPECT_EQ(a.world_size(), 2);
  a = discover_allocation({{"CUDA_VISIBLE_DEVICES", "GPU-1002"}}, no_command_runner(), with(cuda_machine("w", 4)));
  EXPECT_EQ(a.total_gpus(), 1);
  EXPECT_EQ(a.gpu_uuids, (std::vector<std::string>{"GPU-1002"}));
  a = discover_allocation({{"CUDA_VISIBLE_DEVICES", ""}}, no_command_runner(), with(cuda_machine("w", 4)));
  EXPECT_EQ(a.total_gpus(), 0);
  EXPECT_EQ(a.world_size(), 1);  // no GPU, no scheduler: one CPU rank using every core
  a = discover_allocation({{"NVIDIA_VISIBLE_DEVICES", "all"}}, no_command_runner(), with(cuda_machine("w", 4)));
  EXPECT_EQ(a.total_gpus(), 4);
  a = discover_allocation({{"NVIDIA_VISIBLE_DEVICES", "none"}}, no_command_runner(), with(cuda_machine("w", 4)));
  EXPECT_EQ(a.total_gpus(), 0);
}

TEST(LocalAllocation, HardwareDecides) {
  Allocation a = discover_allocation({}, no_command_runner(), with(cuda_machine("box", 2)));
  EXPECT_EQ(a.scheduler, SchedulerKind::local);
  EXPECT_EQ(a.total_gpus(), 2);
  EXPECT_EQ(a.gpu_model, "NVIDIA A100-SXM4-80GB");
  EXPECT_TRUE(a.cuda_build);
  a = discover_allocation({}, no_command_runner(), with(cpu_machine("box", 6)));
  EXPECT_EQ(a.total_gpus(), 0);
  EXPECT_EQ(a.world_size(), 1);
  EXPECT_NE(a.world_size_reason().find("one rank using every core"), std::string::npos);
  EXPECT_EQ(a.nodes[0].cpus, 6);
  DiscoveryOptions three = with(cpu_machine("box", 6));
  three.ranks = 3;  // --ranks
  EXPECT_EQ(discover_allocation({}, no_command_runner(), three).world_size(), 3);
  // The real machine: never throws, reports something sensible.
  const Allocation real = discover_allocation({}, no_command_runner());
  EXPECT_GE(real.world_size(), 1);
  EXPECT_EQ(real.nodes.size(), 1u);
}

// ---- the real command runner ----

TEST(ProgramRunner, OutputMissingFailingAndTimeouts) {
  EXPECT_EQ(run_program({"sh", "-c", "echo hi; echo there"}), std::optional<std::string>("hi\nthere\n"));
  EXPECT_FALSE(run_program({"gtrain-no-such-program-xyz"}).has_value());
  EXPECT_FALSE(run_program({"sh", "-c", "echo partial; exit 3"}).has_value());
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(run_program({"sleep", "10"}, 0.3).has_value());
  // Closes stdout and lingers: still bounded by the timeout.
  EXPECT_FALSE(run_program({"sh", "-c", "exec >&-; sleep 10"}, 0.3).has_value());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 3.0);
}

}  // namespace
}  // namespace gtrain
