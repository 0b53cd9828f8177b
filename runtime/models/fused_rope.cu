// fused_rope.cu: rotary embedding, forward and backward (fused_kernels_cuda.h): one thread a pair
// (x[i], x[i + dim/2]) of one head of one token, the tables read in fp32.
#include "runtime/models/fused_cuda_common.cuh"
#include "runtime/models/fused_math.h"

namespace gtrain {
namespace cuda_kernels {
namespace {

namespace fm = fused_math;

__global__ void rope_kernel(const void* x, const float* cos, const float* sin, void* y, DType t, int64_t batch,
                            int64_t tokens, int64_t heads, int64_t dim, bool per_batch, bool backward) {
  const int64_t half = dim / 2, n = batch * tokens * heads * half;
  for (int64_t k = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; k < n;
       k += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = k % half, bth = k / half;  // bth: ((b * tokens) + t) * heads + h
    const int64_t bt = bth / heads, tok = bt % tokens;
    const int64_t row = bth * dim, trow = (per_batch ? bt : tok) * dim;
    const float c1 = cos[trow + i], c2 = cos[trow + i + half], s1 = sin[trow + i], s2 = sin[trow + i + half];
    const float x1 = ld(x, t, row + i), x2 = ld(x, t, row + i + half);
    float y1 = 0.0f, y2 = 0.0f;
    if (backward) {
      fm::rope_pair_backward(x1, x2, c1, s1, c2, s2, &y1, &y2);
    } else {
      fm::rope_pair(x1, x2, c1, s1, c2, s2, &y1, &y2);
    }
    st(y, t, row + i, y1);
    st(y, t, row + i + half, y2);
  }
}

}  // namespace

std::string rope(const void* x, const float* cos, const float* sin, void* y, DType type, int64_t batch, int64_t tokens,
                 int64_t heads, int64_t dim, bool per_batch, bool backward, void* stream) {
  const int64_t n = batch * tokens * heads * (dim / 2);
  if (n == 0) return "";
  rope_kernel<<<elem_blocks(n), kElemThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      x, cos, sin, y, type, batch, tokens, heads, dim, per_batch, backward);
  return launch_error(backward ? "rope_backward" : "rope_forward");
}

}  // namespace cuda_kernels
}  // namespace gtrain
