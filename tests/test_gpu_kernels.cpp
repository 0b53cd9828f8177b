// test_gpu_kernels.cpp (label gpu, CUDA builds only): the fused CUDA ops of fused_ops.h against the
// ATen ops they replace, forward and backward, in fp32 (tight) and bf16 (loose), at odd sizes; and
// gpt and qwen3 models with each op's switch on and off (GTRAIN_FUSED_*=0 really runs the ATen ops).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "runtime/common/cuda_device.h"
#include "runtime/common/torch_compat.h"
#include "runtime/core/config/model_presets.h"
#include "runtime/models/fused_ops.h"
#include "runtime/models/gpt.h"
#include "runtime/models/llama.h"
#include "runtime/train/fused_adamw.h"
#include "tests/support/test_util.h"

namespace gtrain {
namespace {

const torch::Device kGpu(torch::kCUDA, 0);

class GpuKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
  }
};

struct Tol {
  double atol, rtol;
};
Tol tol_for(c10::ScalarType t) {
  return t == torch::kFloat ? Tol{2e-5, 2e-5} : Tol{3e-2, 3e-2};
}

void expect_close(const torch::Tensor& got, const torch::Tensor& want, Tol tol, const std::string& what) {
  ASSERT_TRUE(got.defined() && want.defined()) << what;
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const auto g = got.detach().to(torch::kCPU, torch::kDouble), w = want.detach().to(torch::kCPU, torch::kDouble);
  const auto excess = ((g - w).abs() - (tol.atol + tol.rtol * w.abs())).max().item<double>();
  EXPECT_LE(excess, 0.0) << what << ": max |got - want| " << (g - w).abs().max().item<double>();
  EXPECT_FALSE(g.isnan().any().item<bool>()) << what;
}

// Leaf copies of `ts` (same values), requiring grad.
std::vector<torch::Tensor> leaves(const std::vector<torch::Tensor>& ts) {
  std::vector<torch::Tensor> out;
  for (const auto& t : ts) out.push_back(t.detach().clone().requires_grad_(true));
  return out;
}

// Runs `fused` and `aten` on leaf copies of `in` with one output gradient each, and compares the
// outputs and the inputs' gradients. The reference runs in fp32 from the same (rounded) inputs.
template <typename F, typename A>
void compare(const std::vector<torch::Tensor>& in, F fused, A aten, c10::ScalarType type, const std::string& what) {
  auto a = leaves(in), b = leaves(in);
  std::vector<torch::Tensor> b32;
  for (auto& t : b) b32.push_back(t.to(torch::kFloat));
  const std::vector<torch::Tensor> out_f = fused(a), out_a = aten(b32);
  ASSERT_EQ(out_f.size(), out_a.size());
  torch::manual_seed(5);
  std::vector<torch::Tensor> gf, ga;
  for (const auto& o : out_f) {
    gf.push_back(torch::randn(o.sizes(), o.options().dtype(torch::kFloat)).to(o.scalar_type()));
    ga.push_back(gf.back().to(torch::kFloat));
  }
  torch::autograd::backward(out_f, gf);
  torch::autograd::backward(out_a, ga);
  const Tol tol = tol_for(type);
  for (size_t i = 0; i < out_f.size(); ++i)
    expect_close(out_f[i], out_a[i], tol, what + " output " + std::to_string(i));
  for (size_t i = 0; i < in.size(); ++i) {
    if (!b[i].grad().defined()) continue;
    expect_close(a[i].grad(), b[i].grad(), tol, what + " grad of input " + std::to_string(i));
  }
}

const std::vector<c10::ScalarType> kTypes = {torch::kFloat, torch::kBFloat16};

