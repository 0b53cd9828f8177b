// nccl_communicator.h: Communicator over NCCL for CUDA tensors. Bootstrapped over a CPU
// communicator (rank 0 broadcasts the ncclUniqueId): MPI across processes, or the local one for a
// world of one, so a build without MPI still has it. Runs on its own CUDA stream, ordered against
// the compute stream with events. Compiled whenever NCCL is found, also in CPU-only LibTorch builds.
#pragma once

#ifdef GTRAIN_WITH_NCCL

#include <memory>

#include "runtime/comm/communicator.h"

namespace gtrain {

class NcclCommunicator : public Communicator {
 public:
  // Collective over every rank of `bootstrap` (a CPU communicator: MPI, or LocalCommunicator for a
  // world of one), using CUDA device `device`.
  NcclCommunicator(std::shared_ptr<Communicator> bootstrap, int device);
  ~NcclCommunicator() override;

  std::string backend() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allreduce(torch::Tensor& t, ReduceOp op) override;
  void broadcast(torch::Tensor& t, int root) override;
  void allgather(const torch::Tensor& in, torch::Tensor& out) override;
  void reduce_scatter(const torch::Tensor& in, torch::Tensor& out, ReduceOp op) override;
  // One NCCL group of a send and a recv per peer.
  void alltoall(const torch::Tensor& in, torch::Tensor& out) override;
  void send(const torch::Tensor& t, int dst, int tag) override;
  void recv(torch::Tensor& t, int src, int tag) override;
  // Both directions in one NCCL group (a send and a recv issued apart would wait on each other).
  void send_recv(const torch::Tensor& out, torch::Tensor& in, int peer, int tag) override;
  void barrier() override;
  std::shared_ptr<Communicator> split(int color, int key) override;
  void abort(const std::string& reason) override;

  // NCCL version as major*10000 + minor*100 + patch.
  static int version();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::shared_ptr<Communicator> bootstrap_;
  int rank_ = 0, size_ = 1, device_ = 0;
};

}  // namespace gtrain

#endif  // GTRAIN_WITH_NCCL
