// parallel_layers.cpp: tensor-parallel layers and their autograd functions.
#include "runtime/models/parallel_layers.h"

#include <cmath>

#include "runtime/common/torch_compat.h"
#include "runtime/core/errors.h"
#include "runtime/models/keyed_dropout.h"

namespace gtrain {

using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;

namespace {

// The communicator travels through the autograd context as an address: the layer that owns the
// TpGroup outlives every graph it builds.
int64_t comm_id(const TpGroup& g) {
  return reinterpret_cast<int64_t>(g.comm.get());
}
Communicator& comm_of(AutogradContext* ctx) {
  return *reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt());
}

// Both functions work in place, without a copy of the activation: every copy of a [B, T, C]
// tensor is a block of memory the heap must find again (tests/test_multiproc.cpp measures the peak).
// Autograd returns an unmodified input as a view of itself; the gradient reaching copy_to_tp is the
// column-parallel layer's input gradient, which nothing else holds.
struct CopyToTp : public torch::autograd::Function<CopyToTp> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return x;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto g = grads[0].contiguous();
    comm_of(ctx).allreduce(g, ReduceOp::kSum);
    return {g, torch::Tensor()};
  }
};

// Sums the partial products in place: `x` is the row-parallel matmul's fresh output (nothing saved
// it for backward), marked dirty so autograd knows it changed.
struct ReduceFromTp : public torch::autograd::Function<ReduceFromTp> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, int64_t comm) {
    GT_CHECK(x.is_contiguous(), "reduce_from_tp needs a contiguous tensor");
    reinterpret_cast<Communicator*>(comm)->allreduce(x, ReduceOp::kSum);
    ctx->mark_dirty({x});
    return x;
  }
  static tensor_list backward(AutogradContext*, tensor_list grads) { return {grads[0], torch::Tensor()}; }
};

// All-gathers the last dimension; backward returns this rank's slice of the gradient.
struct GatherFromTp : public torch::autograd::Function<GatherFromTp> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, int64_t comm) {
    auto& c = *reinterpret_cast<Communicator*>(comm);
    ctx->saved_data["rank"] = static_cast<int64_t>(c.rank());
    ctx->saved_data["part"] = x.size(-1);
    auto moved = x.movedim(-1, 0).contiguous();
    std::vector<int64_t> shape(moved.sizes().begin(), moved.sizes().end());
    shape[0] *= c.size();
    auto out = torch::empty(shape, moved.options());
    c.allgather(moved, out);
    return out.movedim(0, -1).contiguous();
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    const int64_t part = ctx->saved_data["part"].toInt(), rank = ctx->saved_data["rank"].toInt();
    return {grads[0].narrow(-1, rank * part, part).contiguous(), torch::Tensor()};
  }
};

