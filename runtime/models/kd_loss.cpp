// kd_loss.cpp: the distillation divergences over dense and sparse (top-k + tail) teachers.
#include "runtime/models/kd_loss.h"

#include <cmath>
#include <limits>

#include "runtime/core/errors.h"

namespace gtrain {

namespace {

constexpr double kTailFloor = 1e-30;  // the least teacher tail mass (kd_loss.h)

// The dtype the divergence is computed in: fp32, or fp64 for fp64 inputs (finite-difference checks).
torch::ScalarType compute_dtype(const torch::Tensor& x) {
  return x.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
}

// Per row, sum_j p_j (log p_j - log q_j) with 0 where p_j = 0 (log p = -inf, and log q may be -inf
// there too). The logs are replaced before the arithmetic where p = 0, so no inf or NaN reaches the
// gradient of the terms that do not count.
torch::Tensor xlogratio(const torch::Tensor& log_p, const torch::Tensor& log_q) {
  const auto p = log_p.exp();
  const auto keep = p > 0;
  const auto zero = torch::zeros_like(log_p);
  const auto lp = torch::where(keep, log_p, zero);
  const auto lq = torch::where(keep, log_q, zero);
  return torch::where(keep, p * (lp - lq), zero).sum(-1);
}

// Per row, the divergence between the distributions whose logs are log_t (teacher) and log_s
// (student), [N, M] each, over their last dimension.
torch::Tensor row_divergence(const torch::Tensor& log_t, const torch::Tensor& log_s, KdDivergence kind) {
  switch (kind) {
    case KdDivergence::forward_kl:
      return xlogratio(log_t, log_s);
    case KdDivergence::reverse_kl:
      return xlogratio(log_s, log_t);
    case KdDivergence::jsd: {
      // log m, m = (p_t + p_s) / 2; where m = 0 both terms are 0, and log(1) keeps its gradient finite.
      const auto m = 0.5 * (log_t.exp() + log_s.exp());
      const auto log_m = torch::where(m > 0, m, torch::ones_like(m)).log();
      return 0.5 * xlogratio(log_t, log_m) + 0.5 * xlogratio(log_s, log_m);
    }
  }
  GT_CHECK(false, "unknown divergence");
  return {};
}

// The rows of x [N, ...] where mask [N] is set (all of x when the mask is undefined).
torch::Tensor kept_rows(const torch::Tensor& x, const torch::Tensor& rows) {
  return rows.defined() ? x.index_select(0, rows) : x;
}

torch::Tensor mask_rows(const torch::Tensor& mask, int64_t n) {
  if (!mask.defined()) return {};
  GT_CHECK(mask.dim() == 1 && mask.size(0) == n, "kd_loss_sum: a mask of the logits' " + std::to_string(n) +
                                                     " rows expected, got " + std::to_string(mask.numel()) + " values");
  return mask.to(torch::kBool).nonzero().squeeze(1).to(torch::kLong);
}

// log softmax(x / T) in the compute dtype.
torch::Tensor log_softmax_t(const torch::Tensor& logits, double temperature) {
  auto x = logits.to(compute_dtype(logits));
  if (temperature != 1.0) x = x / temperature;
  return torch::log_softmax(x, -1);
}

}  // namespace

KdDivergence parse_kd_divergence(const std::string& name) {
  if (name == "forward_kl") return KdDivergence::forward_kl;
  if (name == "reverse_kl") return KdDivergence::reverse_kl;
  if (name == "jsd") return KdDivergence::jsd;
  throw ConfigError("distill.loss = \"" + name + "\": expected \"forward_kl\", \"reverse_kl\" or \"jsd\"");
}

SparseTeacher sparse_teacher(const torch::Tensor& ids, const torch::Tensor& top_logits, const torch::Tensor& lse_t,
                             double temperature) {
  GT_CHECK(ids.dim() == 2 && top_logits.sizes() == ids.sizes() && lse_t.dim() == 1 && lse_t.size(0) == ids.size(0),
           "sparse_teacher: ids and logits [N, k], lse [N] expected");
  // In fp64, then rounded once: the tail is a difference from 1, fp32 would lose its digits.
  const auto dt = compute_dtype(top_logits);
  auto z = top_logits.to(torch::kDouble);
  if (temperature != 1.0) z = z / temperature;
  const auto logprobs = z - lse_t.to(torch::kDouble).unsqueeze(1);
  SparseTeacher t;
  t.ids = ids;
  t.logprobs = logprobs.to(dt);
  t.tail = (1.0 - logprobs.exp().sum(1)).clamp(0.0, 1.0).to(dt);
  return t;
}

TeacherTopK teacher_top_k(const torch::Tensor& teacher_logits, int64_t k, double temperature) {
  GT_CHECK(teacher_logits.dim() == 2 && k >= 1 && k <= teacher_logits.size(1),
           "teacher_top_k: logits [N, V] and 1 <= k <= V expected");
  torch::NoGradGuard no_grad;
  auto z = teacher_logits.to(compute_dtype(teacher_logits));
  auto [values, ids] = z.topk(k, 1, /*largest=*/true, /*sorted=*/true);
  auto wide = z.to(torch::kDouble);
  if (temperature != 1.0) wide = wide / temperature;
  return {ids, values, wide.logsumexp(1)};
}

SparseTeacher sparse_teacher_from_logits(const torch::Tensor& teacher_logits, int64_t k, double temperature) {
  const auto top = teacher_top_k(teacher_logits, k, temperature);
  return sparse_teacher(top.ids, top.logits, top.lse, temperature);
}

torch::Tensor kd_mask_from_labels(const torch::Tensor& labels, int64_t ignore_index) {
  return labels.reshape({-1}) != ignore_index;
}

torch::Tensor kd_loss_sum(const torch::Tensor& student_logits, const torch::Tensor& teacher_logits,
                          const torch::Tensor& mask, KdDivergence kind, double temperature) {
  GT_CHECK(student_logits.dim() == 2 && teacher_logits.sizes() == student_logits.sizes(),
           "kd_loss_sum: student and teacher logits [N, V] of the same shape expected");
  const auto rows = mask_rows(mask, student_logits.size(0));
  const auto log_s = log_softmax_t(kept_rows(student_logits, rows), temperature);
  const auto log_t = log_softmax_t(kept_rows(teacher_logits.detach(), rows), temperature).to(log_s.scalar_type());
  return row_divergence(log_t, log_s, kind).sum() * (temperature * temperature);
}

torch::Tensor kd_loss_sum(const torch::Tensor& student_logits, const SparseTeacher& teacher, const torch::Tensor& mask,
                          KdDivergence kind, double temperature) {
  GT_CHECK(student_logits.dim() == 2 && teacher.ids.dim() == 2 && teacher.ids.size(0) == student_logits.size(0) &&
               teacher.logprobs.sizes() == teacher.ids.sizes() && teacher.tail.dim() == 1 &&
               teacher.tail.size(0) == teacher.ids.size(0),
           "kd_loss_sum: student logits [N, V], teacher ids and log-probabilities [N, k], tail [N] expected");
  const int64_t V = student_logits.size(1), k = teacher.ids.size(1);
  GT_CHECK(k <= V, "kd_loss_sum: the teacher keeps more ids than the vocabulary holds");
  const auto rows = mask_rows(mask, student_logits.size(0));
  const auto log_s = log_softmax_t(kept_rows(student_logits, rows), temperature);
  const auto ids = kept_rows(teacher.ids, rows).to(torch::kLong);
  auto log_t = kept_rows(teacher.logprobs.detach(), rows).to(log_s.scalar_type());
  auto log_s_buckets = log_s.gather(1, ids);
  if (k < V) {
    // The tail bucket: the teacher's mass there, and the student's over every id not kept.
    auto in_tail = torch::ones_like(log_s, torch::kBool).scatter(1, ids, false);
    const auto student_tail = log_s.masked_fill(in_tail.logical_not(), -std::numeric_limits<double>::infinity())
                                  .logsumexp(1, /*keepdim=*/true);
    // Floored: where the kept ids hold all the mass (to fp64's digits), reverse KL and JSD stay finite.
    const auto teacher_tail =
        kept_rows(teacher.tail.detach(), rows).to(log_s.scalar_type()).clamp_min(kTailFloor).log().unsqueeze(1);
    log_s_buckets = torch::cat({log_s_buckets, student_tail}, 1);
    log_t = torch::cat({log_t, teacher_tail}, 1);
  }
  return row_divergence(log_t, log_s_buckets, kind).sum() * (temperature * temperature);
}

}  // namespace gtrain
