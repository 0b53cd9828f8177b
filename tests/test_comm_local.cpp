// test_comm_local.cpp: the single-process communicator and "backend X does not support Y" errors.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "runtime/comm/communicator.h"
#include "runtime/core/errors.h"

namespace gtrain {
namespace {

TEST(LocalComm, CollectivesAreIdentities) {
  LocalCommunicator c;
  EXPECT_EQ(c.size(), 1);
  auto t = torch::arange(5, torch::kFloat);
  c.allreduce(t, ReduceOp::kAvg);
  EXPECT_TRUE(torch::equal(t, torch::arange(5, torch::kFloat)));
  auto out = torch::empty({5});
  c.allgather(t, out);
  EXPECT_TRUE(torch::equal(out, t));
  c.reduce_scatter(t, out, ReduceOp::kSum);
  EXPECT_TRUE(torch::equal(out, t));
  EXPECT_EQ(c.split(3, 0)->size(), 1);
}

TEST(LocalComm, PointToPointIsUnsupportedWithAClearMessage) {
  LocalCommunicator c;
  auto t = torch::ones({2});
  try {
    c.send(t, 1, 0);
    FAIL();
  } catch (const CommError& e) {
    EXPECT_STREQ(e.what(), "backend local does not support send");
  }
  EXPECT_THROW(c.broadcast(t, 1), CommError);
}

}  // namespace
}  // namespace gtrain
