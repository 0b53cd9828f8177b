// recompute.cpp: the recompute autograd function.
#include "runtime/models/recompute.h"

#include <ATen/CPUGeneratorImpl.h>

#include "runtime/models/keyed_dropout.h"
#include "runtime/models/token_layout.h"

namespace gtrain {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

struct RecomputeBlock : public torch::autograd::Function<RecomputeBlock> {
  // `anchor`: an empty tensor that needs a gradient, so that the result does (below); never read.
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& anchor,
                               int64_t block) {
    auto gen = at::detail::getDefaultCPUGenerator();
    ctx->saved_data["block"] = block;
    ctx->saved_data["rng"] = gen.get_state();
    const DropoutRows rows = current_dropout_rows();
    ctx->saved_data["rows_active"] = rows.active;
    ctx->saved_data["rows_seed"] = static_cast<int64_t>(rows.seed);
    ctx->saved_data["rows_first"] = rows.first_sample;
    const TokenLayout& layout = current_token_layout();  // packed rows: positions and trained targets
    ctx->saved_data["positions"] = layout.positions;
    ctx->saved_data["trained"] = layout.trained;
    ctx->save_for_backward({x});
    torch::NoGradGuard ng;
    return (*reinterpret_cast<const BlockFunction*>(block))(x);
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto x = ctx->get_saved_variables()[0];
    auto gen = at::detail::getDefaultCPUGenerator();
    auto now = gen.get_state();
    gen.set_state(ctx->saved_data["rng"].toTensor());
    torch::Tensor in, out;
    {
      // Backward may run on another thread (CUDA's autograd device thread): the rows and the token
      // layout travel here.
      DropoutRowsScope rows(DropoutRows{ctx->saved_data["rows_active"].toBool(),
                                        static_cast<uint64_t>(ctx->saved_data["rows_seed"].toInt()),
                                        ctx->saved_data["rows_first"].toInt()});
      TokenLayoutScope layout(
          TokenLayout{ctx->saved_data["positions"].toTensor(), ctx->saved_data["trained"].toTensor()});
      torch::AutoGradMode on(true);
      in = x.detach().requires_grad_(ctx->needs_input_grad(0));
      out = (*reinterpret_cast<const BlockFunction*>(ctx->saved_data["block"].toInt()))(in);
    }
    gen.set_state(now);
    // Accumulates the block's parameter gradients (their hooks fire here) and the input's.
    torch::autograd::backward({out}, {grads[0]});
    return {in.requires_grad() ? in.grad() : torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor recompute_in_backward(const BlockFunction& block, const torch::Tensor& x) {
  // A frozen embedding (LoRA) leaves the first block's input without a gradient; a function none of
  // whose inputs needs one returns a result without a graph, and the block's trained adapters would
  // get no gradient ("element 0 of tensors does not require grad"). The anchor makes the result
  // need one without making backward compute the input's gradient nobody reads.
  static const torch::Tensor anchor = torch::empty({0}).requires_grad_(true);
  return RecomputeBlock::apply(x, anchor, reinterpret_cast<int64_t>(&block));
}

}  // namespace gtrain
