// mpi_communicator.h: Communicator over MPI for CPU tensors, with a watchdog that aborts the whole
// job when a collective exceeds its timeout (a peer died or diverged), and MPI start-up.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "runtime/comm/communicator.h"

#ifdef GTRAIN_WITH_MPI
#include <mpi.h>
#endif

namespace gtrain {

#ifdef GTRAIN_WITH_MPI

struct MpiCommOptions {
  // A collective running longer than this aborts every rank; 0 = auto: the hang rule of
  // runtime/core/heartbeat.h from this rank's own recent steps. Either is doubled plus 30 s when the
  // launching gtrain watches the heartbeats (it then acts first, and names the stuck rank).
  double timeout_s = 0;
  double startup_timeout_s = 600;  // auto, before the first step (schedule.startup_timeout_s)
};

class MpiCommunicator : public Communicator {
 public:
  // Initialises MPI (once per process) and returns the world communicator. It lives until
  // finalize(): when a rank fails, nothing collective runs while the stack unwinds, so the
  // error reaches main(), which aborts the whole job.
  static std::shared_ptr<MpiCommunicator> world(const MpiCommOptions& options);
  // At normal exit, after every user of the communicators is gone: stops the watchdog, MPI_Finalize.
  static void finalize();
  ~MpiCommunicator() override;

  std::string backend() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void allreduce(torch::Tensor& t, ReduceOp op) override;
  // Non-blocking (MPI_Iallreduce / MPI_Ireduce_scatter_block): progress happens in test()/wait().
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

  MPI_Comm handle() const { return comm_; }

 private:
  struct Shared;  // watchdog state shared by a world and its sub-communicators
  MpiCommunicator(MPI_Comm comm, bool owned, std::shared_ptr<Shared> shared);
  class Guard;    // marks a collective in flight for the watchdog
  class Request;  // Work over an MPI_Request
  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0, size_ = 1;
  std::shared_ptr<Shared> shared_;
};

#endif  // GTRAIN_WITH_MPI

}  // namespace gtrain
