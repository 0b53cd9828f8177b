// fused_loss.cpp: linear + cross-entropy a block of rows at a time, gradients computed in forward.
#include "runtime/models/fused_loss.h"

#include <c10/core/impl/LocalDispatchKeySet.h>

#include "runtime/common/torch_compat.h"
#include "runtime/core/env_switch.h"
#include "runtime/core/errors.h"
#include "runtime/core/model_stats.h"

#ifdef GTRAIN_WITH_CUDA
#include <c10/cuda/CUDAStream.h>

#include "runtime/models/softmax_xent_cuda.h"
#endif

namespace gtrain {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The dtype the output layer's products run in: autocast's lower precision when it is on for x's
// device, else x's own.
c10::ScalarType product_dtype(const torch::Tensor& x) {
  return compat::autocast_dtype(x.device().type()).value_or(x.scalar_type());
}

#ifdef GTRAIN_WITH_CUDA
// The CUDA kernel over one block's logits (contiguous [n, V], the product dtype): they become the
// gradient (softmax - onehot) in place; returns the block's summed loss (a 0-d fp32 tensor).
torch::Tensor softmax_xent_block(torch::Tensor& logits, const torch::Tensor& targets) {
  using cuda_kernels::LogitsType;
  const auto st = logits.scalar_type();
  const LogitsType type = st == torch::kBFloat16 ? LogitsType::bf16
                          : st == torch::kHalf   ? LogitsType::f16
                                                 : LogitsType::f32;
  GT_CHECK(logits.is_contiguous() && targets.is_contiguous() && targets.scalar_type() == torch::kLong &&
               (st == torch::kFloat || type != LogitsType::f32),
           "softmax_xent_block: contiguous fp32/fp16/bf16 logits and int64 targets expected");
  auto row_loss = torch::empty({logits.size(0)}, logits.options().dtype(torch::kFloat));
  const auto stream = c10::cuda::getCurrentCUDAStream(logits.device().index());
  const std::string err =
      cuda_kernels::softmax_xent_rows(logits.data_ptr(), type, targets.data_ptr<int64_t>(), row_loss.data_ptr<float>(),
                                      logits.size(0), logits.size(1), static_cast<void*>(stream.stream()));
  if (!err.empty()) throw Error(err + " (set GTRAIN_FUSED_LOSS_KERNEL=0 to use the ATen ops instead)");
  return row_loss.sum();
}
#endif

struct LinearCrossEntropy : public torch::autograd::Function<LinearCrossEntropy> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& target, int64_t block_rows, bool use_kernel) {
    const int64_t N = x.size(0), V = weight.size(0);
    const auto dt = product_dtype(x);
    // The products below are explicit about dtypes; autocast must not recast them.
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const auto xc = x.to(dt), wc = weight.to(dt);
    auto grad_x = torch::empty_like(x);
    auto grad_w = torch::zeros(weight.sizes(), weight.options().dtype(torch::kFloat));
    auto loss = torch::zeros({}, x.options().dtype(torch::kFloat));
    const int64_t rows = block_rows > 0 ? block_rows : fused_loss_block_rows(N, V, x.is_cuda());
    for (int64_t r0 = 0; r0 < N; r0 += rows) {
      const int64_t n = std::min(rows, N - r0);
      const auto xb = xc.narrow(0, r0, n);
      const auto tb = target.narrow(0, r0, n).unsqueeze(1);
      // After the product, three full passes over the block, each bandwidth-bound on a GPU: the
      // fp32 copy, the log-softmax, and exp into the product dtype (the softmax: the gradient away
      // from the targets). It was eight (logsumexp's composite of four, then sub, exp, cast): for
      // GPT-2 at batch 16 about 26 GB less memory traffic a step, by count. Each temporary is freed
      // as soon as it is used: at most two fp32 blocks live at once.
      auto logits = torch::mm(xb, wc.t());  // [n, V] in dt
#ifdef GTRAIN_WITH_CUDA
      if (use_kernel) {
        // One kernel instead of the passes below: the logits become the gradient, in dt.
        loss.add_(softmax_xent_block(logits, target.narrow(0, r0, n)));
        grad_x.narrow(0, r0, n).copy_(torch::mm(logits, wc));
        grad_w.add_(torch::mm(logits.t(), xb));
        continue;
      }
#endif
      if (logits.scalar_type() != torch::kFloat) logits = logits.to(torch::kFloat);
      auto logp = at::_log_softmax(logits, 1, /*half_to_float=*/false);
      logits.reset();
      const auto lt = logp.gather(1, tb);  // log p(target), [n, 1]
      loss.sub_(lt.sum());
      torch::Tensor pc;
      if (dt == torch::kFloat) {
        pc = logp.exp_();
      } else {
        pc = torch::empty(logp.sizes(), logp.options().dtype(dt));
        at::exp_out(pc, logp);
      }
      logp.reset();
      // d(sum of losses) / d logits = softmax - onehot: the targets' entries p - 1 in fp32, then cast.
      pc.scatter_(1, tb, lt.exp().sub_(1.0).to(dt));
      grad_x.narrow(0, r0, n).copy_(torch::mm(pc, wc));
      grad_w.add_(torch::mm(pc.t(), xb));
    }
    ctx->save_for_backward({grad_x, grad_w.to(weight.scalar_type())});
    return loss;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto g = grads[0];
    return {saved[0] * g.to(saved[0].scalar_type()), saved[1] * g.to(saved[1].scalar_type()), torch::Tensor(),
            torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool fused_loss_cuda_kernel_enabled() {
#ifdef GTRAIN_WITH_CUDA
  static const bool on = env_switch_on("GTRAIN_FUSED_LOSS_KERNEL");
  return on;
#else
  return false;
#endif
}

torch::Tensor linear_cross_entropy_sum(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& target,
                                       int64_t block_rows, FusedLossKernel kernel) {
  GT_CHECK(x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1) && target.dim() == 1 &&
               target.size(0) == x.size(0),
           "linear_cross_entropy_sum: x [N, C], weight [V, C], target [N] expected");
  const bool use_kernel = x.is_cuda() && kernel == FusedLossKernel::automatic && fused_loss_cuda_kernel_enabled();
  return LinearCrossEntropy::apply(x, weight, target.to(torch::kLong).contiguous(), block_rows, use_kernel);
}

}  // namespace gtrain
