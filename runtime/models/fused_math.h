// fused_math.h: the per-element and per-row arithmetic of the fused CUDA kernels, torch-free.
//
// Each function is __host__ __device__ under nvcc: the kernels (fused_norm.cu, fused_act.cu,
// fused_rope.cu, fused_adamw.cu) call them on the GPU and tests/test_fused_math.cpp calls the same
// code on the CPU against the ATen ops, so the formulas are checked where no GPU is. All arithmetic
// is fp32, whatever the tensors' storage type.
#pragma once

#include <cmath>
#include <cstdint>

#ifdef __CUDACC__
#define GT_HD __host__ __device__ __forceinline__
#else
#define GT_HD inline
#endif

namespace gtrain {
namespace fused_math {

// ---- GELU, tanh form: 0.5 x (1 + tanh(k0 (x + k1 x^3))) ----
constexpr float kGeluK0 = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluK1 = 0.044715f;

GT_HD float gelu_tanh(float x) {
  const float inner = kGeluK0 * (x + kGeluK1 * x * x * x);
  return 0.5f * x * (1.0f + tanhf(inner));
}

// d gelu_tanh(x) / dx times dy (ATen's GeluBackward formula, tanh approximation).
GT_HD float gelu_tanh_backward(float x, float dy) {
  const float x2 = x * x;
  const float inner = kGeluK0 * (x + kGeluK1 * x2 * x);
  const float t = tanhf(inner);
  const float left = 0.5f * x, right = 1.0f + t;
  const float left_d = 0.5f * right;
  const float right_d = (1.0f - t * t) * kGeluK0 * (1.0f + 3.0f * kGeluK1 * x2);
  return dy * (left_d + left * right_d);
}

// ---- SwiGLU: silu(g) * u ----
GT_HD float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}

GT_HD float swiglu(float g, float u) {
  return g * sigmoid(g) * u;
}

// Gradients of silu(g) * u with respect to g and u.
GT_HD void swiglu_backward(float g, float u, float dy, float* dg, float* du) {
  const float s = sigmoid(g);
  const float silu = g * s;
  *du = dy * silu;
  *dg = dy * u * s * (1.0f + g * (1.0f - s));
}

// ---- Rotary embedding on one pair (x[i], x[i + half]) with the tables' entries at i and i + half:
// y = x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1] (llama.cpp's apply_rotary).
GT_HD void rope_pair(float x1, float x2, float c1, float s1, float c2, float s2, float* y1, float* y2) {
  *y1 = x1 * c1 - x2 * s1;
  *y2 = x2 * c2 + x1 * s2;
}

// Its transpose: the gradient of (x1, x2) from that of (y1, y2).
GT_HD void rope_pair_backward(float d1, float d2, float c1, float s1, float c2, float s2, float* g1, float* g2) {
  *g1 = d1 * c1 + d2 * s2;
  *g2 = d2 * c2 - d1 * s1;
}

// ---- Norms over a row of `width` values, given the row's statistics ----
// LayerNorm: xhat = (x - mean) * rstd, rstd = 1 / sqrt(var + eps) (biased variance).
// RMSNorm:   xhat = x * rstd,          rstd = 1 / sqrt(mean(x^2) + eps).
GT_HD float norm_rstd(float second_moment, float eps) {
  return 1.0f / sqrtf(second_moment + eps);
}

GT_HD float norm_xhat(float x, float mean, float rstd) {
  return (x - mean) * rstd;
}

// y = xhat * w + b (b = 0 without a bias).
GT_HD float norm_out(float xhat, float w, float b) {
  return xhat * w + b;
}

// The gradient of x from g = dy * w, given the row means of g (mean_g; 0 for RMSNorm, where the
// mean does not move x) and of g * xhat (mean_gx): rstd (g - mean_g - xhat mean_gx).
GT_HD float norm_dx(float g, float xhat, float mean_g, float mean_gx, float rstd) {
  return rstd * (g - mean_g - xhat * mean_gx);
}

// One row on the host, sequential sums in double (the reference the tests use besides ATen; the
// kernels sum in fp32 across a block): writes y and returns {mean, rstd} through the pointers.
// rms: RMSNorm (mean = 0, no centring); bias may be null.
inline void norm_row_host(const float* x, const float* w, const float* b, int64_t width, float eps, bool rms, float* y,
                          float* mean_out, float* rstd_out) {
  double sum = 0, sq = 0;
  for (int64_t j = 0; j < width; ++j) sum += x[j];
  const float mean = rms ? 0.0f : static_cast<float>(sum / static_cast<double>(width));
  for (int64_t j = 0; j < width; ++j) {
    const double d = static_cast<double>(x[j]) - mean;
    sq += d * d;
  }
  const float rstd = norm_rstd(static_cast<float>(sq / static_cast<double>(width)), eps);
  for (int64_t j = 0; j < width; ++j) y[j] = norm_out(norm_xhat(x[j], mean, rstd), w[j], b ? b[j] : 0.0f);
  *mean_out = mean;
  *rstd_out = rstd;
}

// The row's backward on the host: dx from dy, and dy * xhat, dy added into dw, db (db may be null).
inline void norm_row_backward_host(const float* x, const float* w, const float* dy, int64_t width, float mean,
                                   float rstd, bool rms, float* dx, float* dw, float* db) {
  double sg = 0, sgx = 0;
  for (int64_t j = 0; j < width; ++j) {
    const float g = dy[j] * w[j];
    sg += g;
    sgx += static_cast<double>(g) * norm_xhat(x[j], mean, rstd);
  }
  const float mean_g = rms ? 0.0f : static_cast<float>(sg / static_cast<double>(width));
  const float mean_gx = static_cast<float>(sgx / static_cast<double>(width));
  for (int64_t j = 0; j < width; ++j) {
    const float xhat = norm_xhat(x[j], mean, rstd);
    dx[j] = norm_dx(dy[j] * w[j], xhat, mean_g, mean_gx, rstd);
    dw[j] += dy[j] * xhat;
    if (db) db[j] += dy[j];
  }
}

// ---- AdamW, one element (torch.optim.AdamW's update, as at::_fused_adamw_ computes it) ----
struct AdamWStep {
  float lr, beta1, beta2, weight_decay, eps;
  float bias_correction1;       // 1 - beta1^step
  float bias_correction2_sqrt;  // sqrt(1 - beta2^step)
  float grad_divisor;           // gradients are divided by it first (the clip divisor, 1: none)
};

GT_HD void adamw_element(float* p, float g, float* m, float* v, const AdamWStep& s) {
  g /= s.grad_divisor;
  float param = *p - s.lr * s.weight_decay * *p;
  const float mm = s.beta1 * *m + (1.0f - s.beta1) * g;
  const float vv = s.beta2 * *v + (1.0f - s.beta2) * g * g;
  const float denom = sqrtf(vv) / s.bias_correction2_sqrt + s.eps;
  param -= (s.lr / s.bias_correction1) * mm / denom;
  *p = param;
  *m = mm;
  *v = vv;
}

// The clip divisor from the global gradient norm (DataParallelEngine::clip_and_step's rule):
// (norm + 1e-6) / clip when norm > clip, else 1; clip <= 0 means no clipping. In double from the
// double norm, as there.
GT_HD float clip_divisor(double norm, double clip) {
  return clip > 0.0 && norm > clip ? static_cast<float>((norm + 1e-6) / clip) : 1.0f;
}

}  // namespace fused_math
}  // namespace gtrain
