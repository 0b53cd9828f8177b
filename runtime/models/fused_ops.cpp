// fused_ops.cpp: the fused CUDA ops of fused_ops.h as autograd functions, and their switches.
#include "runtime/models/fused_ops.h"

#include <array>
#include <atomic>
#include <string>

#include "runtime/common/torch_compat.h"
#include "runtime/core/env_switch.h"
#include "runtime/core/errors.h"

#ifdef GTRAIN_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "runtime/models/fused_kernels_cuda.h"
#endif

namespace gtrain {
namespace {

std::array<std::atomic<int64_t>, 4> g_launches{};

const char* switch_name(FusedOp op) {
  switch (op) {
    case FusedOp::norm:
      return "GTRAIN_FUSED_NORM";
    case FusedOp::gelu:
      return "GTRAIN_FUSED_GELU";
    case FusedOp::swiglu:
      return "GTRAIN_FUSED_SWIGLU";
    case FusedOp::rope:
      return "GTRAIN_FUSED_ROPE";
  }
  return "";
}

}  // namespace

bool fused_op_enabled(FusedOp op) {
  return env_switch_on(switch_name(op));
}

int64_t fused_op_launches(FusedOp op) {
  return g_launches[static_cast<size_t>(op)].load(std::memory_order_relaxed);
}

c10::ScalarType fused_norm_out_type(const torch::Tensor& x, const torch::Tensor& weight) {
  return compat::autocast_dtype(x.device().type()).value_or(c10::promoteTypes(x.scalar_type(), weight.scalar_type()));
}

#ifdef GTRAIN_WITH_CUDA
namespace {

using cuda_kernels::DType;

bool kernel_type(c10::ScalarType t) {
  return t == torch::kFloat || t == torch::kBFloat16 || t == torch::kHalf;
}

void count(FusedOp op) {
  g_launches[static_cast<size_t>(op)].fetch_add(1, std::memory_order_relaxed);
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

DType dtype_of(const torch::Tensor& t) {
  const auto st = t.scalar_type();
  GT_CHECK(kernel_type(st), "fused op: fp32, bf16 or fp16 tensors expected");
  return st == torch::kBFloat16 ? DType::bf16 : st == torch::kHalf ? DType::f16 : DType::f32;
}

// t contiguous in a type the kernels read (fp32 for any other).
torch::Tensor kernel_input(const torch::Tensor& t) {
  return kernel_type(t.scalar_type()) ? t.contiguous() : t.to(torch::kFloat).contiguous();
}

void* stream_of(const torch::Tensor& t) {
  return static_cast<void*>(c10::cuda::getCurrentCUDAStream(t.device().index()).stream());
}

void check(const std::string& err, const char* env) {
  if (!err.empty()) throw Error(err + " (set " + std::string(env) + "=0 to use the ATen ops instead)");
}

torch::Tensor fp32(const torch::Tensor& t) {
  return t.defined() ? t.to(torch::kFloat).contiguous() : t;
}

struct AddNormFunction : public torch::autograd::Function<AddNormFunction> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& h,
                               const torch::Tensor& weight, const torch::Tensor& bias, double eps, bool rms,
                               c10::ScalarType out_type) {
    const c10::cuda::CUDAGuard guard(x.device());
    const bool add = h.defined();
    const auto xc = kernel_input(x), hc = add ? kernel_input(h) : h;
    const int64_t W = x.size(-1), rows = W == 0 ? 0 : x.numel() / W;
    const auto s_type = add ? c10::promoteTypes(xc.scalar_type(), hc.scalar_type()) : xc.scalar_type();
    const auto s = add ? torch::empty(x.sizes(), x.options().dtype(s_type)) : xc;
    auto y = torch::empty(x.sizes(), x.options().dtype(out_type));
    const auto w = fp32(weight), b = fp32(bias);
    const auto stats = x.options().dtype(torch::kFloat);
    const auto mean = rms ? torch::Tensor() : torch::empty({rows}, stats);
    const auto rstd = torch::empty({rows}, stats);
    cuda_kernels::NormForwardArgs a;
    a.x = xc.data_ptr(), a.x_type = dtype_of(xc);
    if (add) a.h = hc.data_ptr(), a.h_type = dtype_of(hc), a.s = s.data_ptr(), a.s_type = dtype_of(s);
    a.y = y.data_ptr(), a.y_type = dtype_of(y);
    a.weight = w.data_ptr<float>(), a.bias = b.defined() ? b.data_ptr<float>() : nullptr;
    a.mean = rms ? nullptr : mean.data_ptr<float>(), a.rstd = rstd.data_ptr<float>();
    a.rows = rows, a.width = W, a.eps = static_cast<float>(eps), a.rms = rms;
    check(cuda_kernels::norm_forward(a, stream_of(x)), "GTRAIN_FUSED_NORM");
    count(FusedOp::norm);
    ctx->save_for_backward({s, w, mean, rstd});
    ctx->saved_data["add"] = add;
    ctx->saved_data["rms"] = rms;
    ctx->saved_data["bias"] = bias.defined();
    ctx->saved_data["x_type"] = static_cast<int64_t>(x.scalar_type());
    ctx->saved_data["h_type"] = static_cast<int64_t>(add ? h.scalar_type() : x.scalar_type());
    ctx->saved_data["w_type"] = static_cast<int64_t>(weight.scalar_type());
    ctx->saved_data["b_type"] = static_cast<int64_t>(bias.defined() ? bias.scalar_type() : weight.scalar_type());
    ctx->saved_data["y_type"] = static_cast<int64_t>(out_type);
    if (add) return {s, y};
    return {y};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &s = saved[0], &w = saved[1], &mean = saved[2], &rstd = saved[3];
    const c10::cuda::CUDAGuard guard(s.device());
    const bool add = ctx->saved_data["add"].toBool(), rms = ctx->saved_data["rms"].toBool();
    const bool has_bias = ctx->saved_data["bias"].toBool();
    auto type = [&](const char* k) { return static_cast<c10::ScalarType>(ctx->saved_data[k].toInt()); };
    const auto ds = add && grads[0].defined() ? kernel_input(grads[0]) : torch::Tensor();
    auto dy = grads[add ? 1 : 0];
    dy = dy.defined() ? kernel_input(dy) : torch::zeros(s.sizes(), s.options().dtype(type("y_type")));
    const int64_t W = s.size(-1), rows = W == 0 ? 0 : s.numel() / W;
    auto dx = torch::empty(s.sizes(), s.options());
    const int64_t blocks = cuda_kernels::norm_backward_blocks(rows);
    auto dw_part = torch::empty({blocks, W}, s.options().dtype(torch::kFloat));
    auto db_part = has_bias ? torch::empty({blocks, W}, s.options().dtype(torch::kFloat)) : torch::Tensor();
    cuda_kernels::NormBackwardArgs a;
    a.s = s.data_ptr(), a.s_type = dtype_of(s), a.dy = dy.data_ptr(), a.dy_type = dtype_of(dy);
    if (ds.defined()) a.ds = ds.data_ptr(), a.ds_type = dtype_of(ds);
    a.dx = dx.data_ptr(), a.dx_type = dtype_of(dx);
    a.weight = w.data_ptr<float>(), a.mean = rms ? nullptr : mean.data_ptr<float>(), a.rstd = rstd.data_ptr<float>();
    a.dw_partial = dw_part.data_ptr<float>(), a.db_partial = has_bias ? db_part.data_ptr<float>() : nullptr;
    a.rows = rows, a.width = W, a.rms = rms;
    check(cuda_kernels::norm_backward(a, stream_of(s)), "GTRAIN_FUSED_NORM");
    const auto dw = dw_part.sum(0).to(type("w_type"));
    const auto db = has_bias ? db_part.sum(0).to(type("b_type")) : torch::Tensor();
    return {
        dx.to(type("x_type")), add ? dx.to(type("h_type")) : torch::Tensor(), dw, db, torch::Tensor(), torch::Tensor(),
        torch::Tensor()};
  }
};

struct BiasGeluFunction : public torch::autograd::Function<BiasGeluFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& bias) {
    const c10::cuda::CUDAGuard guard(x.device());
    const auto xc = x.contiguous(), b = fp32(bias);
    const int64_t W = x.size(-1), rows = W == 0 ? 0 : x.numel() / W;
    auto y = torch::empty_like(xc);
    check(cuda_kernels::bias_gelu_forward(xc.data_ptr(), b.defined() ? b.data_ptr<float>() : nullptr, y.data_ptr(),
                                          dtype_of(xc), rows, W, stream_of(x)),
          "GTRAIN_FUSED_GELU");
    count(FusedOp::gelu);
    ctx->save_for_backward({xc, b});
    ctx->saved_data["b_type"] = static_cast<int64_t>(bias.defined() ? bias.scalar_type() : torch::kFloat);
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &x = saved[0], &b = saved[1];
    const c10::cuda::CUDAGuard guard(x.device());
    const auto dy = grads[0].to(x.scalar_type()).contiguous();
    const int64_t W = x.size(-1), rows = W == 0 ? 0 : x.numel() / W;
    auto dx = torch::empty_like(x);
    check(cuda_kernels::bias_gelu_backward(x.data_ptr(), b.defined() ? b.data_ptr<float>() : nullptr, dy.data_ptr(),
                                           dx.data_ptr(), dtype_of(x), rows, W, stream_of(x)),
          "GTRAIN_FUSED_GELU");
    torch::Tensor db;
    if (b.defined()) {
      const auto bt = static_cast<c10::ScalarType>(ctx->saved_data["b_type"].toInt());
      db = dx.reshape({rows, W}).sum(0, false, torch::kFloat).to(bt);
    }
    return {dx, db};
  }
};

