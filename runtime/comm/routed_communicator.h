// routed_communicator.h: RoutedCommunicator, one Communicator over two backends that sends each
// operation where its tensors live: CUDA tensors to NCCL, CPU tensors to MPI. A CUDA rank's engine
// reduces gradients and parameters over NCCL while the trainer's small CPU sums (loss, stop
// agreement, probe) and the bootstrap stay on MPI.
#pragma once

#if defined(GTRAIN_WITH_NCCL) && defined(GTRAIN_WITH_MPI)

#include <memory>

#include "runtime/comm/mpi_communicator.h"
#include "runtime/comm/nccl_communicator.h"

namespace gtrain {

class RoutedCommunicator : public Communicator {
 public:
  // `nccl` spans the same ranks as `mpi` (built from it); `device` is this rank's CUDA ordinal.
  RoutedCommunicator(std::shared_ptr<MpiCommunicator> mpi, std::shared_ptr<NcclCommunicator> nccl, int device);
  // Builds the NCCL communicator over `mpi` (a collective over its ranks).
  static std::shared_ptr<RoutedCommunicator> create(std::shared_ptr<MpiCommunicator> mpi, int device);

  std::string backend() const override { return "mpi+nccl"; }
  int rank() const override { return mpi_->rank(); }
  int size() const override { return mpi_->size(); }
  void allreduce(torch::Tensor& t, ReduceOp op) override;
  std::shared_ptr<Work> allreduce_async(torch::Tensor& t, ReduceOp op) override;
  std::shared_ptr<Work> reduce_scatter_async(const torch::Tensor& in, torch::Tensor& out, ReduceOp op) override;
  std::shared_ptr<Work> allgather_async(const torch::Tensor& in, torch::Tensor& out) override;
  void alltoall(const torch::Tensor& in, torch::Tensor& out) override;
  std::shared_ptr<Work> alltoall_async(const torch::Tensor& in, torch::Tensor& out) override;
  std::shared_ptr<Work> send_async(const torch::Tensor& t, int dst, int tag) override;
  void broadcast(torch::Tensor& t, int root) override;
  void allgather(const torch::Tensor& in, torch::Tensor& out) override;
  void reduce_scatter(const torch::Tensor& in, torch::Tensor& out, ReduceOp op) override;
  void send(const torch::Tensor& t, int dst, int tag) override;
  void recv(torch::Tensor& t, int src, int tag) override;
  void send_recv(const torch::Tensor& out, torch::Tensor& in, int peer, int tag) override;
  void barrier() override;
  std::shared_ptr<Communicator> split(int color, int key) override;
  void abort(const std::string& reason) override;

 private:
  Communicator& on(const torch::Tensor& t) { return t.is_cuda() ? static_cast<Communicator&>(*nccl_) : *mpi_; }
  std::shared_ptr<MpiCommunicator> mpi_;
  std::shared_ptr<NcclCommunicator> nccl_;
  int device_;
};

}  // namespace gtrain

#endif  // GTRAIN_WITH_NCCL && GTRAIN_WITH_MPI
