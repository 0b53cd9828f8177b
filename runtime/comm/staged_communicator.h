// staged_communicator.h: StagedCommunicator, a Communicator over a host-memory backend (MPI) for
// tensors it cannot reach: each device tensor is copied to host memory, the operation runs there,
// and the result is copied back. Ranks that share one GPU use it, since NCCL refuses two ranks on
// one device (device_sharing.h decides); slower than NCCL, but every layout runs on one GPU.
#pragma once

#include <memory>
#include <string>

#include "runtime/comm/communicator.h"

namespace gtrain {

class StagedCommunicator : public Communicator {
 public:
  // `host` runs every operation on CPU tensors. With `stage_cpu`, CPU tensors take the same path
  // through a buffer of their own (GTRAIN_STAGED_COMM=all: the staging checked on CPU ranks).
  explicit StagedCommunicator(std::shared_ptr<Communicator> host, bool stage_cpu = false);

  std::string backend() const override { return host_->backend() + " (GPU tensors through host memory)"; }
  int rank() const override { return host_->rank(); }
  int size() const override { return host_->size(); }
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
  void barrier() override { host_->barrier(); }
  std::shared_ptr<Communicator> split(int color, int key) override;
  void abort(const std::string& reason) override { host_->abort(reason); }

 private:
  bool staged(const torch::Tensor& t) const { return t.defined() && (stage_cpu_ || !t.device().is_cpu()); }
  // `t`'s values in host memory (t itself when it is not staged); strides kept, so the host
  // backend's own checks (contiguity, dtype) see what the caller passed.
  torch::Tensor with_values(const torch::Tensor& t) const;
  // A host buffer shaped like `t` for a result (t itself when it is not staged).
  torch::Tensor buffer_for(const torch::Tensor& t) const;
  // Work that copies `host` into `dst` (when defined) once `inner` is done, keeping `keep` (the
  // staged input) alive until then; `inner` itself when nothing was `copied` to host memory.
  static std::shared_ptr<Work> then_copy(std::shared_ptr<Work> inner, const torch::Tensor& host,
                                         const torch::Tensor& dst, const torch::Tensor& keep, bool copied);

  std::shared_ptr<Communicator> host_;
  bool stage_cpu_;
};

}  // namespace gtrain