struct SwigluFunction : public torch::autograd::Function<SwigluFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& gate, const torch::Tensor& up) {
    const c10::cuda::CUDAGuard guard(gate.device());
    const auto g = gate.contiguous(), u = up.contiguous();
    auto y = torch::empty_like(g);
    check(cuda_kernels::swiglu_forward(g.data_ptr(), u.data_ptr(), y.data_ptr(), dtype_of(g), g.numel(), stream_of(g)),
          "GTRAIN_FUSED_SWIGLU");
    count(FusedOp::swiglu);
    ctx->save_for_backward({g, u});
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto &g = saved[0], &u = saved[1];
    const c10::cuda::CUDAGuard guard(g.device());
    const auto dy = grads[0].to(g.scalar_type()).contiguous();
    auto dg = torch::empty_like(g), du = torch::empty_like(u);
    check(cuda_kernels::swiglu_backward(g.data_ptr(), u.data_ptr(), dy.data_ptr(), dg.data_ptr(), du.data_ptr(),
                                        dtype_of(g), g.numel(), stream_of(g)),
          "GTRAIN_FUSED_SWIGLU");
    return {dg, du};
  }
};

// x [B, T, H, D] contiguous through the rope kernel (tables fp32 contiguous; per_batch: [B, T, D]).
torch::Tensor rope_launch(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin, bool per_batch,
                          bool backward) {
  const c10::cuda::CUDAGuard guard(x.device());
  auto y = torch::empty_like(x);
  check(cuda_kernels::rope(x.data_ptr(), cos.data_ptr<float>(), sin.data_ptr<float>(), y.data_ptr(), dtype_of(x),
                           x.size(0), x.size(1), x.size(2), x.size(3), per_batch, backward, stream_of(x)),
        "GTRAIN_FUSED_ROPE");
  return y;
}

