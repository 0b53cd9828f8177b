// fused_adamw.cu: multi-tensor AdamW with the gradient-norm clip folded in (fused_adamw_cuda.h):
// every thread derives the clip divisor from the norm on the device, so no host sync and no
// separate kernels for the divisor; elements grid-stride over the tensors' concatenation.
#include <cuda_runtime.h>

#include "runtime/train/fused_adamw_cuda.h"

namespace gtrain {
namespace cuda_kernels {
namespace {

namespace fm = fused_math;

__global__ void adamw_clip_kernel(const AdamWTensor* tensors, const int64_t* starts, int n, int64_t total,
                                  const double* norm, double clip, fm::AdamWStep step) {
  if (norm) step.grad_divisor = fm::clip_divisor(*norm, clip);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    int lo = 0, hi = n - 1;  // the last tensor starting at or before i
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (starts[mid] <= i) {
        lo = mid;
      } else {
        hi = mid - 1;
      }
    }
    const AdamWTensor t = tensors[lo];
    const int64_t j = i - starts[lo];
    float p = t.p[j], m = t.m[j], v = t.v[j];
    fm::adamw_element(&p, t.g[j], &m, &v, step);
    t.p[j] = p;
    t.m[j] = m;
    t.v[j] = v;
  }
}

}  // namespace

std::string adamw_clip(const AdamWTensor* tensors, const int64_t* starts, int n, int64_t total, const double* norm,
                       double clip, const fused_math::AdamWStep& step, void* stream) {
  if (total == 0 || n == 0) return "";
  constexpr int kThreads = 256;
  int64_t blocks = (total + kThreads - 1) / kThreads;
  if (blocks > 8192) blocks = 8192;
  adamw_clip_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      tensors, starts, n, total, norm, clip, step);
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? "" : std::string("adamw_clip: ") + cudaGetErrorString(e);
}

}  // namespace cuda_kernels
}  // namespace gtrain
