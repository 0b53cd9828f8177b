// test_comm_mpi.cpp: MpiCommunicator collectives against reference results, several sizes and
// dtypes, and the data-parallel engine's sharded step over them. Run under mpirun (ctest does, with
// 2 and 3 ranks); every rank checks its own results. With --staged every test runs again through a
// StagedCommunicator that copies each tensor through a host buffer of its own (GTRAIN_STAGED_COMM=all,
// the path of ranks that share a GPU).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "runtime/comm/device_sharing.h"
#include "runtime/comm/mpi_communicator.h"
#include "runtime/comm/staged_communicator.h"
#include "runtime/common/torch_compat.h"
#include "runtime/core/errors.h"
#include "strategies/data_parallel.h"
#include "tests/support/adamw_reference.h"

namespace gtrain {
namespace {

std::shared_ptr<Communicator> g_world;

const std::vector<int64_t> kSizes = {1, 7, 1000, 1 << 18};
const std::vector<c10::ScalarType> kTypes = {torch::kFloat, torch::kDouble, torch::kLong, torch::kInt};

torch::Tensor pattern(int64_t n, c10::ScalarType t, int64_t salt) {
  return (torch::arange(n, torch::kLong).remainder(13) + salt).to(t);
}

TEST(MpiComm, AllreduceSumAvgMaxMin) {
  const int R = g_world->size(), r = g_world->rank();
  for (auto type : kTypes) {
    for (auto n : kSizes) {
      auto base = pattern(n, torch::kDouble, 0);
      auto t = pattern(n, type, 0) * (r + 1);
      g_world->allreduce(t, ReduceOp::kSum);
      EXPECT_TRUE(torch::equal(t, (base * (R * (R + 1) / 2)).to(type))) << c10::toString(type) << " n=" << n;
      auto mx = pattern(n, type, r);
      g_world->allreduce(mx, ReduceOp::kMax);
      EXPECT_TRUE(torch::equal(mx, pattern(n, type, R - 1)));
      auto mn = pattern(n, type, r);
      g_world->allreduce(mn, ReduceOp::kMin);
      EXPECT_TRUE(torch::equal(mn, pattern(n, type, 0)));
      if (torch::isFloatingType(type)) {
        auto avg = pattern(n, type, 0) * (r + 1);
        g_world->allreduce(avg, ReduceOp::kAvg);
        EXPECT_TRUE(torch::allclose(avg, (base * ((R + 1) / 2.0)).to(type)));
      }
    }
  }
}

TEST(MpiComm, BroadcastFromEveryRoot) {
  for (int root = 0; root < g_world->size(); ++root) {
    for (auto type : {torch::kFloat, torch::kLong, torch::kBFloat16}) {  // bytes: any dtype
      auto t = g_world->rank() == root ? pattern(1000, type, 5) : torch::zeros({1000}, type);
      g_world->broadcast(t, root);
      EXPECT_TRUE(torch::equal(t, pattern(1000, type, 5))) << "root " << root;
    }
  }
}

// What rank 0 decides (a checkpoint path; also empty) reaches every rank, whatever they held.
TEST(MpiComm, BroadcastStringFromRoot) {
  for (const std::string& text : {std::string("/runs/job/checkpoints/step-000120"), std::string()}) {
    const std::string mine = g_world->rank() == 0 ? text : "stale value " + std::to_string(g_world->rank());
    EXPECT_EQ(broadcast_string(*g_world, mine, 0), text);
  }
}

// Each rank's device name, of any length, reaches every rank in rank order (device_sharing.h).
TEST(MpiComm, AllgatherStrings) {
  const int R = g_world->size(), r = g_world->rank();
  const auto all = allgather_strings(*g_world, r == 1 ? "" : "node" + std::string(r * 7, 'x') + "/0000:65:00.0");
  ASSERT_EQ(all.size(), static_cast<size_t>(R));
  for (int k = 0; k < R; ++k) EXPECT_EQ(all[k], k == 1 ? "" : "node" + std::string(k * 7, 'x') + "/0000:65:00.0");
  const auto same = find_shared_devices(allgather_strings(*g_world, "h/0"));
  ASSERT_EQ(same.groups.size(), 1u);
  EXPECT_EQ(same.groups[0].size(), static_cast<size_t>(R));
}

TEST(MpiComm, AllgatherAndReduceScatter) {
  const int R = g_world->size(), r = g_world->rank();
  for (auto n : kSizes) {
    auto mine = torch::full({n}, static_cast<float>(r * 10 + 1));
    auto all = torch::empty({n * R});
    g_world->allgather(mine, all);
    for (int k = 0; k < R; ++k) EXPECT_TRUE(torch::equal(all.narrow(0, k * n, n), torch::full({n}, k * 10.0f + 1)));
    // Rank k contributes (k + 1) * (chunk index + 1) to every chunk.
    auto in = torch::arange(R, torch::kFloat).add(1).repeat_interleave(n) * (r + 1);
    auto out = torch::empty({n});
    g_world->reduce_scatter(in, out, ReduceOp::kSum);
    EXPECT_TRUE(torch::allclose(out, torch::full({n}, static_cast<float>((r + 1) * R * (R + 1) / 2))));
  }
}

// All-to-all (bitwise mode's exchange): chunk k of rank r's input arrives as chunk r of rank k's
// output, unreduced; the async form too. And a non-blocking send around a ring.
TEST(MpiComm, AlltoallAndAsyncSend) {
  const int R = g_world->size(), r = g_world->rank();
  for (auto n : kSizes) {
    // Element i of chunk k on rank r: r * 1000 + k * 100 + i % 7.
    auto in = torch::empty({n * R});
    for (int k = 0; k < R; ++k) in.narrow(0, k * n, n).copy_(torch::arange(n).remainder(7).add(r * 1000 + k * 100));
    auto out = torch::empty({n * R});
    g_world->alltoall(in, out);
    auto out2 = torch::empty({n * R});
    g_world->alltoall_async(in, out2)->wait();
    for (int k = 0; k < R; ++k) {
      const auto want = torch::arange(n).remainder(7).add(k * 1000 + r * 100).to(torch::kFloat);
      EXPECT_TRUE(torch::equal(out.narrow(0, k * n, n), want)) << "from rank " << k << ", " << n;
      EXPECT_TRUE(torch::equal(out2.narrow(0, k * n, n), want));
    }
  }
  if (R < 2) return;
  auto uneven = torch::zeros({R * 2 + 1}), uneven_out = torch::zeros({R * 2 + 1});
  EXPECT_THROW(g_world->alltoall(uneven, uneven_out), CommError);  // not divisible by the world
  auto mine = torch::full({100000}, static_cast<float>(r));
  auto work = g_world->send_async(mine, (r + 1) % R, 3);
  auto got = torch::empty({100000});
  g_world->recv(got, (r + R - 1) % R, 3);
  work->wait();
  EXPECT_TRUE(torch::equal(got, torch::full({100000}, static_cast<float>((r + R - 1) % R))));
}

TEST(MpiComm, SendRecvRing) {
  const int R = g_world->size(), r = g_world->rank();
  if (R < 2) GTEST_SKIP() << "needs 2 ranks";
  auto out = torch::full({4096}, static_cast<double>(r), torch::kDouble);
  auto in = torch::empty({4096}, torch::kDouble);
  // Even ranks send first, odd receive first: no deadlock for any size.
  if (r % 2 == 0) {
    g_world->send(out, (r + 1) % R, 7);
    g_world->recv(in, (r + R - 1) % R, 7);
  } else {
    g_world->recv(in, (r + R - 1) % R, 7);
    g_world->send(out, (r + 1) % R, 7);
  }
  EXPECT_TRUE(torch::equal(in, torch::full({4096}, static_cast<double>((r + R - 1) % R), torch::kDouble)));
  // A message of the wrong size is an error, not silently partial data.
  auto small = torch::zeros({8}, torch::kDouble);
  if (r == 0) {
    g_world->send(torch::ones({4}, torch::kDouble), 1, 9);
  } else if (r == 1) {
    EXPECT_THROW(g_world->recv(small, 0, 9), CommError);
  }
}

TEST(MpiComm, SplitByColour) {
  const int r = g_world->rank();
  auto sub = g_world->split(r % 2, r);
  int expected_size = 0, expected_sum = 0;
  for (int k = 0; k < g_world->size(); ++k) {
    if (k % 2 == r % 2) ++expected_size, expected_sum += k;
  }
  EXPECT_EQ(sub->size(), expected_size);
  EXPECT_EQ(sub->rank(), r / 2);
  auto t = torch::full({3}, static_cast<int64_t>(r));
  sub->allreduce(t, ReduceOp::kSum);
  EXPECT_EQ(t[0].item<int64_t>(), expected_sum);
  sub->barrier();
}

// bf16/fp16 (tensor-parallel activations under bf16 on CPU ranks): each element is reduced in fp32
// and rounded to the 16-bit type, so small integers are exact and fractions round as the type does.
TEST(MpiComm, SixteenBitReductions) {
  const int R = g_world->size(), r = g_world->rank();
  for (auto type : {torch::kBFloat16, torch::kHalf}) {
    for (int64_t n : {1, 1000, 1 << 17}) {
      auto t = pattern(n, type, 0) * (r + 1);
      g_world->allreduce(t, ReduceOp::kSum);
      EXPECT_TRUE(torch::equal(t, (pattern(n, torch::kDouble, 0) * (R * (R + 1) / 2)).to(type))) << c10::toString(type);
      auto mx = pattern(n, type, r), mn = pattern(n, type, r);
      g_world->allreduce(mx, ReduceOp::kMax);
      g_world->allreduce(mn, ReduceOp::kMin);
      EXPECT_TRUE(torch::equal(mx, pattern(n, type, R - 1)));
      EXPECT_TRUE(torch::equal(mn, pattern(n, type, 0)));
      // Fractions: 0.1 * (r + 1) summed in fp32 per element, then rounded once per reduction step.
      auto f = torch::full({n}, 0.1 * (r + 1), torch::kFloat).to(type);
      g_world->allreduce_async(f, ReduceOp::kAvg)->wait();
      const double want = 0.1 * (R + 1) / 2;
      EXPECT_NEAR(f[0].item<float>(), want, want * (type == torch::kBFloat16 ? 2e-2 : 2e-3));
      auto in = pattern(n * R, type, 0), out = torch::empty({n}, type);
      g_world->reduce_scatter(in, out, ReduceOp::kSum);
      EXPECT_TRUE(torch::equal(out, (pattern(n * R, torch::kDouble, 0).narrow(0, r * n, n) * R).to(type)));
    }
  }
}

TEST(MpiComm, UnsupportedInputsAreClearErrors) {
  auto b = torch::ones({4}, torch::kBool);
  try {
    g_world->allreduce(b, ReduceOp::kSum);
    FAIL();
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("backend mpi does not support dtype Bool for allreduce"), std::string::npos);
  }
  auto strided = torch::ones({4, 4}).t();
  EXPECT_THROW(g_world->allreduce(strided, ReduceOp::kSum), CommError);
  auto out = torch::empty({3});
  EXPECT_THROW(g_world->allgather(torch::ones({2}), out), CommError);
}

// The device step (the one CUDA ranks take: device-side norm and clipping divisor, fused AdamW where
// LibTorch has the kernel for the device, here its CPU version from LibTorch 2.4), run on CPU with
// ZeRO shards: each rank updates the ranges of the buckets it owns, cut across parameters and
// weight-decay classes, and the all-gathered result equals one process's torch::optim::AdamW with
// clip_grad_norm_ over the whole batch.
TEST(MpiDataParallel, DeviceStepShardsMatchOneProcess) {
  const int R = g_world->size(), r = g_world->rank();
  for (int zero : {0, 1, 2}) {
    for (bool fused : {true, false}) {
      torch::manual_seed(0);
      test::SmallMlp m(0.05, 0.1);
      DataParallelEngine e(g_world, m.named, test::device_step_options(zero, fused));  // owned chunks split buckets
      EXPECT_EQ(e.fused_adamw(), fused && compat::kHaveFusedAdamWCpu);
      for (int s = 0; s < 6; ++s) {
        torch::manual_seed(100 + s);
        auto x = torch::randn({4 * R, 6});  // the global batch; this rank trains on rows 4r..4r+3
        const double clip = s % 2 ? 0.5 : 1e6;
        e.zero_grad();
        e.begin_micro_batch(true);
        test::SmallMlp::loss(m.params, x.narrow(0, 4 * r, 4)).backward();
        e.end_backward();
        const double norm = e.clip_and_step(0.05, clip).item<double>();
        const double ref_norm = m.ref_step(x, clip);
        EXPECT_NEAR(norm, ref_norm, 1e-5 * ref_norm) << "zero " << zero << " fused " << fused << " step " << s;
      }
      m.expect_matches_reference("rank " + std::to_string(r) + " zero " + std::to_string(zero) + " fused " +
                                 std::to_string(fused));
    }
  }
}

}  // namespace
}  // namespace gtrain

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  std::shared_ptr<gtrain::Communicator> mpi = gtrain::MpiCommunicator::world({});
  const bool staged = argc > 1 && std::string(argv[1]) == "--staged";
  gtrain::g_world = staged ? std::make_shared<gtrain::StagedCommunicator>(mpi, /*stage_cpu=*/true) : mpi;
  int rc = RUN_ALL_TESTS();
  // Every rank must pass: the job fails if any rank failed.
  auto flag = torch::tensor({rc}, torch::kInt);
  gtrain::g_world->allreduce(flag, gtrain::ReduceOp::kMax);
  gtrain::g_world.reset();
  gtrain::MpiCommunicator::finalize();
  return flag.item<int>();
}
