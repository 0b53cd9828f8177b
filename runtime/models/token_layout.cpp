// token_layout.cpp: the thread's token layout, document-causal masks and the trained rows.
#include "runtime/models/token_layout.h"

#include "runtime/core/errors.h"

namespace gtrain {

namespace {
thread_local TokenLayout t_layout;
}  // namespace

const TokenLayout& current_token_layout() {
  return t_layout;
}

TokenLayoutScope::TokenLayoutScope(TokenLayout layout) : saved_(std::move(t_layout)) {
  t_layout = std::move(layout);
}

TokenLayoutScope::~TokenLayoutScope() {
  t_layout = std::move(saved_);
}

torch::Tensor document_causal_mask(const torch::Tensor& positions) {
  GT_CHECK(positions.dim() == 2, "document_causal_mask: positions [B, T] expected");
  const int64_t T = positions.size(1);
  const auto doc = positions.eq(0).cumsum(1);  // [B, T]: the document of each token
  const auto same = doc.unsqueeze(2).eq(doc.unsqueeze(1));
  const auto causal = torch::ones({T, T}, torch::TensorOptions().dtype(torch::kBool).device(positions.device())).tril();
  return same.logical_and(causal).unsqueeze(1);
}

const torch::Tensor& TokenLayout::mask() const {
  GT_CHECK(packed(), "TokenLayout::mask: the layout has no positions");
  if (!mask_.defined()) mask_ = document_causal_mask(positions);
  return mask_;
}

std::pair<torch::Tensor, torch::Tensor> trained_rows(const torch::Tensor& x, const torch::Tensor& target) {
  auto rows = x.reshape({-1, x.size(-1)});
  auto flat = target.reshape({-1});
  const auto& trained = t_layout.trained;
  if (!trained.defined()) return {rows, flat};
  GT_CHECK(trained.device() == x.device(), "trained_rows: the layout's indices are on another device");
  return {rows.index_select(0, trained), flat.index_select(0, trained)};
}

}  // namespace gtrain
