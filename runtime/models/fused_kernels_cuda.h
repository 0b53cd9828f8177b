// fused_kernels_cuda.h: the launchers of the fused CUDA kernels (fused_norm.cu, fused_act.cu,
// fused_rope.cu), torch-free. Tensors are raw device pointers, contiguous, of the DType given; the
// arithmetic is fp32 (fused_math.h) and each launcher runs on `stream` (a cudaStream_t) and returns
// "" or the CUDA error the launch reported. fused_ops.cpp wraps them as autograd functions.
#pragma once

#include <cstdint>
#include <string>

namespace gtrain {
namespace cuda_kernels {

enum class DType { f32, f16, bf16 };

// Per row r of [rows, width]: s = x + h (stored as s_type, when h is given; else s is x), then
// y = norm(s) * weight + bias, with LayerNorm (rms = false) or RMSNorm statistics over the row;
// mean[r] (LayerNorm only; may be null for RMSNorm) and rstd[r] are written for the backward.
struct NormForwardArgs {
  const void* x = nullptr;
  DType x_type = DType::f32;
  const void* h = nullptr;  // null: no residual add
  DType h_type = DType::f32;
  void* s = nullptr;  // written when h is given
  DType s_type = DType::f32;
  void* y = nullptr;
  DType y_type = DType::f32;
  const float* weight = nullptr;
  const float* bias = nullptr;  // may be null
  float* mean = nullptr;
  float* rstd = nullptr;
  int64_t rows = 0, width = 0;
  float eps = 1e-5f;
  bool rms = false;
};
std::string norm_forward(const NormForwardArgs& a, void* stream);

// The backward of norm_forward: dx = d norm(s) / ds applied to dy, plus ds (the gradient that
// reaches s by the residual path; may be null), stored as dx_type; weight's and bias's gradients
// are summed per block into dw_partial and db_partial ([norm_backward_blocks(rows), width] fp32,
// db_partial may be null), for the caller to sum over their first dimension.
struct NormBackwardArgs {
  const void* s = nullptr;  // the normalized input
  DType s_type = DType::f32;
  const void* dy = nullptr;
  DType dy_type = DType::f32;
  const void* ds = nullptr;  // may be null
  DType ds_type = DType::f32;
  void* dx = nullptr;
  DType dx_type = DType::f32;
  const float* weight = nullptr;
  const float* mean = nullptr;  // may be null for RMSNorm
  const float* rstd = nullptr;
  float* dw_partial = nullptr;
  float* db_partial = nullptr;
  int64_t rows = 0, width = 0;
  bool rms = false;
};
int64_t norm_backward_blocks(int64_t rows);
std::string norm_backward(const NormBackwardArgs& a, void* stream);

// y = gelu_tanh(x + bias) over [rows, width] (bias [width] fp32, may be null); y and x of `type`.
std::string bias_gelu_forward(const void* x, const float* bias, void* y, DType type, int64_t rows, int64_t width,
                              void* stream);
// dx = gelu_tanh'(x + bias) * dy; x, dy and dx of `type`.
std::string bias_gelu_backward(const void* x, const float* bias, const void* dy, void* dx, DType type, int64_t rows,
                               int64_t width, void* stream);

// y = silu(g) * u over n elements, all of `type`.
std::string swiglu_forward(const void* g, const void* u, void* y, DType type, int64_t n, void* stream);
// dg, du from dy (all of `type`).
std::string swiglu_backward(const void* g, const void* u, const void* dy, void* dg, void* du, DType type, int64_t n,
                            void* stream);

// Rotary embedding of x [batch, tokens, heads, dim] (dim even; y of the same shape and type) with
// tables cos and sin (fp32, [tokens, dim], or [batch, tokens, dim] when per_batch):
// y = x * cos + rotate_half(x) * sin. backward: x is the output's gradient and y the input's.
std::string rope(const void* x, const float* cos, const float* sin, void* y, DType type, int64_t batch, int64_t tokens,
                 int64_t heads, int64_t dim, bool per_batch, bool backward, void* stream);

}  // namespace cuda_kernels
}  // namespace gtrain
