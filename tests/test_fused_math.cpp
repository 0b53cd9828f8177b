// test_fused_math.cpp (label cpu): the fused CUDA kernels' arithmetic (runtime/models/fused_math.h,
// the functions the .cu files call) run on the CPU against the ATen ops it replaces: GELU (tanh),
// SwiGLU, rotary embedding, LayerNorm and RMSNorm rows with the residual add, one AdamW step with
// gradient clipping; and the fused ops' switches.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdlib>
#include <vector>

#include "runtime/models/fused_math.h"
#include "runtime/models/fused_ops.h"
#include "runtime/models/parallel_layers.h"

namespace gtrain {
namespace {

namespace fm = fused_math;

std::vector<float> values(const torch::Tensor& t) {
  auto c = t.detach().to(torch::kFloat).contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

torch::Tensor tensor_like(const std::vector<float>& v, const torch::Tensor& like) {
  return torch::tensor(v, torch::kFloat).view(like.sizes());
}

// Every element within atol + rtol |expected|; says which one is not.
void expect_close(const torch::Tensor& got, const torch::Tensor& want, double atol, double rtol, const char* what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const auto g = values(got), w = values(want);
  int bad = 0;
  for (size_t i = 0; i < g.size() && bad < 5; ++i) {
    const double tol = atol + rtol * std::abs(w[i]);
    if (!(std::abs(static_cast<double>(g[i]) - w[i]) <= tol)) {
      ADD_FAILURE() << what << "[" << i << "]: " << g[i] << " vs ATen " << w[i];
      ++bad;
    }
  }
}

// Inputs over the whole useful range: a sweep of [-8, 8] and normal draws.
torch::Tensor inputs(int64_t n) {
  torch::manual_seed(7);
  return torch::cat({torch::linspace(-8, 8, n), torch::randn({n}) * 2});
}

TEST(FusedMath, GeluTanhMatchesAtenForwardAndBackward) {
  auto x = inputs(4001).requires_grad_(true);
  auto y = torch::gelu(x, "tanh");
  auto dy = torch::randn_like(x);
  auto dx = torch::autograd::grad({y}, {x}, {dy})[0];
  const auto xv = values(x), dyv = values(dy);
  std::vector<float> yv(xv.size()), dxv(xv.size());
  for (size_t i = 0; i < xv.size(); ++i) {
    yv[i] = fm::gelu_tanh(xv[i]);
    dxv[i] = fm::gelu_tanh_backward(xv[i], dyv[i]);
  }
  expect_close(tensor_like(yv, x), y, 1e-6, 1e-5, "gelu");
  // ATen's vectorised tanh reaches -1 exactly near x = -5 (gradient 0); tanhf leaves ~3e-6 there.
  expect_close(tensor_like(dxv, x), dx, 5e-6, 1e-5, "gelu grad");
}

TEST(FusedMath, SwigluMatchesAtenForwardAndBackward) {
  auto g = inputs(2001).requires_grad_(true);
  auto u = (torch::randn_like(g) * 3).requires_grad_(true);
  auto y = torch::silu(g) * u;
  auto dy = torch::randn_like(y);
  auto grads = torch::autograd::grad({y}, {g, u}, {dy});
  const auto gv = values(g), uv = values(u), dyv = values(dy);
  std::vector<float> yv(gv.size()), dgv(gv.size()), duv(gv.size());
  for (size_t i = 0; i < gv.size(); ++i) {
    yv[i] = fm::swiglu(gv[i], uv[i]);
    fm::swiglu_backward(gv[i], uv[i], dyv[i], &dgv[i], &duv[i]);
  }
  expect_close(tensor_like(yv, g), y, 1e-6, 1e-5, "swiglu");
  expect_close(tensor_like(dgv, g), grads[0], 1e-6, 1e-5, "swiglu grad gate");
  expect_close(tensor_like(duv, u), grads[1], 1e-6, 1e-5, "swiglu grad up");
}

// llama.cpp's apply_rotary on x [B, H, T, D] with tables [T, D].
torch::Tensor aten_rotary(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  auto rotated = torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos + rotated * sin;
}

TEST(FusedMath, RotaryMatchesAtenForwardAndBackward) {
  const int64_t B = 2, H = 3, T = 5, D = 38;  // odd counts, an odd half width (19)
  torch::manual_seed(3);
  auto inv = 1.0 / torch::pow(10000.0, torch::arange(0, D, 2, torch::kFloat) / static_cast<double>(D));
  auto freqs = torch::arange(7, 7 + T, torch::kFloat).unsqueeze(1) * inv.unsqueeze(0);
  auto emb = torch::cat({freqs, freqs}, -1);
  // Different tables for the two halves too: the kernel reads each entry where it applies.
  auto cos = emb.cos() * torch::linspace(0.5, 1.5, D), sin = emb.sin();
  auto x = torch::randn({B, H, T, D}).requires_grad_(true);
  auto y = aten_rotary(x, cos, sin);
  auto dy = torch::randn_like(y);
  auto dx = torch::autograd::grad({y}, {x}, {dy})[0];
  const auto xv = values(x), dyv = values(dy), cv = values(cos), sv = values(sin);
  std::vector<float> yv(xv.size()), dxv(xv.size());
  const int64_t half = D / 2;
  for (int64_t row = 0; row < B * H * T; ++row) {
    const int64_t t = row % T, o = row * D;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t a = t * D + i, b = a + half;
      fm::rope_pair(xv[o + i], xv[o + i + half], cv[a], sv[a], cv[b], sv[b], &yv[o + i], &yv[o + i + half]);
      fm::rope_pair_backward(dyv[o + i], dyv[o + i + half], cv[a], sv[a], cv[b], sv[b], &dxv[o + i],
                             &dxv[o + i + half]);
    }
  }
  expect_close(tensor_like(yv, x), y, 1e-6, 1e-5, "rope");
  expect_close(tensor_like(dxv, x), dx, 1e-6, 1e-5, "rope grad");
}

// One norm over rows of x + h, host rows (fused_math.h) against ATen, forward and backward.
void check_norm(int64_t rows, int64_t width, bool rms) {
  SCOPED_TRACE((rms ? "rms " : "layer ") + std::to_string(rows) + "x" + std::to_string(width));
  torch::manual_seed(static_cast<uint64_t>(rows * 1000 + width));
  const double eps = 1e-5;
  auto x = (torch::randn({rows, width}) * 3 + 1).requires_grad_(true);
  auto h = torch::randn({rows, width}).requires_grad_(true);
  auto w = (torch::randn({width}) * 0.5 + 1).requires_grad_(true);
  auto b = torch::randn({width}).requires_grad_(true);
  auto s = x + h;
  torch::Tensor y;
  if (rms) {  // llama.cpp's RmsNorm
    y = w * (s * torch::rsqrt(s.pow(2).mean(-1, true) + eps));
  } else {
    y = torch::layer_norm(s, {width}, w, b, eps);
  }
  auto dy = torch::randn_like(y), ds = torch::randn_like(s);  // ds: the residual path's gradient
  auto grads = torch::autograd::grad({y, s}, {x, h, w, b}, {dy, ds}, false, false, /*allow_unused=*/true);

  const auto sv = values(s), wv = values(w), bv = values(b), dyv = values(dy), dsv = values(ds);
  std::vector<float> yv(sv.size()), dxv(sv.size()), dwv(width, 0.0f), dbv(width, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t o = r * width;
    float mean = 0, rstd = 0;
    fm::norm_row_host(&sv[o], wv.data(), rms ? nullptr : bv.data(), width, static_cast<float>(eps), rms, &yv[o], &mean,
                      &rstd);
    fm::norm_row_backward_host(&sv[o], wv.data(), &dyv[o], width, mean, rstd, rms, &dxv[o], dwv.data(),
                               rms ? nullptr : dbv.data());
    for (int64_t j = 0; j < width; ++j) dxv[o + j] += dsv[o + j];  // the kernel's residual gradient
  }
  expect_close(tensor_like(yv, y), y, 2e-5, 2e-5, "norm");
  expect_close(tensor_like(dxv, s), grads[0], 5e-5, 5e-5, "norm grad x");
  expect_close(tensor_like(dxv, s), grads[1], 5e-5, 5e-5, "norm grad h");
  expect_close(tensor_like(dwv, w), grads[2], 5e-5, 5e-5, "norm grad weight");
  if (!rms) expect_close(tensor_like(dbv, b), grads[3], 5e-5, 5e-5, "norm grad bias");
}

TEST(FusedMath, LayerNormWithResidualMatchesAten) {
  for (int64_t width : {1, 37, 64, 769}) check_norm(3, width, false);
  check_norm(17, 256, false);
}

TEST(FusedMath, RmsNormWithResidualMatchesAten) {
  for (int64_t width : {1, 37, 64, 769}) check_norm(3, width, true);
  check_norm(17, 256, true);
}

// One AdamW step after clipping: fused_math.h's element update with the clip divisor against
// torch::nn::utils::clip_grad_norm_ then torch::optim::AdamW.
void check_adamw(double clip, int steps) {
  SCOPED_TRACE("clip " + std::to_string(clip));
  torch::manual_seed(11);
  auto p = torch::randn({37, 5}), q = torch::randn({769});
  std::vector<torch::Tensor> ref{p.clone().requires_grad_(true), q.clone().requires_grad_(true)};
  torch::optim::AdamW opt(ref, torch::optim::AdamWOptions(3e-3).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.1));
  std::vector<std::vector<float>> mine{values(p), values(q)}, m(2), v(2);
  for (int k = 0; k < 2; ++k) m[k].assign(mine[k].size(), 0.0f), v[k].assign(mine[k].size(), 0.0f);
  for (int step = 1; step <= steps; ++step) {
    std::vector<torch::Tensor> g{torch::randn({37, 5}) * 0.3, torch::randn({769}) * 0.3};
    double sq = 0;
    for (const auto& t : g) sq += t.to(torch::kDouble).pow(2).sum().item<double>();
    const float divisor = fm::clip_divisor(std::sqrt(sq), clip);
    for (int k = 0; k < 2; ++k) ref[static_cast<size_t>(k)].mutable_grad() = g[static_cast<size_t>(k)].clone();
    if (clip > 0) torch::nn::utils::clip_grad_norm_(ref, clip);
    opt.step();
    fm::AdamWStep s{3e-3f, 0.9f, 0.95f, 0.1f, 1e-8f, 0, 0, divisor};
    s.bias_correction1 = static_cast<float>(1.0 - std::pow(0.9, step));
    s.bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(0.95, step)));
    for (int k = 0; k < 2; ++k) {
      const auto gv = values(g[static_cast<size_t>(k)]);
      for (size_t i = 0; i < gv.size(); ++i) fm::adamw_element(&mine[k][i], gv[i], &m[k][i], &v[k][i], s);
    }
  }
  expect_close(tensor_like(mine[0], p), ref[0], 1e-6, 1e-5, "adamw p");
  expect_close(tensor_like(mine[1], q), ref[1], 1e-6, 1e-5, "adamw q");
  // The steps moved the parameters: a no-op update would not pass by accident.
  EXPECT_GT((ref[1] - q).abs().max().item<float>(), 1e-3f);
}