struct RopeFunction : public torch::autograd::Function<RopeFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin, bool per_batch) {
    auto y = rope_launch(x.contiguous(), cos, sin, per_batch, false);
    count(FusedOp::rope);
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["per_batch"] = per_batch;
    return y;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto dy = grads[0].contiguous();
    return {rope_launch(dy, saved[0], saved[1], ctx->saved_data["per_batch"].toBool(), true), torch::Tensor(),
            torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace
#endif

bool fused_op_applies(FusedOp op, const torch::Tensor& t) {
#ifdef GTRAIN_WITH_CUDA
  return t.defined() && t.is_cuda() && kernel_type(t.scalar_type()) && fused_op_enabled(op);
#else
  (void)op, (void)t;
  return false;
#endif
}

#ifdef GTRAIN_WITH_CUDA
AddNormResult fused_add_norm(const torch::Tensor& x, const torch::Tensor& h, const torch::Tensor& weight,
                             const torch::Tensor& bias, double eps, bool rms, c10::ScalarType out_type) {
  GT_CHECK(
      x.dim() >= 1 && weight.dim() == 1 && weight.size(0) == x.size(-1) && (!h.defined() || h.sizes() == x.sizes()),
      "fused_add_norm: x [..., width], h like x, weight [width] expected");
  GT_CHECK(kernel_type(out_type), "fused_add_norm: an fp32, bf16 or fp16 output expected");
  const auto out = AddNormFunction::apply(x, h, weight, bias, eps, rms, out_type);
  if (h.defined()) return {out[0], out[1]};
  return {x, out[0]};
}

torch::Tensor fused_bias_gelu(const torch::Tensor& x, const torch::Tensor& bias) {
  GT_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == x.size(-1)),
           "fused_bias_gelu: bias [width] of x [..., width] expected");
  if (!kernel_type(x.scalar_type())) return torch::gelu(bias.defined() ? x + bias : x, "tanh");
  return BiasGeluFunction::apply(x, bias);
}

