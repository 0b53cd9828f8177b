// communicator.h: the abstract Communicator (one method per collective over torch tensors) and the
// single-process LocalCommunicator. MPI and NCCL backends implement the same interface.
//
// A backend that lacks an operation or dtype throws CommError "backend X does not support Y".
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>

namespace gtrain {

enum class ReduceOp { kSum, kAvg, kMax, kMin };
const char* reduce_op_name(ReduceOp op);

// An operation in flight. test() drives progress and reports completion; wait() blocks until done.
class Work {
 public:
  virtual ~Work() = default;
  virtual bool test() = 0;
  virtual void wait() = 0;
};

// A Work that finished when it was created (blocking backends).
class CompletedWork : public Work {
 public:
  bool test() override { return true; }
  void wait() override {}
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string backend() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // In place over all ranks.
  virtual void allreduce(torch::Tensor& t, ReduceOp op = ReduceOp::kSum);
  // Started now, finished by Work::wait(); the tensors must stay alive and untouched until then.
  // Default: the blocking operation, returned as completed work.
  virtual std::shared_ptr<Work> allreduce_async(torch::Tensor& t, ReduceOp op = ReduceOp::kSum);
  virtual std::shared_ptr<Work> reduce_scatter_async(const torch::Tensor& in, torch::Tensor& out,
                                                     ReduceOp op = ReduceOp::kSum);
  virtual std::shared_ptr<Work> allgather_async(const torch::Tensor& in, torch::Tensor& out);
  // in and out hold size() equal chunks along dim 0: chunk r of `in` goes to rank r, and `out`'s
  // chunk r is what rank r sent here (no reduction: bitwise mode's canonical sums start from it).
  virtual void alltoall(const torch::Tensor& in, torch::Tensor& out);
  virtual std::shared_ptr<Work> alltoall_async(const torch::Tensor& in, torch::Tensor& out);
  // t on `root` is copied into t on every rank.
  virtual void broadcast(torch::Tensor& t, int root);
  // out = concat over ranks of `in` along dim 0 (out has size() x in.size(0) rows).
  virtual void allgather(const torch::Tensor& in, torch::Tensor& out);
  // in has size() equal chunks along dim 0; rank r gets the reduction of chunk r in `out`.
  virtual void reduce_scatter(const torch::Tensor& in, torch::Tensor& out, ReduceOp op = ReduceOp::kSum);
  virtual void send(const torch::Tensor& t, int dst, int tag = 0);
  virtual void recv(torch::Tensor& t, int src, int tag = 0);
  // A send that may still be in flight when it returns (MPI_Isend); `t` must stay untouched until
  // wait(). Default: the blocking send.
  virtual std::shared_ptr<Work> send_async(const torch::Tensor& t, int dst, int tag = 0);
  // Sends `out` to `peer` and receives `in` from `peer` at the same time (no deadlock when both
  // sides call it: pipeline stages exchanging activations and gradients).
  virtual void send_recv(const torch::Tensor& out, torch::Tensor& in, int peer, int tag = 0);
  virtual void barrier();
  // Ranks with the same colour form a new communicator, ordered by key.
  virtual std::shared_ptr<Communicator> split(int color, int key);
  // Best-effort: stop every rank (used when this rank fails).
  virtual void abort(const std::string& reason);

 protected:
  [[noreturn]] void unsupported(const std::string& what) const;
};

// World size 1: collectives are identities; point-to-point has no peer.
class LocalCommunicator : public Communicator {
 public:
  std::string backend() const override { return "local"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void allreduce(torch::Tensor& t, ReduceOp op) override;
  void broadcast(torch::Tensor& t, int root) override;
  void allgather(const torch::Tensor& in, torch::Tensor& out) override;
  void reduce_scatter(const torch::Tensor& in, torch::Tensor& out, ReduceOp op) override;
  void alltoall(const torch::Tensor& in, torch::Tensor& out) override;
  void barrier() override {}
  std::shared_ptr<Communicator> split(int color, int key) override;
  void abort(const std::string& reason) override;
};

// `text` from rank `root` on every rank of `comm` (two broadcasts: length, then bytes; CPU tensors).
std::string broadcast_string(Communicator& comm, const std::string& text, int root);

}  // namespace gtrain
