// communicator.cpp: default "not supported" collectives and the single-process communicator.
#include "runtime/comm/communicator.h"

#include "runtime/comm/comm_errors.h"

#include <cstdlib>
#include <cstring>
#include <iostream>

#include "runtime/core/errors.h"

namespace gtrain {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kMin:
      return "min";
  }
  return "?";
}

void Communicator::unsupported(const std::string& what) const {
  throw CommError("backend " + backend() + " does not support " + what);
}

void Communicator::allreduce(torch::Tensor&, ReduceOp op) {
  unsupported(std::string("allreduce(") + reduce_op_name(op) + ")");
}
std::shared_ptr<Work> Communicator::allreduce_async(torch::Tensor& t, ReduceOp op) {
  allreduce(t, op);
  return std::make_shared<CompletedWork>();
}
std::shared_ptr<Work> Communicator::reduce_scatter_async(const torch::Tensor& in, torch::Tensor& out, ReduceOp op) {
  reduce_scatter(in, out, op);
  return std::make_shared<CompletedWork>();
}
std::shared_ptr<Work> Communicator::allgather_async(const torch::Tensor& in, torch::Tensor& out) {
  allgather(in, out);
  return std::make_shared<CompletedWork>();
}
void Communicator::alltoall(const torch::Tensor&, torch::Tensor&) {
  unsupported("alltoall");
}
std::shared_ptr<Work> Communicator::alltoall_async(const torch::Tensor& in, torch::Tensor& out) {
  alltoall(in, out);
  return std::make_shared<CompletedWork>();
}
std::shared_ptr<Work> Communicator::send_async(const torch::Tensor& t, int dst, int tag) {
  send(t, dst, tag);
  return std::make_shared<CompletedWork>();
}
void Communicator::broadcast(torch::Tensor&, int) {
  unsupported("broadcast");
}
void Communicator::allgather(const torch::Tensor&, torch::Tensor&) {
  unsupported("allgather");
}
void Communicator::reduce_scatter(const torch::Tensor&, torch::Tensor&, ReduceOp) {
  unsupported("reduce_scatter");
}
void Communicator::send(const torch::Tensor&, int, int) {
  unsupported("send");
}
void Communicator::recv(torch::Tensor&, int, int) {
  unsupported("recv");
}
void Communicator::send_recv(const torch::Tensor&, torch::Tensor&, int, int) {
  unsupported("send_recv");
}
void Communicator::barrier() {
  unsupported("barrier");
}
std::shared_ptr<Communicator> Communicator::split(int, int) {
  unsupported("split");
}
void Communicator::abort(const std::string& reason) {
  std::cerr << "gtrain: aborting: " << reason << std::endl;
  std::_Exit(kExitFailure);
}

void LocalCommunicator::allreduce(torch::Tensor&, ReduceOp) {}
void LocalCommunicator::broadcast(torch::Tensor&, int root) {
  if (root != 0) throw CommError("broadcast root " + std::to_string(root) + " out of range for world size 1");
}
void LocalCommunicator::allgather(const torch::Tensor& in, torch::Tensor& out) {
  out.copy_(in);
}
void LocalCommunicator::reduce_scatter(const torch::Tensor& in, torch::Tensor& out, ReduceOp) {
  out.copy_(in);
}
void LocalCommunicator::alltoall(const torch::Tensor& in, torch::Tensor& out) {
  out.copy_(in);
}
std::shared_ptr<Communicator> LocalCommunicator::split(int, int) {
  return std::make_shared<LocalCommunicator>();
}
void LocalCommunicator::abort(const std::string& reason) {
  Communicator::abort(reason);
}

std::string broadcast_string(Communicator& comm, const std::string& text, int root) {
  if (comm.size() == 1) return text;
  auto len = torch::tensor({static_cast<int64_t>(text.size())}, torch::kLong);
  comm.broadcast(len, root);
  auto bytes = torch::zeros({len.item<int64_t>()}, torch::kByte);
  if (comm.rank() == root && !text.empty()) std::memcpy(bytes.data_ptr(), text.data(), text.size());
  if (bytes.numel() > 0) comm.broadcast(bytes, root);
  return std::string(reinterpret_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(bytes.numel()));
}

void throw_comm_error(const char* library, const char* call, const std::string& detail, const char* hint,
                      const char* file, int line) {
  const auto& ctx = ProcessContext::get();
  throw CommError(std::string(library) + " call " + call + " failed: " + detail + " (rank " + std::to_string(ctx.rank) +
                      " on " + ctx.host + ")",
                  hint, file, line);
}

}  // namespace gtrain