torch::Tensor fused_swiglu(const torch::Tensor& gate, const torch::Tensor& up) {
  GT_CHECK(gate.sizes() == up.sizes() && gate.scalar_type() == up.scalar_type(),
           "fused_swiglu: gate and up of one shape and type expected");
  return SwigluFunction::apply(gate, up);
}

bool fused_rope_fits(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  if (x.dim() != 4 || x.size(3) % 2 != 0 || cos.scalar_type() != torch::kFloat || sin.scalar_type() != torch::kFloat ||
      cos.sizes() != sin.sizes() || cos.device() != x.device() || !cos.is_contiguous() || !sin.is_contiguous()) {
    return false;
  }
  const int64_t B = x.size(0), T = x.size(1), D = x.size(3);
  if (cos.dim() == 2) return cos.size(0) == T && cos.size(1) == D;
  return cos.dim() == 4 && cos.size(0) == B && cos.size(1) == 1 && cos.size(2) == T && cos.size(3) == D;
}

torch::Tensor fused_rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  GT_CHECK(fused_rope_fits(x, cos, sin), "fused_rope: x [B, T, H, D] and fp32 tables [T, D] or [B, 1, T, D] expected");
  return RopeFunction::apply(x, cos, sin, cos.dim() == 4);
}
#else
AddNormResult fused_add_norm(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                             double, bool, c10::ScalarType) {
  throw Error("fused_add_norm: this build has no CUDA kernels");
}
torch::Tensor fused_bias_gelu(const torch::Tensor&, const torch::Tensor&) {
  throw Error("fused_bias_gelu: this build has no CUDA kernels");
}
torch::Tensor fused_swiglu(const torch::Tensor&, const torch::Tensor&) {
  throw Error("fused_swiglu: this build has no CUDA kernels");
}
bool fused_rope_fits(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&) {
  return false;
}
torch::Tensor fused_rope(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&) {
  throw Error("fused_rope: this build has no CUDA kernels");
}
#endif

}  // namespace gtrain
