// reproducible.cpp: bitwise mode's canonical chunk tree, exact norm and CPU optimizer loops
// (compiled with -ffp-contract=off: see reproducible.h).
#include "strategies/reproducible.h"

#include <ATen/Parallel.h>

#include <cmath>

#include "runtime/comm/communicator.h"
#include "runtime/core/errors.h"

namespace gtrain {

void ChunkTree::push(int64_t index, const torch::Tensor& value) {
  GT_CHECK(index == next_, "ChunkTree: chunk " + std::to_string(index) + " pushed, " + std::to_string(next_) +
                               " expected (leaves go in chunk order)");
  ++next_;
  torch::NoGradGuard ng;
  int64_t lo = index, size = 1;
  torch::Tensor cur = value;
  bool owned = false;
  // A node and its left sibling (same size, adjacent, the pair aligned to twice the size) become
  // their parent: left + right, in the left's storage.
  while (!nodes_.empty()) {
    Node& left = nodes_.back();
    if (left.size != size || left.lo + size != lo || left.lo % (2 * size) != 0) break;
    left.value.add_(cur);
    cur = left.value;
    lo = left.lo;
    size *= 2;
    owned = true;
    nodes_.pop_back();
  }
  nodes_.push_back({lo, size, owned ? cur : value.clone()});
}

torch::Tensor ChunkTree::fold() {
  if (nodes_.empty()) return torch::Tensor();
  torch::NoGradGuard ng;
  // The nodes left are the maximal aligned runs, largest first; each later one lies in the right
  // half of the one before's parent, whose missing part it completes: fold from the right.
  torch::Tensor acc = nodes_.back().value;
  for (int64_t i = static_cast<int64_t>(nodes_.size()) - 2; i >= 0; --i) {
    nodes_[static_cast<size_t>(i)].value.add_(acc);
    acc = nodes_[static_cast<size_t>(i)].value;
  }
  nodes_.clear();
  next_ = 0;
  return acc;
}

torch::Tensor exact_norm(const std::vector<torch::Tensor>& pieces, const std::vector<Communicator*>& comms,
                         const torch::TensorOptions& device) {
  torch::NoGradGuard ng;
  const auto dopts = device.dtype(torch::kDouble);
  // 1. The largest magnitude anywhere (a max is exact in any order).
  auto top = torch::zeros({1}, dopts);
  for (const auto& p : pieces) {
    if (p.numel() > 0) top = torch::maximum(top, p.abs().max().to(torch::kDouble).reshape({1}));
  }
  for (auto* c : comms) {
    if (c && c->size() > 1) c->allreduce(top, ReduceOp::kMax);
  }
  const double m = top.item<double>();
  if (!std::isfinite(m)) return torch::full({1}, m == m ? INFINITY : NAN, dopts);
  if (m == 0) return torch::zeros({1}, dopts);
  int e = 0;
  std::frexp(m, &e);  // m < 2^e
  const double scale = std::ldexp(1.0, -e);
  // 2. Squares scaled into [0, 1) (exact), cut into kLimbs integers of 30 bits each.
  constexpr int kLimbs = 4;
  constexpr int64_t kSlice = 1 << 20;
  const double shift = std::ldexp(1.0, 30);
  auto limbs = torch::zeros({kLimbs}, device.dtype(torch::kLong));
  for (const auto& p : pieces) {
    const auto flat = p.reshape({-1});
    for (int64_t at = 0; at < flat.numel(); at += kSlice) {
      const int64_t n = std::min(kSlice, flat.numel() - at);
      auto x = flat.narrow(0, at, n).to(torch::kDouble).mul_(scale);
      x.mul_(x);
      std::vector<torch::Tensor> parts;
      for (int k = 0; k < kLimbs; ++k) {
        x.mul_(shift);
        auto l = x.floor();
        x.sub_(l);
        // Integers below 2^30, at most 2^20 of them: the double sum is exact, so its order is moot.
        parts.push_back(l.sum());
      }
      limbs.add_(torch::stack(parts).to(torch::kLong));
    }
  }
  // 3. Integer sums over the ranks: exact.
  for (auto* c : comms) {
    if (c && c->size() > 1) c->allreduce(limbs, ReduceOp::kSum);
  }
  // 4. The double, rebuilt once from the integers (smallest limb first).
  const auto host = limbs.to(torch::kCPU);
  const auto* L = host.data_ptr<int64_t>();
  double total = 0;
  for (int k = kLimbs - 1; k >= 0; --k) total += std::ldexp(static_cast<double>(L[k]), -30 * (k + 1));
  return torch::full({1}, std::sqrt(std::ldexp(total, 2 * e)), dopts);
}

namespace {

void check_flat(const torch::Tensor& t, const char* what, int64_t n) {
  GT_CHECK(t.device().is_cpu() && t.scalar_type() == torch::kFloat && t.is_contiguous() && t.numel() == n,
           std::string("bitwise optimizer: ") + what + " must be a contiguous CPU float tensor of the chunk's size");
}

// Weight decay by multiplication (AdamW) over the decayed ranges.
void decay(float* p, const std::vector<std::pair<int64_t, int64_t>>& ranges, float factor) {
  for (const auto& r : ranges) {
    at::parallel_for(r.first, r.second, 1 << 14, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = p[i] * factor;
    });
  }
}

}  // namespace