TEST_F(GpuKernels, AddLayerNormAndRmsNormMatchAten) {
  for (auto type : kTypes) {
    for (int64_t width : {37, 769, 1024}) {
      for (bool rms : {false, true}) {
        for (bool add : {true, false}) {
          const std::string what = std::string(rms ? "rms" : "layer") + (add ? "+add " : " ") +
                                   std::string(c10::toString(type)) + " width " + std::to_string(width);
          torch::manual_seed(width);
          auto o = torch::TensorOptions().device(kGpu);
          std::vector<torch::Tensor> in = {(torch::randn({3, 5, width}, o) * 2 + 1).to(type),
                                           torch::randn({3, 5, width}, o).to(type), torch::randn({width}, o) + 1,
                                           torch::randn({width}, o)};
          const double eps = 1e-5;
          auto fused = [&](const std::vector<torch::Tensor>& t) {
            auto r = fused_add_norm(t[0], add ? t[1] : torch::Tensor(), t[2], rms ? torch::Tensor() : t[3], eps, rms,
                                    torch::kFloat);
            return add ? std::vector<torch::Tensor>{r.sum, r.out} : std::vector<torch::Tensor>{r.out};
          };
          auto aten = [&](const std::vector<torch::Tensor>& t) {
            auto s = add ? t[0] + t[1] : t[0];
            auto y = rms ? t[2] * (s * torch::rsqrt(s.pow(2).mean(-1, true) + eps))
                         : torch::layer_norm(s, {width}, t[2], t[3], eps);
            return add ? std::vector<torch::Tensor>{s, y} : std::vector<torch::Tensor>{y};
          };
          compare(in, fused, aten, type, what);
        }
      }
    }
  }
}

TEST_F(GpuKernels, MixedResidualTypesAndBf16OutputMatchAten) {
  // Autocast's residual stream: x fp32, the branch bf16, the norm written in bf16.
  auto o = torch::TensorOptions().device(kGpu);
  torch::manual_seed(2);
  std::vector<torch::Tensor> in = {torch::randn({7, 769}, o), torch::randn({7, 769}, o).to(torch::kBFloat16),
                                   torch::randn({769}, o) + 1, torch::randn({769}, o)};
  auto fused = [](const std::vector<torch::Tensor>& t) {
    auto r = fused_add_norm(t[0], t[1], t[2], t[3], 1e-5, false, torch::kBFloat16);
    EXPECT_EQ(r.sum.scalar_type(), torch::kFloat);
    EXPECT_EQ(r.out.scalar_type(), torch::kBFloat16);
    return std::vector<torch::Tensor>{r.sum, r.out};
  };
  auto aten = [](const std::vector<torch::Tensor>& t) {
    auto s = t[0] + t[1];
    return std::vector<torch::Tensor>{s, torch::layer_norm(s, {769}, t[2], t[3], 1e-5)};
  };
  compare(in, fused, aten, torch::kBFloat16, "mixed");
}

TEST_F(GpuKernels, BiasGeluMatchesAten) {
  for (auto type : kTypes) {
    for (int64_t width : {37, 3072}) {
      auto o = torch::TensorOptions().device(kGpu);
      torch::manual_seed(width);
      std::vector<torch::Tensor> in = {(torch::randn({3, 7, width}, o) * 3).to(type), torch::randn({width}, o)};
      compare(
          in,
          [](const std::vector<torch::Tensor>& t) { return std::vector<torch::Tensor>{fused_bias_gelu(t[0], t[1])}; },
          [](const std::vector<torch::Tensor>& t) {
            return std::vector<torch::Tensor>{torch::gelu(t[0] + t[1], "tanh")};
          },
          type, "bias_gelu " + std::string(c10::toString(type)) + " width " + std::to_string(width));
    }
  }
}

TEST_F(GpuKernels, SwigluMatchesAten) {
  for (auto type : kTypes) {
    auto o = torch::TensorOptions().device(kGpu);
    torch::manual_seed(4);
    std::vector<torch::Tensor> in = {(torch::randn({3, 5, 769}, o) * 3).to(type),
                                     torch::randn({3, 5, 769}, o).to(type)};
    compare(
        in, [](const std::vector<torch::Tensor>& t) { return std::vector<torch::Tensor>{fused_swiglu(t[0], t[1])}; },
        [](const std::vector<torch::Tensor>& t) { return std::vector<torch::Tensor>{torch::silu(t[0]) * t[1]}; }, type,
        "swiglu " + std::string(c10::toString(type)));
  }
}

