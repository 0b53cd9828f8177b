// token_layout.h: where the tokens of a micro-batch sit when rows hold several documents (packed
// conversations): each token's position in its document, which restarts at 0 at every document,
// and which targets the loss counts. Attention never crosses a document (block-diagonal causal
// masks) and rotary or learned positions restart with the positions given.
//
// The engines set a TokenLayoutScope around a micro-batch's forward (as DropoutRowsScope);
// recompute saves the scope of the first forward and restores it in backward. Outside any scope
// (plain token windows, generation) rows are one document each, at positions 0, 1, ..., and every
// target counts.
#pragma once

#include <torch/torch.h>

namespace gtrain {

struct TokenLayout {
  TokenLayout() = default;
  TokenLayout(torch::Tensor positions_, torch::Tensor trained_, torch::Tensor samples_ = {})
      : positions(std::move(positions_)), trained(std::move(trained_)), samples(std::move(samples_)) {}
  torch::Tensor positions;  // [B, T] int64: each token's position in its document; undefined: 0 .. T-1
  torch::Tensor trained;    // [k] int64: flat indices (row * T + t) of the targets the loss counts; undefined: all
  torch::Tensor samples;    // [B] int64 on the CPU: each row's sample index in the training data (distill.cache)
  bool packed() const { return positions.defined(); }
  // document_causal_mask(positions), made on first use and kept while the layout is in effect.
  const torch::Tensor& mask() const;

 private:
  mutable torch::Tensor mask_;
};

// The layout in effect on this thread.
const TokenLayout& current_token_layout();

// Sets the layout for this thread until destroyed (then restores the previous one).
class TokenLayoutScope {
 public:
  explicit TokenLayoutScope(TokenLayout layout);
  ~TokenLayoutScope();
  TokenLayoutScope(const TokenLayoutScope&) = delete;
  TokenLayoutScope& operator=(const TokenLayoutScope&) = delete;

 private:
  TokenLayout saved_;
};

// [B, 1, T, T] bool: true where query t may attend key s (s <= t, both in the same document). A new
// document starts where the position is 0.
torch::Tensor document_causal_mask(const torch::Tensor& positions);

// Rows [N, C] of x [B, T, C] (or [B, T, V] logits) and their targets [N] from target [B, T]: the
// targets the current layout trains (all when it names none, in order: the same tensors reshaped).
std::pair<torch::Tensor, torch::Tensor> trained_rows(const torch::Tensor& x, const torch::Tensor& target);

}  // namespace gtrain
