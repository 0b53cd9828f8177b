// test_device_sharing.cpp: which ranks share a GPU, the staging rule (NCCL, or MPI through host
// memory, and the line that says why), GTRAIN_STAGED_COMM, and a StagedCommunicator's copies on
// one process (its collectives over several ranks: test_comm_mpi.cpp, run --staged).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "runtime/comm/device_sharing.h"
#include "runtime/comm/staged_communicator.h"
#include "runtime/core/errors.h"

namespace gtrain {
namespace {

std::string staging_error(const DeviceSharing& s, StagingMode mode, bool nccl, int world) {
  try {
    choose_staging(s, mode, true, nccl, world);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(DeviceSharing, RanksOnOneBusIdOfOneHostShare) {
  // Four ranks on one H100 of node1, two on node2's two GPUs; node3's rank reports the same bus id
  // as node1's GPU (another machine's card): not shared.
  const auto s =
      find_shared_devices({"node1/0000:65:00.0", "node1/0000:65:00.0", "node2/0000:17:00.0", "node1/0000:65:00.0",
                           "node1/0000:65:00.0", "node2/0000:b3:00.0", "node3/0000:65:00.0"});
  ASSERT_EQ(s.groups.size(), 1u);
  EXPECT_EQ(s.groups[0], (std::vector<int>{0, 1, 3, 4}));
  EXPECT_EQ(s.describe(), "ranks 0, 1, 3, 4 share GPU 0000:65:00.0 on node1");

  const auto two = find_shared_devices({"a/0", "a/0", "a/0", "b/1", "b/1", ""});
  ASSERT_TRUE(two.any());
  EXPECT_EQ(two.describe(), "ranks 0-2 share GPU 0 on a; ranks 3, 4 share GPU 1 on b");
  EXPECT_EQ(two.most_on_one(), 3);  // the planner splits a GPU among the most ranks any carries
  EXPECT_EQ(s.most_on_one(), 4);
  // Ranks without a device ("") never share; one rank per GPU: none.
  EXPECT_FALSE(find_shared_devices({"", "", ""}).any());
  EXPECT_FALSE(find_shared_devices({"a/0", "a/1", "b/0", "b/1"}).any());
  EXPECT_EQ(find_shared_devices({"a/0", "a/1", "b/0", "b/1"}).most_on_one(), 1);
  EXPECT_EQ(find_shared_devices({}).describe(), "");
}

TEST(DeviceSharing, StagingOnlyWhereNcclCannotServe) {
  const auto shared = find_shared_devices({"h/0", "h/0", "h/0"});
  const DeviceSharing apart;
  // Ranks on one GPU: staged, with the line saying who shares what and why.
  auto c = choose_staging(shared, StagingMode::automatic, /*cuda=*/true, /*have_nccl=*/true, 3);
  EXPECT_TRUE(c.staged);
  EXPECT_FALSE(c.stage_cpu);
  EXPECT_EQ(c.ranks_per_device, 3);
  EXPECT_EQ(c.note,
            "ranks 0-2 share GPU 0 on h: NCCL refuses two ranks on one device, so GPU tensors go over MPI through "
            "host memory (slower than NCCL)");
  // One GPU each: NCCL, nothing to say; without NCCL: staged, saying so.
  c = choose_staging(apart, StagingMode::automatic, true, true, 4);
  EXPECT_FALSE(c.staged);
  EXPECT_EQ(c.ranks_per_device, 1);
  EXPECT_EQ(c.note, "");
  c = choose_staging(apart, StagingMode::automatic, true, false, 4);
  EXPECT_TRUE(c.staged);
  EXPECT_NE(c.note.find("built without NCCL"), std::string::npos);
  // GTRAIN_STAGED_COMM=1 stages even apart; one rank or CPU ranks have nothing to stage.
  EXPECT_TRUE(choose_staging(apart, StagingMode::always, true, true, 2).staged);
  EXPECT_FALSE(choose_staging(apart, StagingMode::always, true, true, 1).staged);
  EXPECT_FALSE(choose_staging(shared, StagingMode::always, /*cuda=*/false, true, 3).staged);
  EXPECT_EQ(choose_staging(shared, StagingMode::always, /*cuda=*/false, true, 3).ranks_per_device, 1);
  // "all": every tensor, CPU ranks too (the staging path checked without a GPU).
  c = choose_staging(apart, StagingMode::all_tensors, false, false, 2);
  EXPECT_TRUE(c.staged && c.stage_cpu);
  // GTRAIN_STAGED_COMM=0 where NCCL cannot serve: an error naming the ranks and the variable.
  EXPECT_NE(staging_error(shared, StagingMode::never, true, 3)
                .find("ranks 0-2 share GPU 0 on h, NCCL refuses two ranks on one device and GTRAIN_STAGED_COMM=0"),
            std::string::npos);
  EXPECT_NE(staging_error(apart, StagingMode::never, false, 2).find("built without it and GTRAIN_STAGED_COMM=0"),
            std::string::npos);
  EXPECT_EQ(staging_error(apart, StagingMode::never, true, 2), "");
}

TEST(DeviceSharing, EnvironmentSwitch) {
  EXPECT_EQ(staging_mode({}), StagingMode::automatic);
  EXPECT_EQ(staging_mode({{"GTRAIN_STAGED_COMM", "auto"}}), StagingMode::automatic);
  EXPECT_EQ(staging_mode({{"GTRAIN_STAGED_COMM", "1"}}), StagingMode::always);
  EXPECT_EQ(staging_mode({{"GTRAIN_STAGED_COMM", "0"}}), StagingMode::never);
  EXPECT_EQ(staging_mode({{"GTRAIN_STAGED_COMM", "all"}}), StagingMode::all_tensors);
  try {
    staging_mode({{"GTRAIN_STAGED_COMM", "yes"}});
    FAIL() << "accepted yes";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("GTRAIN_STAGED_COMM=yes: expected auto, 1, 0 or all"), std::string::npos);
  }
}

// One process: the staged path copies through buffers of its own and back, blocking and async, and
// leaves the caller's tensor alone until the work is waited for.
TEST(DeviceSharing, StagedCopiesThroughItsOwnBuffers) {
  StagedCommunicator c(std::make_shared<LocalCommunicator>(), /*stage_cpu=*/true);
  EXPECT_EQ(c.backend(), "local (GPU tensors through host memory)");
  auto t = torch::arange(6, torch::kFloat);
  c.allreduce(t, ReduceOp::kSum);
  EXPECT_TRUE(torch::equal(t, torch::arange(6, torch::kFloat)));
  auto out = torch::zeros({6});
  c.allgather(t, out);
  EXPECT_TRUE(torch::equal(out, t));
  auto rs = torch::zeros({6});
  c.reduce_scatter(t * 2, rs, ReduceOp::kSum);
  EXPECT_TRUE(torch::equal(rs, t * 2));
  auto work = c.allgather_async(t * 3, out);
  EXPECT_TRUE(torch::equal(out, t)) << "the result lands when the work is waited for";
  work->wait();
  work->wait();  // twice: copied once, no harm
  EXPECT_TRUE(torch::equal(out, t * 3));
  EXPECT_EQ(c.split(1, 0)->backend(), "local (GPU tensors through host memory)");
  // The host backend's own checks still apply.
  auto b = torch::ones({2});
  EXPECT_THROW(c.broadcast(b, 1), CommError);
}

}  // namespace
}  // namespace gtrain