TEST_F(GpuKernels, RotaryMatchesAten) {
  for (auto type : kTypes) {
    for (bool per_row : {false, true}) {
      const int64_t B = 3, T = 7, H = 5, D = 38;
      auto o = torch::TensorOptions().device(kGpu);
      torch::manual_seed(6);
      auto angles = torch::rand({per_row ? B : 1, T, D / 2}, o) * 6;
      auto emb = torch::cat({angles, angles}, -1);
      auto cos = per_row ? emb.cos().unsqueeze(1).contiguous() : emb.cos()[0].contiguous();
      auto sin = per_row ? emb.sin().unsqueeze(1).contiguous() : emb.sin()[0].contiguous();
      std::vector<torch::Tensor> in = {torch::randn({B, T, H, D}, o).to(type)};
      ASSERT_TRUE(fused_rope_fits(in[0], cos, sin));
      compare(
          in,
          [&](const std::vector<torch::Tensor>& t) { return std::vector<torch::Tensor>{fused_rope(t[0], cos, sin)}; },
          [&](const std::vector<torch::Tensor>& t) {
            auto x = t[0].transpose(1, 2);  // llama.cpp's apply_rotary on [B, H, T, D]
            auto rotated = torch::cat({-x.narrow(-1, D / 2, D / 2), x.narrow(-1, 0, D / 2)}, -1);
            return std::vector<torch::Tensor>{(x * cos + rotated * sin).transpose(1, 2)};
          },
          type, "rope " + std::string(c10::toString(type)) + (per_row ? " per row" : ""));
    }
  }
}

// gtrain's AdamW kernel with the clip inside against at::_fused_adamw_ given the divisor.
TEST_F(GpuKernels, AdamWClipMatchesFusedAdamW) {
  if (!compat::kHaveFusedAdamW) GTEST_SKIP() << "no at::_fused_adamw_ in this LibTorch";
  auto o = torch::TensorOptions().device(kGpu);
  for (double clip : {0.5, 0.0, 1e6}) {
    SCOPED_TRACE("clip " + std::to_string(clip));
    torch::manual_seed(8);
    std::vector<torch::Tensor> p[2], g, m[2], v[2];
    for (int64_t n : {185, 769, 3, 70001}) {
      p[0].push_back(torch::randn({n}, o));
      g.push_back(torch::randn({n}, o) * 0.1);
      m[0].push_back(torch::randn({n}, o) * 0.01);
      v[0].push_back(torch::rand({n}, o) * 1e-3);
    }
    for (size_t i = 0; i < p[0].size(); ++i) {
      p[1].push_back(p[0][i].clone()), m[1].push_back(m[0][i].clone()), v[1].push_back(v[0][i].clone());
    }
    auto sq = torch::zeros({1}, o.dtype(torch::kDouble));
    for (const auto& t : g) sq += t.to(torch::kDouble).pow(2).sum();
    const auto norm = sq.sqrt();
    const int64_t launches = fused_adamw_clip_launches();
    fused_adamw_clip(p[0], g, m[0], v[0], 3, 3e-3, 0.9, 0.95, 0.1, 1e-8, norm, clip);
    EXPECT_EQ(fused_adamw_clip_launches(), launches + 1);
    torch::Tensor divisor;
    if (clip > 0) {
      divisor = torch::where(norm > clip, (norm + 1e-6) / clip, torch::ones_like(norm)).to(torch::kFloat).reshape({});
    }
    const auto step = torch::full({}, 3.0, o);
    compat::fused_adamw(p[1], g, m[1], v[1], std::vector<torch::Tensor>(g.size(), step), 3e-3, 0.9, 0.95, 0.1, 1e-8,
                        divisor);
    for (size_t i = 0; i < g.size(); ++i) {
      expect_close(p[0][i], p[1][i], {1e-6, 1e-5}, "param " + std::to_string(i));
      expect_close(m[0][i], m[1][i], {1e-7, 1e-5}, "exp_avg " + std::to_string(i));
      expect_close(v[0][i], v[1][i], {1e-9, 1e-5}, "exp_avg_sq " + std::to_string(i));
    }
  }
}

