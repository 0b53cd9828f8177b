// softmax_xent.cu: the fused loss's CUDA kernel (see softmax_xent_cuda.h). One block a row: an online
// max and sum of exponentials over the row (one read), a block reduction, then the softmax written
// over the row (a second read, from L2 for rows up to a few hundred KB) and the target's entry fixed.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "runtime/models/softmax_xent_cuda.h"

namespace gtrain {
namespace cuda_kernels {
namespace {

constexpr int kThreads = 1024;  // two blocks an SM: the rows being read again stay in L2

template <typename T>
__device__ __forceinline__ float load(T v);
template <>
__device__ __forceinline__ float load<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float load<__half>(__half v) {
  return __half2float(v);
}
template <>
__device__ __forceinline__ float load<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

template <typename T>
__device__ __forceinline__ T store(float v);
template <>
__device__ __forceinline__ float store<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __half store<__half>(float v) {
  return __float2half_rn(v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 store<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// A running maximum and the sum of exp(x - max) over the values seen.
struct MaxSum {
  float m, s;
};

__device__ __forceinline__ void add(MaxSum& a, float x) {
  if (x > a.m) {
    a.s = a.s * expf(a.m - x) + 1.0f;
    a.m = x;
  } else if (x != -INFINITY) {
    a.s += expf(x - a.m);
  }
}

__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.m, b.m);
  if (m == -INFINITY) return {m, 0.0f};
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}

__device__ __forceinline__ MaxSum warp_reduce(MaxSum v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const MaxSum o{__shfl_xor_sync(0xffffffffu, v.m, off), __shfl_xor_sync(0xffffffffu, v.s, off)};
    v = combine(v, o);
  }
  return v;
}

// The whole block's MaxSum, in every thread.
__device__ MaxSum block_reduce(MaxSum v) {
  __shared__ MaxSum partial[32];
  __shared__ MaxSum total;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_reduce(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < static_cast<int>(blockDim.x / 32) ? partial[lane] : MaxSum{-INFINITY, 0.0f};
    v = warp_reduce(v);
    if (lane == 0) total = v;
  }
  __syncthreads();
  return total;
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    softmax_xent_kernel(T* logits, const int64_t* targets, float* row_loss, int64_t vocab) {
  T* row = logits + static_cast<int64_t>(blockIdx.x) * vocab;
  const int64_t target = targets[blockIdx.x];
  constexpr int kVec = 16 / sizeof(T);  // elements in one 16-byte load
  const bool vectorized = vocab % kVec == 0 && (reinterpret_cast<uintptr_t>(row) & 15) == 0;
  MaxSum acc{-INFINITY, 0.0f};
  if (vectorized) {
    const uint4* rv = reinterpret_cast<const uint4*>(row);
    for (int64_t i = threadIdx.x; i < vocab / kVec; i += kThreads) {
      const uint4 u = rv[i];
      const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
      for (int k = 0; k < kVec; ++k) add(acc, load<T>(e[k]));
    }
  } else {
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads) add(acc, load<T>(row[i]));
  }
  acc = block_reduce(acc);
  const float lse = acc.m + logf(acc.s);
  const bool valid = target >= 0 && target < vocab;
  __shared__ float z_target;
  if (threadIdx.x == 0) z_target = valid ? load<T>(row[target]) : NAN;
  __syncthreads();  // the target's logit is read before the row is overwritten
  if (vectorized) {
    uint4* rv = reinterpret_cast<uint4*>(row);
    for (int64_t i = threadIdx.x; i < vocab / kVec; i += kThreads) {
      uint4 u = rv[i];
      T* e = reinterpret_cast<T*>(&u);
#pragma unroll
      for (int k = 0; k < kVec; ++k) e[k] = store<T>(expf(load<T>(e[k]) - lse));
      rv[i] = u;
    }
  } else {
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads) row[i] = store<T>(expf(load<T>(row[i]) - lse));
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    if (valid) row[target] = store<T>(expf(z_target - lse) - 1.0f);
    row_loss[blockIdx.x] = lse - z_target;
  }
}

template <typename T>
cudaError_t launch(void* logits, const int64_t* targets, float* row_loss, int64_t rows, int64_t vocab,
                   cudaStream_t stream) {
  softmax_xent_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(static_cast<T*>(logits), targets,
                                                                               row_loss, vocab);
  return cudaGetLastError();
}

}  // namespace

std::string softmax_xent_rows(void* logits, LogitsType type, const int64_t* targets, float* row_loss, int64_t rows,
                              int64_t vocab, void* stream) {
  if (rows <= 0) return "";
  if (rows > 0x7fffffff) return "softmax_xent_rows: more than 2^31 - 1 rows in one launch";
  const auto s = static_cast<cudaStream_t>(stream);
  cudaError_t err = cudaSuccess;
  switch (type) {
    case LogitsType::f32:
      err = launch<float>(logits, targets, row_loss, rows, vocab, s);
      break;
    case LogitsType::f16:
      err = launch<__half>(logits, targets, row_loss, rows, vocab, s);
      break;
    case LogitsType::bf16:
      err = launch<__nv_bfloat16>(logits, targets, row_loss, rows, vocab, s);
      break;
  }
  return err == cudaSuccess ? "" : std::string("softmax_xent_rows: ") + cudaGetErrorString(err);
}

}  // namespace cuda_kernels
}  // namespace gtrain