TEST(FusedMath, AdamWStepWithClippingMatchesTorchOptim) {
  check_adamw(0.5, 3);  // the norm (~0.3 sqrt(954) ~ 9) is clipped
  check_adamw(0.0, 3);  // no clipping
  EXPECT_FLOAT_EQ(fm::clip_divisor(2.0f, 1.0f), (2.0f + 1e-6f) / 1.0f);
  EXPECT_FLOAT_EQ(fm::clip_divisor(0.5f, 1.0f), 1.0f);
}

// The fused bias + GELU path's inputs: the layer less its bias, and the bias it adds, sum to the
// layer's output (with and without a LoRA adapter, whose update the unbiased output keeps).
TEST(FusedMath, ColumnLinearWithoutBiasPlusItsBiasIsTheLayer) {
  torch::manual_seed(4);
  for (bool lora : {false, true}) {
    ColumnParallelLinear fc(37, 23, true);
    if (lora) {
      fc->add_lora(LoraOptions{});
      torch::NoGradGuard ng;
      fc->lora_B.normal_();  // B starts at 0: make the adapter's update count
    }
    const auto x = torch::randn({3, 5, 37});
    const auto whole = fc->forward(x);
    const auto parts = fc->forward_unbiased(x) + fc->bias_as_added(x);
    EXPECT_LT((whole - parts).abs().max().item<double>(), 1e-5) << (lora ? "lora" : "plain");
    EXPECT_GT((whole - fc->forward_unbiased(x)).abs().max().item<double>(), 1e-3);  // the bias is not in it
  }
}

TEST(FusedMath, FusedOpsNeverApplyToCpuTensorsAndFollowTheirSwitches) {
  const auto x = torch::randn({3, 37});
  for (auto op : {FusedOp::norm, FusedOp::gelu, FusedOp::swiglu, FusedOp::rope}) EXPECT_FALSE(fused_op_applies(op, x));
  ::setenv("GTRAIN_FUSED_SWIGLU", "0", 1);
  EXPECT_FALSE(fused_op_enabled(FusedOp::swiglu));
  EXPECT_TRUE(fused_op_enabled(FusedOp::gelu));
  ::unsetenv("GTRAIN_FUSED_SWIGLU");
  EXPECT_TRUE(fused_op_enabled(FusedOp::swiglu));
}

}  // namespace
}  // namespace gtrain
