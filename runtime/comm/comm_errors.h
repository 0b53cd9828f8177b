// comm_errors.h: GT_MPI_CHECK / GT_NCCL_CHECK / GT_CUDA_CHECK: throw CommError with file:line, the
// library's error text, rank and host, and a hint.
#pragma once

#include <string>

#include "runtime/core/errors.h"

namespace gtrain {
[[noreturn]] void throw_comm_error(const char* library, const char* call, const std::string& detail, const char* hint,
                                   const char* file, int line);
}  // namespace gtrain

#define GT_MPI_CHECK(call)                                                                          \
  do {                                                                                              \
    int gt_rc_ = (call);                                                                            \
    if (gt_rc_ != MPI_SUCCESS) {                                                                    \
      char gt_buf_[MPI_MAX_ERROR_STRING];                                                           \
      int gt_len_ = 0;                                                                              \
      MPI_Error_string(gt_rc_, gt_buf_, &gt_len_);                                                  \
      ::gtrain::throw_comm_error("MPI", #call, std::string(gt_buf_, gt_len_),                       \
                                 "check that every rank reached the same collective; see mpirun's " \
                                 "messages above",                                                  \
                                 __FILE__, __LINE__);                                               \
    }                                                                                               \
  } while (0)

#define GT_NCCL_CHECK(call)                                                                                     \
  do {                                                                                                          \
    ncclResult_t gt_rc_ = (call);                                                                               \
    if (gt_rc_ != ncclSuccess) {                                                                                \
      ::gtrain::throw_comm_error("NCCL", #call, ncclGetErrorString(gt_rc_),                                     \
                                 "run with NCCL_DEBUG=INFO for details; check GPUs and interconnect", __FILE__, \
                                 __LINE__);                                                                     \
    }                                                                                                           \
  } while (0)

#define GT_CUDA_CHECK(call)                                                                                     \
  do {                                                                                                          \
    cudaError_t gt_rc_ = (call);                                                                                \
    if (gt_rc_ != cudaSuccess) {                                                                                \
      ::gtrain::throw_comm_error("CUDA", #call, cudaGetErrorString(gt_rc_),                                     \
                                 "check CUDA_VISIBLE_DEVICES and that the driver works (nvidia-smi)", __FILE__, \
                                 __LINE__);                                                                     \
    }                                                                                                           \
  } while (0)