// Same arithmetic as log_softmax + nll_loss: loss = log(sum exp(x - max)) - (x_target - max),
// with the max, the sum and the target's logit reduced over the vocabulary shards.
struct VocabParallelCrossEntropy : public torch::autograd::Function<VocabParallelCrossEntropy> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& logits, const torch::Tensor& target,
                               int64_t vocab_start, int64_t comm) {
    auto& c = *reinterpret_cast<Communicator*>(comm);
    auto x = logits.to(torch::kFloat);
    auto maxv = std::get<0>(x.max(-1)).contiguous();
    c.allreduce(maxv, ReduceOp::kMax);
    auto shifted = x - maxv.unsqueeze(-1);
    const int64_t V = x.size(-1);
    auto local = target - vocab_start;
    auto outside = (local < 0).logical_or(local >= V);
    auto idx = local.masked_fill(outside, 0);
    auto picked = shifted.gather(-1, idx.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0).contiguous();
    c.allreduce(picked, ReduceOp::kSum);
    auto ex = shifted.exp();
    auto sum = ex.sum(-1).contiguous();
    c.allreduce(sum, ReduceOp::kSum);
    auto loss = sum.log() - picked;
    ex.div_(sum.unsqueeze(-1));
    ctx->save_for_backward({ex, idx, outside});
    return loss;
  }
  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    auto saved = ctx->get_saved_variables();
    auto grad = saved[0].clone();
    auto hit = saved[2].logical_not().to(grad.scalar_type()).unsqueeze(-1);
    grad.scatter_add_(-1, saved[1].unsqueeze(-1), -hit);
    grad.mul_(grads[0].unsqueeze(-1));
    return {grad, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// This rank's slice along `dim` of each of `parts` equal blocks, concatenated.
torch::Tensor take_slice(const torch::Tensor& full, int64_t dim, int64_t parts, const TpGroup& g) {
  const int64_t part = full.size(dim) / parts, n = part / g.size();
  std::vector<torch::Tensor> pieces;
  for (int64_t p = 0; p < parts; ++p) pieces.push_back(full.narrow(dim, p * part + g.rank() * n, n));
  return torch::cat(pieces, dim).contiguous();
}

void check_divides(const TpGroup& g, int64_t n, const std::string& what) {
  if (n % g.size() != 0) {
    throw ConfigError("tp = " + std::to_string(g.size()) + " must divide " + what + " (" + std::to_string(n) + ")");
  }
}

void set_slice(torch::Tensor& p, const torch::Tensor& slice) {
  torch::NoGradGuard ng;
  p.set_data(slice);
}

TensorPlacement row_blocks(const torch::Tensor& local, std::vector<int64_t> global_shape, int64_t parts,
                           const TpGroup& g) {
  TensorPlacement pl;
  pl.global_shape = global_shape;
  const int64_t part = global_shape[0] / parts, n = part / g.size();
  for (int64_t p = 0; p < parts; ++p) {
    TensorRegion r;
    r.offsets.assign(global_shape.size(), 0);
    r.offsets[0] = p * part + g.rank() * n;
    r.shape = global_shape;
    r.shape[0] = n;
    pl.regions.push_back(r);
  }
  (void)local;
  return pl;
}

// A frozen base weight held in another dtype than its input (LoRA's bf16 base on fp32 activations):
// the input's type, unless autocast casts both anyway.
torch::Tensor as_input_type(const torch::Tensor& w, const torch::Tensor& x) {
  if (!w.defined() || w.scalar_type() == x.scalar_type()) return w;
  if (compat::autocast_enabled(x.device().type())) return w;
  return w.to(x.scalar_type());
}

// A's and B's initial values (LoRA's convention, as PEFT's): A kaiming-uniform with a = sqrt(5)
// (bound 1 / sqrt(in), torch.nn.Linear's default) or normal with std 1 / r; B zero, so the adapted
// layer starts as the base.
void init_lora(torch::nn::Module& m, torch::Tensor& a, torch::Tensor& b, int64_t in, int64_t out,
               const LoraOptions& o) {
  torch::NoGradGuard ng;
  auto A = torch::empty({o.rank, in});
  if (o.gaussian) {
    A.normal_(0.0, 1.0 / static_cast<double>(o.rank));
  } else {
    torch::nn::init::kaiming_uniform_(A, std::sqrt(5.0));
  }
  a = m.register_parameter("lora_A", A);
  b = m.register_parameter("lora_B", torch::zeros({out, o.rank}));
}

// The adapter's input: x with LoRA dropout (keyed, so every layout draws the same mask). `feature0`
// >= 0: x holds input features [feature0, feature0 + x.size(-1)) of `in` (a row-parallel slice).
torch::Tensor lora_input(const torch::Tensor& x, const LoraOptions& o, bool training, int64_t in, int64_t feature0) {
  if (o.dropout <= 0 || !training) return x;
  if (feature0 < 0 || !current_dropout_rows().active) return keyed_dropout(x, o.dropout, o.site, true);
  auto shape = x.sizes().vec();
  shape.back() = in;
  auto keep = keyed_drop_mask(shape, o.dropout, o.site, x.device()).logical_not();
  keep = keep.narrow(-1, feature0, x.size(-1));
  return x * keep.to(x.scalar_type()) * (1.0 / (1.0 - o.dropout));
}

}  // namespace

torch::Tensor copy_to_tp(const torch::Tensor& x, const TpGroup& g) {
  if (g.size() == 1) return x;
  return CopyToTp::apply(x, comm_id(g));
}

torch::Tensor reduce_from_tp(const torch::Tensor& x, const TpGroup& g) {
  if (g.size() == 1) return x;
  return ReduceFromTp::apply(x, comm_id(g));
}

torch::Tensor gather_last_dim_tp(const torch::Tensor& x, const TpGroup& g) {
  if (g.size() == 1) return x;
  torch::NoGradGuard ng;
  auto moved = x.movedim(-1, 0).contiguous();
  std::vector<int64_t> shape(moved.sizes().begin(), moved.sizes().end());
  shape[0] *= g.size();
  auto out = torch::empty(shape, moved.options());
  g.comm->allgather(moved, out);
  return out.movedim(0, -1);
}

torch::Tensor gather_from_tp(const torch::Tensor& x, const TpGroup& g) {
  if (g.size() == 1) return x;
  return GatherFromTp::apply(x, comm_id(g));
}

torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& logits, const torch::Tensor& target,
                                           int64_t vocab_start, const TpGroup& g) {
  GT_CHECK(g.size() > 1, "vocab_parallel_cross_entropy needs a tensor-parallel group");
  return VocabParallelCrossEntropy::apply(logits, target, vocab_start, comm_id(g));
}

int64_t shard_parallel_layers(torch::nn::Module& m, const TpGroup& g) {
  int64_t n = 0;
  for (const auto& kv : m.named_modules()) {
    if (auto* layer = dynamic_cast<TensorParallelLayer*>(kv.value().get())) {
      layer->shard(g);
      ++n;
    }
  }
  return n;
}

std::map<std::string, TensorPlacement> parallel_layer_placements(torch::nn::Module& m) {
  std::map<std::string, TensorPlacement> out;
  for (const auto& kv : m.named_modules()) {
    if (auto* layer = dynamic_cast<TensorParallelLayer*>(kv.value().get())) layer->add_placements(kv.key(), out);
  }
  return out;
}

// ---- ColumnParallelLinear

ColumnParallelLinearImpl::ColumnParallelLinearImpl(int64_t in, int64_t out, bool with_bias, int64_t parts)
    : in_features(in), out_features(out), fused_parts(parts) {
  // The same parameters and random draws as torch::nn::Linear(in, out).
  torch::nn::Linear init(torch::nn::LinearOptions(in, out).bias(with_bias));
  weight = register_parameter("weight", init->weight.detach().clone());
  if (with_bias) bias = register_parameter("bias", init->bias.detach().clone());
}

torch::Tensor ColumnParallelLinearImpl::forward(const torch::Tensor& x) {
  return forward_copied(copy_to_tp(x, group));
}

torch::Tensor ColumnParallelLinearImpl::forward_copied(const torch::Tensor& x) {
  return forward_impl(x, true);
}

torch::Tensor ColumnParallelLinearImpl::forward_unbiased(const torch::Tensor& x) {
  return forward_impl(copy_to_tp(x, group), false);
}

torch::Tensor ColumnParallelLinearImpl::bias_as_added(const torch::Tensor& x) {
  const auto b = as_input_type(bias, x);
  return b.defined() && replicate && group.size() != 1 ? copy_to_tp(b, group) : b;
}

torch::Tensor ColumnParallelLinearImpl::forward_impl(const torch::Tensor& x, bool with_bias) {
  const auto w = as_input_type(weight, x), b = with_bias ? as_input_type(bias, x) : torch::Tensor();
  torch::Tensor y;
  if (!replicate || group.size() == 1) {
    y = torch::linear(x, w, b);
  } else {
    y = torch::linear(x, copy_to_tp(w, group), b.defined() ? copy_to_tp(b, group) : b);
  }
  if (!lora_A.defined()) return y;
  // Each rank's output rows give part of A's gradient: copy_to_tp sums it (and B's, when replicated).
  auto h = torch::linear(lora_input(x, lora, is_training(), in_features, -1), copy_to_tp(lora_A, group));
  auto up = torch::linear(h, replicate ? copy_to_tp(lora_B, group) : lora_B);
  return y + up * lora.scaling;
}

void ColumnParallelLinearImpl::add_lora(const LoraOptions& o) {
  GT_CHECK(group.size() == 1, "add_lora after shard()");
  lora = o;
  init_lora(*this, lora_A, lora_B, in_features, out_features, o);
}

void ColumnParallelLinearImpl::shard(const TpGroup& g) {
  GT_CHECK(group.size() == 1, "ColumnParallelLinear sharded twice");
  if (replicate) {
    group = g;
    return;
  }
  check_divides(g, out_features / fused_parts, "the output features of each part of a column-parallel layer");
  group = g;
  set_slice(weight, take_slice(weight.detach(), 0, fused_parts, g));
  if (bias.defined()) set_slice(bias, take_slice(bias.detach(), 0, fused_parts, g));
  if (lora_B.defined()) set_slice(lora_B, take_slice(lora_B.detach(), 0, fused_parts, g));
}

void ColumnParallelLinearImpl::add_placements(const std::string& prefix,
                                              std::map<std::string, TensorPlacement>& out) const {
  if (group.size() == 1 || replicate) return;
  out[prefix + ".weight"] = row_blocks(weight, {out_features, in_features}, fused_parts, group);
  if (bias.defined()) out[prefix + ".bias"] = row_blocks(bias, {out_features}, fused_parts, group);
  if (lora_B.defined()) out[prefix + ".lora_B"] = row_blocks(lora_B, {out_features, lora.rank}, fused_parts, group);
}

// ---- RowParallelLinear

