// fused_act.cu: bias + GELU (tanh form) and SwiGLU, forward and backward (fused_kernels_cuda.h):
// element-wise, grid-stride, fp32 arithmetic from fused_math.h.
#include "runtime/models/fused_cuda_common.cuh"
#include "runtime/models/fused_math.h"

namespace gtrain {
namespace cuda_kernels {
namespace {

namespace fm = fused_math;

__global__ void bias_gelu_forward_kernel(const void* x, const float* bias, void* y, DType t, int64_t n, int64_t width) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float z = ld(x, t, i) + (bias ? bias[i % width] : 0.0f);
    st(y, t, i, fm::gelu_tanh(z));
  }
}

__global__ void bias_gelu_backward_kernel(const void* x, const float* bias, const void* dy, void* dx, DType t,
                                          int64_t n, int64_t width) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float z = ld(x, t, i) + (bias ? bias[i % width] : 0.0f);
    st(dx, t, i, fm::gelu_tanh_backward(z, ld(dy, t, i)));
  }
}

__global__ void swiglu_forward_kernel(const void* g, const void* u, void* y, DType t, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    st(y, t, i, fm::swiglu(ld(g, t, i), ld(u, t, i)));
  }
}

__global__ void swiglu_backward_kernel(const void* g, const void* u, const void* dy, void* dg, void* du, DType t,
                                       int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float a = 0.0f, b = 0.0f;
    fm::swiglu_backward(ld(g, t, i), ld(u, t, i), ld(dy, t, i), &a, &b);
    st(dg, t, i, a);
    st(du, t, i, b);
  }
}

}  // namespace

std::string bias_gelu_forward(const void* x, const float* bias, void* y, DType type, int64_t rows, int64_t width,
                              void* stream) {
  const int64_t n = rows * width;
  if (n == 0) return "";
  bias_gelu_forward_kernel<<<elem_blocks(n), kElemThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, bias, y, type, n,
                                                                                                   width);
  return launch_error("bias_gelu_forward");
}

std::string bias_gelu_backward(const void* x, const float* bias, const void* dy, void* dx, DType type, int64_t rows,
                               int64_t width, void* stream) {
  const int64_t n = rows * width;
  if (n == 0) return "";
  bias_gelu_backward_kernel<<<elem_blocks(n), kElemThreads, 0, static_cast<cudaStream_t>(stream)>>>(x, bias, dy, dx,
                                                                                                    type, n, width);
  return launch_error("bias_gelu_backward");
}

std::string swiglu_forward(const void* g, const void* u, void* y, DType type, int64_t n, void* stream) {
  if (n == 0) return "";
  swiglu_forward_kernel<<<elem_blocks(n), kElemThreads, 0, static_cast<cudaStream_t>(stream)>>>(g, u, y, type, n);
  return launch_error("swiglu_forward");
}

std::string swiglu_backward(const void* g, const void* u, const void* dy, void* dg, void* du, DType type, int64_t n,
                            void* stream) {
  if (n == 0) return "";
  swiglu_backward_kernel<<<elem_blocks(n), kElemThreads, 0, static_cast<cudaStream_t>(stream)>>>(g, u, dy, dg, du, type,
                                                                                                 n);
  return launch_error("swiglu_backward");
}

}  // namespace cuda_kernels
}  // namespace gtrain