void adamw_update_cpu(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& exp_avg,
                      torch::Tensor& exp_avg_sq, const std::vector<std::pair<int64_t, int64_t>>& decayed,
                      const AdamWStep& s) {
  const int64_t n = param.numel();
  check_flat(param, "param", n);
  check_flat(grad, "grad", n);
  check_flat(exp_avg, "exp_avg", n);
  check_flat(exp_avg_sq, "exp_avg_sq", n);
  float* p = param.data_ptr<float>();
  const float* g = grad.data_ptr<float>();
  float* m = exp_avg.data_ptr<float>();
  float* v = exp_avg_sq.data_ptr<float>();
  if (s.weight_decay != 0) decay(p, decayed, static_cast<float>(1.0 - s.lr * s.weight_decay));
  const double bc1 = 1.0 - std::pow(s.beta1, static_cast<double>(s.step));
  const double bc2 = 1.0 - std::pow(s.beta2, static_cast<double>(s.step));
  const float b1 = static_cast<float>(s.beta1), a1 = static_cast<float>(1.0 - s.beta1);
  const float b2 = static_cast<float>(s.beta2), a2 = static_cast<float>(1.0 - s.beta2);
  const float root_bc2 = static_cast<float>(std::sqrt(bc2)), eps = static_cast<float>(s.eps);
  const float step_size = static_cast<float>(-s.lr / bc1);
  at::parallel_for(0, n, 1 << 14, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const float gi = g[i];
      const float mi = m[i] * b1 + a1 * gi;
      const float vi = v[i] * b2 + a2 * gi * gi;
      m[i] = mi;
      v[i] = vi;
      const float denom = std::sqrt(vi) / root_bc2 + eps;
      p[i] = p[i] + step_size * (mi / denom);
    }
  });
}

void sgd_update_cpu(torch::Tensor& param, const torch::Tensor& grad, torch::Tensor& momentum_buffer,
                    const std::vector<std::pair<int64_t, int64_t>>& decayed, const SgdStep& s) {
  const int64_t n = param.numel();
  check_flat(param, "param", n);
  check_flat(grad, "grad", n);
  auto d = grad.clone();
  float* dp = d.data_ptr<float>();
  float* p = param.data_ptr<float>();
  const float wd = static_cast<float>(s.weight_decay), mom = static_cast<float>(s.momentum);
  if (s.weight_decay != 0) {
    for (const auto& r : decayed) {
      for (int64_t i = r.first; i < r.second; ++i) dp[i] = dp[i] + p[i] * wd;
    }
  }
  if (s.momentum != 0) {
    if (!momentum_buffer.defined()) {
      momentum_buffer = d.clone();
    } else {
      check_flat(momentum_buffer, "momentum_buffer", n);
      float* mb = momentum_buffer.data_ptr<float>();
      at::parallel_for(0, n, 1 << 14, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) mb[i] = mb[i] * mom + dp[i];
      });
    }
    const float* mb = momentum_buffer.data_ptr<float>();
    at::parallel_for(0, n, 1 << 14, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) dp[i] = s.nesterov ? dp[i] + mom * mb[i] : mb[i];
    });
  }
  const float neg_lr = static_cast<float>(-s.lr);
  at::parallel_for(0, n, 1 << 14, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) p[i] = p[i] + neg_lr * dp[i];
  });
}

}  // namespace gtrain