RowParallelLinearImpl::RowParallelLinearImpl(int64_t in, int64_t out, bool with_bias)
    : in_features(in), out_features(out) {
  torch::nn::Linear init(torch::nn::LinearOptions(in, out).bias(with_bias));
  weight = register_parameter("weight", init->weight.detach().clone());
  if (with_bias) bias = register_parameter("bias", init->bias.detach().clone());
}

torch::Tensor RowParallelLinearImpl::forward(const torch::Tensor& x) {
  const auto w = as_input_type(weight, x), b = as_input_type(bias, x);
  torch::Tensor partial = torch::linear(x, w, group.size() == 1 ? b : torch::Tensor());
  if (lora_A.defined()) {
    // This rank's input features give part of the rank-wide product; it joins the partial output
    // before the all-reduce, so B (whole) sees part of its gradient on each rank: copy_to_tp sums it.
    const int64_t feature0 = group.size() == 1 ? -1 : group.rank() * x.size(-1);
    auto h = torch::linear(lora_input(x, lora, is_training(), in_features, feature0), lora_A);
    partial = partial + torch::linear(h, copy_to_tp(lora_B, group)) * lora.scaling;
  }
  if (group.size() == 1) return partial;
  auto y = reduce_from_tp(partial, group);
  if (!b.defined()) return y;
  // In place when the types agree (fp32): no second [.., out] tensor; under autocast y + bias promotes.
  return y.scalar_type() == b.scalar_type() ? y.add_(b) : y + b;
}

void RowParallelLinearImpl::add_lora(const LoraOptions& o) {
  GT_CHECK(group.size() == 1, "add_lora after shard()");
  lora = o;
  init_lora(*this, lora_A, lora_B, in_features, out_features, o);
}

void RowParallelLinearImpl::shard(const TpGroup& g) {
  GT_CHECK(group.size() == 1, "RowParallelLinear sharded twice");
  check_divides(g, in_features, "the input features of a row-parallel layer");
  group = g;
  set_slice(weight, take_slice(weight.detach(), 1, 1, g));  // the bias stays whole (added after the reduce)
  if (lora_A.defined()) set_slice(lora_A, take_slice(lora_A.detach(), 1, 1, g));
}

void RowParallelLinearImpl::add_placements(const std::string& prefix,
                                           std::map<std::string, TensorPlacement>& out) const {
  if (group.size() == 1) return;
  const int64_t n = in_features / group.size();
  out[prefix + ".weight"] = {{out_features, in_features}, {{{0, group.rank() * n}, {out_features, n}}}};
  if (lora_A.defined()) out[prefix + ".lora_A"] = {{lora.rank, in_features}, {{{0, group.rank() * n}, {lora.rank, n}}}};
}

// ---- VocabParallelEmbedding

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(int64_t vocab_, int64_t dim_) : vocab(vocab_), dim(dim_) {
  torch::nn::Embedding init(vocab, dim);  // the same draws as torch::nn::Embedding
  weight = register_parameter("weight", init->weight.detach().clone());
}

torch::Tensor VocabParallelEmbeddingImpl::forward(const torch::Tensor& ids) {
  // A frozen bf16 table (LoRA's base_dtype) gives fp32 rows, as the fp32 one does.
  auto up = [&](const torch::Tensor& e) { return e.scalar_type() == torch::kBFloat16 ? e.to(torch::kFloat) : e; };
  if (group.size() == 1) return up(torch::embedding(weight, ids));
  const int64_t start = vocab_start(), n = weight.size(0);
  auto local = ids - start;
  auto outside = (local < 0).logical_or(local >= n);
  auto emb = torch::embedding(weight, local.masked_fill(outside, 0));
  emb = up(emb.masked_fill(outside.unsqueeze(-1), 0.0));
  return reduce_from_tp(emb, group);
}

torch::Tensor VocabParallelEmbeddingImpl::logits(const torch::Tensor& x) {
  return torch::matmul(copy_to_tp(x, group), as_input_type(weight, x).t());
}

void VocabParallelEmbeddingImpl::shard(const TpGroup& g) {
  GT_CHECK(group.size() == 1, "VocabParallelEmbedding sharded twice");
  check_divides(g, vocab, "the vocabulary (model.vocab)");
  group = g;
  set_slice(weight, take_slice(weight.detach(), 0, 1, g));
}

void VocabParallelEmbeddingImpl::add_placements(const std::string& prefix,
                                                std::map<std::string, TensorPlacement>& out) const {
  if (group.size() == 1) return;
  out[prefix + ".weight"] = row_blocks(weight, {vocab, dim}, 1, group);
}

}  // namespace gtrain
