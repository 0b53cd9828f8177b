// nccl_communicator.cpp: NCCL collectives on a dedicated stream, ordered with events.
#include "runtime/comm/nccl_communicator.h"

#ifdef GTRAIN_WITH_NCCL

#include <cuda_runtime_api.h>
#include <nccl.h>

#ifdef GTRAIN_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include "runtime/comm/comm_errors.h"

namespace gtrain {
namespace {

ncclDataType_t nccl_type(const torch::Tensor& t, const char* op) {
  switch (t.scalar_type()) {
    case torch::kFloat:
      return ncclFloat32;
    case torch::kDouble:
      return ncclFloat64;
    case torch::kHalf:
      return ncclFloat16;
    case torch::kBFloat16:
      return ncclBfloat16;
    case torch::kLong:
      return ncclInt64;
    case torch::kInt:
      return ncclInt32;
    case torch::kByte:
      return ncclUint8;
    case torch::kChar:
      return ncclInt8;
    default:
      throw CommError("backend nccl does not support dtype " + std::string(c10::toString(t.scalar_type())) + " for " +
                      op);
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kMin:
      return ncclMin;
    default:
      return ncclSum;
  }
}

void check_cuda_tensor(const torch::Tensor& t, const char* op) {
  if (!t.defined()) throw CommError(std::string("backend nccl: ") + op + " got an undefined tensor");
  if (!t.device().is_cuda()) {
    throw CommError(std::string("backend nccl does not support ") + t.device().str() + " tensors for " + op +
                    " (NCCL needs CUDA tensors; use the MPI communicator for CPU tensors)");
  }
  if (!t.is_contiguous()) throw CommError(std::string("backend nccl: ") + op + " needs a contiguous tensor");
}

cudaStream_t compute_stream() {
#ifdef GTRAIN_WITH_CUDA
  return c10::cuda::getCurrentCUDAStream().stream();
#else
  return cudaStreamLegacy;
#endif
}

}  // namespace

struct NcclCommunicator::Impl {
  ncclComm_t comm = nullptr;
  cudaStream_t stream = nullptr;
  cudaEvent_t ready = nullptr;  // compute -> comm
  cudaEvent_t done = nullptr;   // comm -> compute

  // Makes the NCCL stream wait for work queued so far on the compute stream.
  void begin() {
    GT_CUDA_CHECK(cudaEventRecord(ready, compute_stream()));
    GT_CUDA_CHECK(cudaStreamWaitEvent(stream, ready, 0));
  }
  // Makes later compute wait for the collective.
  void end() {
    GT_CUDA_CHECK(cudaEventRecord(done, stream));
    GT_CUDA_CHECK(cudaStreamWaitEvent(compute_stream(), done, 0));
  }
};

int NcclCommunicator::version() {
  int v = 0;
  ncclGetVersion(&v);
  return v;
}

NcclCommunicator::NcclCommunicator(std::shared_ptr<Communicator> bootstrap, int device)
    : impl_(std::make_unique<Impl>()), bootstrap_(std::move(bootstrap)), device_(device) {
  rank_ = bootstrap_->rank();
  size_ = bootstrap_->size();
  GT_CUDA_CHECK(cudaSetDevice(device_));
  ncclUniqueId id;
  if (rank_ == 0) GT_NCCL_CHECK(ncclGetUniqueId(&id));
  auto id_bytes = torch::from_blob(&id, {static_cast<int64_t>(sizeof(id))}, torch::kByte);
  bootstrap_->broadcast(id_bytes, 0);
  GT_NCCL_CHECK(ncclCommInitRank(&impl_->comm, size_, id, rank_));
  GT_CUDA_CHECK(cudaStreamCreateWithFlags(&impl_->stream, cudaStreamNonBlocking));
  GT_CUDA_CHECK(cudaEventCreateWithFlags(&impl_->ready, cudaEventDisableTiming));
  GT_CUDA_CHECK(cudaEventCreateWithFlags(&impl_->done, cudaEventDisableTiming));
}

NcclCommunicator::~NcclCommunicator() {
  if (impl_->stream) cudaStreamSynchronize(impl_->stream);
  if (impl_->comm) ncclCommDestroy(impl_->comm);
  if (impl_->ready) cudaEventDestroy(impl_->ready);
  if (impl_->done) cudaEventDestroy(impl_->done);
  if (impl_->stream) cudaStreamDestroy(impl_->stream);
}

void NcclCommunicator::allreduce(torch::Tensor& t, ReduceOp op) {
  check_cuda_tensor(t, "allreduce");
  auto type = nccl_type(t, "allreduce");
  impl_->begin();
  GT_NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(), type, nccl_op(op), impl_->comm, impl_->stream));
  impl_->end();
}

