// test_allocation.cpp: hostlists, rank environments, CUDA_VISIBLE_DEVICES and the bare machine
// (the cuda_env and local backends), and the command runner. The schedulers' own discovery:
// test_scheduler_slurm.cpp, test_scheduler_pbs_lsf.cpp.
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
  EXPECT_EQ(discover_allocation({}, no_command_runner(), three).world_size_reason(), "3 ranks as configured (--ranks)");
  three.ranks = 1;  // one rank, not "1 ranks"
  EXPECT_EQ(discover_allocation({}, no_command_runner(), three).world_size_reason(), "1 rank as configured (--ranks)");
  EXPECT_NE(a.world_size_reason().find("no GPU granted: 1 CPU rank, "), std::string::npos) << a.world_size_reason();
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
