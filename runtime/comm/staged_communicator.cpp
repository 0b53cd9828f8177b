// staged_communicator.cpp: device tensors copied to host memory, reduced there, copied back.
#include "runtime/comm/staged_communicator.h"

#include <utility>

namespace gtrain {
namespace {

// Copies the host result into its device tensor once the operation is done, exactly once, and
// keeps the host buffers alive until then.
class StagedWork : public Work {
 public:
  StagedWork(std::shared_ptr<Work> inner, torch::Tensor host, torch::Tensor dst, torch::Tensor keep)
      : inner_(std::move(inner)), host_(std::move(host)), dst_(std::move(dst)), keep_(std::move(keep)) {}
  bool test() override {
    if (!inner_->test()) return false;
    finish();
    return true;
  }
  void wait() override {
    inner_->wait();
    finish();
  }

 private:
  void finish() {
    if (done_) return;
    done_ = true;
    if (dst_.defined() && !dst_.is_same(host_)) dst_.copy_(host_);
    host_ = dst_ = keep_ = torch::Tensor();
  }
  std::shared_ptr<Work> inner_;
  torch::Tensor host_, dst_, keep_;
  bool done_ = false;
};

void copy_back(const torch::Tensor& dst, const torch::Tensor& host) {
  if (!dst.is_same(host)) dst.copy_(host);
}

}  // namespace

StagedCommunicator::StagedCommunicator(std::shared_ptr<Communicator> host, bool stage_cpu)
    : host_(std::move(host)), stage_cpu_(stage_cpu) {}

torch::Tensor StagedCommunicator::with_values(const torch::Tensor& t) const {
  if (!staged(t)) return t;
  return torch::empty_like(t, t.options().device(torch::kCPU)).copy_(t);
}

torch::Tensor StagedCommunicator::buffer_for(const torch::Tensor& t) const {
  if (!staged(t)) return t;
  return torch::empty_like(t, t.options().device(torch::kCPU));
}

std::shared_ptr<Work> StagedCommunicator::then_copy(std::shared_ptr<Work> inner, const torch::Tensor& host,
                                                    const torch::Tensor& dst, const torch::Tensor& keep, bool copied) {
  if (!copied) return inner;
  return std::make_shared<StagedWork>(std::move(inner), host, dst, keep);
}

void StagedCommunicator::allreduce(torch::Tensor& t, ReduceOp op) {
  auto h = with_values(t);
  host_->allreduce(h, op);
  copy_back(t, h);
}

std::shared_ptr<Work> StagedCommunicator::allreduce_async(torch::Tensor& t, ReduceOp op) {
  auto h = with_values(t);
  return then_copy(host_->allreduce_async(h, op), h, t, torch::Tensor(), !h.is_same(t));
}

std::shared_ptr<Work> StagedCommunicator::reduce_scatter_async(const torch::Tensor& in, torch::Tensor& out,
                                                               ReduceOp op) {
  auto hin = with_values(in), hout = buffer_for(out);
  return then_copy(host_->reduce_scatter_async(hin, hout, op), hout, out, hin, !hin.is_same(in) || !hout.is_same(out));
}

std::shared_ptr<Work> StagedCommunicator::allgather_async(const torch::Tensor& in, torch::Tensor& out) {
  auto hin = with_values(in), hout = buffer_for(out);
  return then_copy(host_->allgather_async(hin, hout), hout, out, hin, !hin.is_same(in) || !hout.is_same(out));
}

void StagedCommunicator::alltoall(const torch::Tensor& in, torch::Tensor& out) {
  auto hin = with_values(in), hout = buffer_for(out);
  host_->alltoall(hin, hout);
  copy_back(out, hout);
}

std::shared_ptr<Work> StagedCommunicator::alltoall_async(const torch::Tensor& in, torch::Tensor& out) {
  auto hin = with_values(in), hout = buffer_for(out);
  return then_copy(host_->alltoall_async(hin, hout), hout, out, hin, !hin.is_same(in) || !hout.is_same(out));
}

std::shared_ptr<Work> StagedCommunicator::send_async(const torch::Tensor& t, int dst, int tag) {
  auto h = with_values(t);
  return then_copy(host_->send_async(h, dst, tag), torch::Tensor(), torch::Tensor(), h, !h.is_same(t));
}

void StagedCommunicator::broadcast(torch::Tensor& t, int root) {
  auto h = rank() == root ? with_values(t) : buffer_for(t);
  host_->broadcast(h, root);
  copy_back(t, h);
}

void StagedCommunicator::allgather(const torch::Tensor& in, torch::Tensor& out) {
  auto hin = with_values(in), hout = buffer_for(out);
  host_->allgather(hin, hout);
  copy_back(out, hout);
}

void StagedCommunicator::reduce_scatter(const torch::Tensor& in, torch::Tensor& out, ReduceOp op) {
  auto hin = with_values(in), hout = buffer_for(out);
  host_->reduce_scatter(hin, hout, op);
  copy_back(out, hout);
}

void StagedCommunicator::send(const torch::Tensor& t, int dst, int tag) {
  host_->send(with_values(t), dst, tag);
}

void StagedCommunicator::recv(torch::Tensor& t, int src, int tag) {
  auto h = buffer_for(t);
  host_->recv(h, src, tag);
  copy_back(t, h);
}

void StagedCommunicator::send_recv(const torch::Tensor& out, torch::Tensor& in, int peer, int tag) {
  auto hout = with_values(out), hin = buffer_for(in);
  host_->send_recv(hout, hin, peer, tag);
  copy_back(in, hin);
}

std::shared_ptr<Communicator> StagedCommunicator::split(int color, int key) {
  return std::make_shared<StagedCommunicator>(host_->split(color, key), stage_cpu_);
}

}  // namespace gtrain