void NcclCommunicator::broadcast(torch::Tensor& t, int root) {
  check_cuda_tensor(t, "broadcast");
  auto type = nccl_type(t, "broadcast");
  impl_->begin();
  GT_NCCL_CHECK(ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(), type, root, impl_->comm, impl_->stream));
  impl_->end();
}

void NcclCommunicator::allgather(const torch::Tensor& in, torch::Tensor& out) {
  check_cuda_tensor(in, "allgather");
  check_cuda_tensor(out, "allgather");
  if (out.numel() != in.numel() * size_) throw CommError("backend nccl: allgather output must hold world_size x input");
  impl_->begin();
  GT_NCCL_CHECK(
      ncclAllGather(in.data_ptr(), out.data_ptr(), in.numel(), nccl_type(in, "allgather"), impl_->comm, impl_->stream));
  impl_->end();
}

void NcclCommunicator::reduce_scatter(const torch::Tensor& in, torch::Tensor& out, ReduceOp op) {
  check_cuda_tensor(in, "reduce_scatter");
  check_cuda_tensor(out, "reduce_scatter");
  if (in.numel() != out.numel() * size_)
    throw CommError("backend nccl: reduce_scatter input must hold world_size x output");
  impl_->begin();
  GT_NCCL_CHECK(ncclReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(), nccl_type(in, "reduce_scatter"),
                                  nccl_op(op), impl_->comm, impl_->stream));
  impl_->end();
}

void NcclCommunicator::alltoall(const torch::Tensor& in, torch::Tensor& out) {
  check_cuda_tensor(in, "alltoall");
  check_cuda_tensor(out, "alltoall");
  if (in.numel() != out.numel() || in.numel() % size_ != 0)
    throw CommError("backend nccl: alltoall input and output must be of one size divisible by world_size");
  const int64_t n = in.numel() / size_;
  const auto type = nccl_type(in, "alltoall");
  const auto bytes = static_cast<int64_t>(in.element_size()) * n;
  impl_->begin();
  GT_NCCL_CHECK(ncclGroupStart());
  for (int r = 0; r < size_; ++r) {
    GT_NCCL_CHECK(
        ncclSend(static_cast<const char*>(in.data_ptr()) + r * bytes, n, type, r, impl_->comm, impl_->stream));
    GT_NCCL_CHECK(ncclRecv(static_cast<char*>(out.data_ptr()) + r * bytes, n, type, r, impl_->comm, impl_->stream));
  }
  GT_NCCL_CHECK(ncclGroupEnd());
  impl_->end();
}

void NcclCommunicator::send(const torch::Tensor& t, int dst, int /*tag*/) {
  check_cuda_tensor(t, "send");
  impl_->begin();
  GT_NCCL_CHECK(ncclSend(t.data_ptr(), t.numel(), nccl_type(t, "send"), dst, impl_->comm, impl_->stream));
  impl_->end();
}

void NcclCommunicator::recv(torch::Tensor& t, int src, int /*tag*/) {
  check_cuda_tensor(t, "recv");
  impl_->begin();
  GT_NCCL_CHECK(ncclRecv(t.data_ptr(), t.numel(), nccl_type(t, "recv"), src, impl_->comm, impl_->stream));
  impl_->end();
}

void NcclCommunicator::send_recv(const torch::Tensor& out, torch::Tensor& in, int peer, int /*tag*/) {
  check_cuda_tensor(out, "send_recv");
  check_cuda_tensor(in, "send_recv");
  impl_->begin();
  GT_NCCL_CHECK(ncclGroupStart());
  GT_NCCL_CHECK(ncclSend(out.data_ptr(), out.numel(), nccl_type(out, "send_recv"), peer, impl_->comm, impl_->stream));
  GT_NCCL_CHECK(ncclRecv(in.data_ptr(), in.numel(), nccl_type(in, "send_recv"), peer, impl_->comm, impl_->stream));
  GT_NCCL_CHECK(ncclGroupEnd());
  impl_->end();
}

void NcclCommunicator::barrier() {
  auto one = torch::ones({1}, torch::TensorOptions().dtype(torch::kFloat).device(torch::kCUDA, device_));
  allreduce(one, ReduceOp::kSum);
  GT_CUDA_CHECK(cudaStreamSynchronize(impl_->stream));
}

std::shared_ptr<Communicator> NcclCommunicator::split(int color, int key) {
  return std::make_shared<NcclCommunicator>(bootstrap_->split(color, key), device_);
}

void NcclCommunicator::abort(const std::string& reason) {
  if (impl_->comm) ncclCommAbort(impl_->comm);
  impl_->comm = nullptr;
  bootstrap_->abort(reason);
}

}  // namespace gtrain

#endif  // GTRAIN_WITH_NCCL
