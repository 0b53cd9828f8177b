// fused_ops.h: the models' fused CUDA ops (residual add + LayerNorm/RMSNorm, bias + GELU, SwiGLU,
// rotary embedding) as autograd functions over fused_kernels_cuda.h, each behind an env switch.
//
// A model uses one when fused_op_applies(op, t): t on CUDA, fp32, bf16 or fp16, a CUDA build, and
// the op's switch not "0" (GTRAIN_FUSED_NORM, GTRAIN_FUSED_GELU, GTRAIN_FUSED_SWIGLU,
// GTRAIN_FUSED_ROPE; read at each call). Otherwise it runs its ATen ops, unchanged: CPU runs
// never reach these functions. Arithmetic is fp32 (runtime/models/fused_math.h).
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace gtrain {

enum class FusedOp { norm, gelu, swiglu, rope };

// The op's env switch is not "0" (true in CPU-only builds too: the switch only says what is allowed).
bool fused_op_enabled(FusedOp op);
// Whether a model's op on `t` runs the fused kernel (see above).
bool fused_op_applies(FusedOp op, const torch::Tensor& t);
// How many times the op's forward kernel has run in this process (for tests of the switches).
int64_t fused_op_launches(FusedOp op);

struct AddNormResult {
  torch::Tensor sum;  // x + h (x itself when h is undefined)
  torch::Tensor out;  // norm(sum) * weight + bias
};

// LayerNorm (rms = false; bias may be undefined) or RMSNorm (rms = true, no bias) over the last
// dimension of s = x + h (h undefined: s = x), in one kernel each way. s has x's and h's promoted
// type; out has `out_type` (fp32, bf16 or fp16). weight and bias are read as fp32.
AddNormResult fused_add_norm(const torch::Tensor& x, const torch::Tensor& h, const torch::Tensor& weight,
                             const torch::Tensor& bias, double eps, bool rms, c10::ScalarType out_type);
// The type a norm's output gets: autocast's lower precision when autocast is on for x's device (the
// next matrix product casts to it anyway), else x's type promoted with weight's (ATen's).
c10::ScalarType fused_norm_out_type(const torch::Tensor& x, const torch::Tensor& weight);

// gelu_tanh(x + bias) over x [..., width] (bias [width] or undefined), x's type.
torch::Tensor fused_bias_gelu(const torch::Tensor& x, const torch::Tensor& bias);
// silu(gate) * up, tensors of one shape and type.
torch::Tensor fused_swiglu(const torch::Tensor& gate, const torch::Tensor& up);
// Whether fused_rope can take x [B, T, H, D] with these tables ([T, D], or [B, 1, T, D] per row).
bool fused_rope_fits(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);
// x * cos + rotate_half(x) * sin for x [B, T, H, D] (tokens before heads; returned so), the tables'
// row t at token t.
torch::Tensor fused_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin);

}  // namespace gtrain
