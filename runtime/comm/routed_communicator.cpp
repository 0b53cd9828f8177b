// routed_communicator.cpp: CUDA tensors to NCCL, CPU tensors to MPI.
#include "runtime/comm/routed_communicator.h"

#if defined(GTRAIN_WITH_NCCL) && defined(GTRAIN_WITH_MPI)

namespace gtrain {

RoutedCommunicator::RoutedCommunicator(std::shared_ptr<MpiCommunicator> mpi, std::shared_ptr<NcclCommunicator> nccl,
                                       int device)
    : mpi_(std::move(mpi)), nccl_(std::move(nccl)), device_(device) {}

std::shared_ptr<RoutedCommunicator> RoutedCommunicator::create(std::shared_ptr<MpiCommunicator> mpi, int device) {
  auto nccl = std::make_shared<NcclCommunicator>(mpi, device);
  return std::make_shared<RoutedCommunicator>(std::move(mpi), std::move(nccl), device);
}

void RoutedCommunicator::allreduce(torch::Tensor& t, ReduceOp op) {
  on(t).allreduce(t, op);
}
std::shared_ptr<Work> RoutedCommunicator::allreduce_async(torch::Tensor& t, ReduceOp op) {
  return on(t).allreduce_async(t, op);
}
std::shared_ptr<Work> RoutedCommunicator::reduce_scatter_async(const torch::Tensor& in, torch::Tensor& out,
                                                               ReduceOp op) {
  return on(in).reduce_scatter_async(in, out, op);
}
void RoutedCommunicator::alltoall(const torch::Tensor& in, torch::Tensor& out) {
  on(in).alltoall(in, out);
}
std::shared_ptr<Work> RoutedCommunicator::alltoall_async(const torch::Tensor& in, torch::Tensor& out) {
  return on(in).alltoall_async(in, out);
}
std::shared_ptr<Work> RoutedCommunicator::send_async(const torch::Tensor& t, int dst, int tag) {
  return on(t).send_async(t, dst, tag);
}
std::shared_ptr<Work> RoutedCommunicator::allgather_async(const torch::Tensor& in, torch::Tensor& out) {
  return on(in).allgather_async(in, out);
}
void RoutedCommunicator::broadcast(torch::Tensor& t, int root) {
  on(t).broadcast(t, root);
}
void RoutedCommunicator::allgather(const torch::Tensor& in, torch::Tensor& out) {
  on(in).allgather(in, out);
}
void RoutedCommunicator::reduce_scatter(const torch::Tensor& in, torch::Tensor& out, ReduceOp op) {
  on(in).reduce_scatter(in, out, op);
}
void RoutedCommunicator::send(const torch::Tensor& t, int dst, int tag) {
  on(t).send(t, dst, tag);
}
void RoutedCommunicator::recv(torch::Tensor& t, int src, int tag) {
  on(t).recv(t, src, tag);
}
void RoutedCommunicator::send_recv(const torch::Tensor& out, torch::Tensor& in, int peer, int tag) {
  on(out).send_recv(out, in, peer, tag);
}
void RoutedCommunicator::barrier() {
  mpi_->barrier();
}

std::shared_ptr<Communicator> RoutedCommunicator::split(int color, int key) {
  auto sub = std::dynamic_pointer_cast<MpiCommunicator>(mpi_->split(color, key));
  return create(std::move(sub), device_);
}

void RoutedCommunicator::abort(const std::string& reason) {
  nccl_->abort(reason);
}

}  // namespace gtrain

#endif  // GTRAIN_WITH_NCCL && GTRAIN_WITH_MPI
