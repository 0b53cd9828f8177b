// fused_cuda_common.cuh: device helpers the fused kernels share: loads and stores of fp32, fp16 and
// bf16 by a run-time DType, rounding to a type, block sums, launch sizes and error strings.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "runtime/models/fused_kernels_cuda.h"

namespace gtrain {
namespace cuda_kernels {

__device__ __forceinline__ float ld(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::bf16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case DType::f16:
      return __half2float(static_cast<const __half*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

__device__ __forceinline__ void st(void* p, DType t, int64_t i, float v) {
  switch (t) {
    case DType::bf16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
      break;
    case DType::f16:
      static_cast<__half*>(p)[i] = __float2half_rn(v);
      break;
    default:
      static_cast<float*>(p)[i] = v;
  }
}

// v as stored in type t and read back.
__device__ __forceinline__ float round_to(float v, DType t) {
  switch (t) {
    case DType::bf16:
      return __bfloat162float(__float2bfloat16_rn(v));
    case DType::f16:
      return __half2float(__float2half_rn(v));
    default:
      return v;
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  return v;
}

// The sum of v over the block (blockDim.x a multiple of 32, at most 1024), in every thread.
__device__ __forceinline__ float block_sum(float v) {
  __shared__ float partial[32];
  __shared__ float total;
  v = warp_sum(v);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float t = lane < static_cast<int>(blockDim.x >> 5) ? partial[lane] : 0.0f;
    t = warp_sum(t);
    if (lane == 0) total = t;
  }
  __syncthreads();
  const float r = total;
  __syncthreads();  // partial and total may be reused by the next call
  return r;
}

// Blocks of kElemThreads for an element-wise kernel over n items (grid-stride beyond the cap).
constexpr int kElemThreads = 256;
inline unsigned elem_blocks(int64_t n) {
  const int64_t b = (n + kElemThreads - 1) / kElemThreads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65536 ? 65536 : b));
}

// "" or the error the last launch left, named after the kernel.
inline std::string launch_error(const char* kernel) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return "";
  return std::string(kernel) + ": " + cudaGetErrorString(e);
}

}  // namespace cuda_kernels
}  // namespace gtrain