// A model's loss and gradients on the GPU with the fused ops (all switches on) and without (all
// "0"), and which ops' kernels ran.
struct ModelRun {
  torch::Tensor loss;
  std::vector<torch::Tensor> grads;
};

const char* const kSwitches[] = {"GTRAIN_FUSED_NORM", "GTRAIN_FUSED_GELU", "GTRAIN_FUSED_SWIGLU", "GTRAIN_FUSED_ROPE"};

ModelRun run_model(DecoderLm& m, const torch::Tensor& idx, bool fused, bool bf16) {
  for (const char* s : kSwitches) fused ? ::unsetenv(s) : ::setenv(s, "0", 1);
  m.zero_grad();
  if (bf16) compat::set_autocast(c10::DeviceType::CUDA, true, torch::kBFloat16);
  auto loss = m.loss_sum(m.forward(idx), idx).to(torch::kFloat);
  if (bf16) compat::set_autocast(c10::DeviceType::CUDA, false, torch::kBFloat16);
  loss.backward();
  ModelRun r{loss.detach(), {}};
  for (const auto& p : m.parameters()) r.grads.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
  for (const char* s : kSwitches) ::unsetenv(s);
  return r;
}

void check_model(DecoderLm& m, int64_t vocab, std::vector<FusedOp> ops, bool bf16) {
  m.to(kGpu);
  torch::manual_seed(9);
  auto idx = torch::randint(0, vocab, {2, 16}, torch::kLong).to(kGpu);
  std::vector<int64_t> before;
  for (auto op : ops) before.push_back(fused_op_launches(op));
  const ModelRun off = run_model(m, idx, false, bf16);
  for (size_t i = 0; i < ops.size(); ++i) EXPECT_EQ(fused_op_launches(ops[i]), before[i]) << "op " << i << " ran off";
  const ModelRun on = run_model(m, idx, true, bf16);
  for (size_t i = 0; i < ops.size(); ++i) EXPECT_GT(fused_op_launches(ops[i]), before[i]) << "op " << i << " not run";
  const Tol tol = bf16 ? Tol{5e-2, 5e-2} : Tol{1e-4, 1e-4};
  expect_close(on.loss, off.loss, tol, "loss");
  for (size_t i = 0; i < on.grads.size(); ++i) {
    if (!off.grads[i].defined()) continue;
    const double scale = off.grads[i].abs().max().item<double>() + 1e-6;  // gradients relative to their size
    expect_close(on.grads[i] / scale, off.grads[i] / scale, tol, "grad " + std::to_string(i));
  }
}

TEST_F(GpuKernels, GptWithTheSwitchesOnAndOff) {
  ModelConfig c;
  c.name = "gpt", c.n_layer = 2, c.n_head = 2, c.n_embd = 48, c.seq_len = 16;
  for (bool bf16 : {false, true}) {
    torch::manual_seed(1);
    Gpt m(c, test::token_spec(16, 97));
    check_model(m, 97, {FusedOp::norm, FusedOp::gelu}, bf16);
  }
}

TEST_F(GpuKernels, QwenWithTheSwitchesOnAndOff) {
  ModelConfig c = apply_model_preset(ModelConfig{}, "qwen3-tiny");  // q/k norms, rotary, SwiGLU
  c.seq_len = 16, c.n_layer = 2;
  for (bool bf16 : {false, true}) {
    torch::manual_seed(1);
    Llama m(c, test::token_spec(16, 97));
    check_model(m, 97, {FusedOp::norm, FusedOp::swiglu, FusedOp::rope}, bf16);
  }
}

}  // namespace
}  // namespace gtrain
