// distillation.cpp: the teacher's forward on the student's micro-batch (or its cached top-k) and
// the combined loss.
#include "runtime/models/distillation.h"

#include <algorithm>
#include <cstring>

#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/models/token_layout.h"

namespace gtrain {

Distillation::Distillation(std::shared_ptr<Model> teacher, DistillSettings settings, TeacherForward forward)
    : teacher_(std::move(teacher)), settings_(settings) {
  GT_CHECK(teacher_ != nullptr, "distillation without a teacher");
  forward_ = forward ? std::move(forward) : [t = teacher_.get()](const torch::Tensor& ids) { return t->forward(ids); };
}

Distillation::Distillation(std::shared_ptr<DistillCacheReader> cache, DistillSettings settings)
    : cache_(std::move(cache)), settings_(settings) {
  GT_CHECK(cache_ != nullptr, "distillation without a teacher cache");
  settings_.top_k = cache_->manifest().key.k;
}

SparseTeacher Distillation::cached_rows(const torch::Tensor& input, int64_t n, const torch::Device& device) {
  const TokenLayout& layout = current_token_layout();
  GT_CHECK(layout.samples.defined(), "distill.cache: the micro-batch does not name its samples");
  const int64_t B = input.size(0), T = input.size(1);
  const auto samples = layout.samples.to(torch::kCPU, torch::kLong).contiguous();
  GT_CHECK(samples.numel() == B, str("distill.cache: ", samples.numel(), " sample ids for ", B, " rows"));
  const auto flat = layout.trained.defined() ? layout.trained.to(torch::kCPU, torch::kLong).contiguous()
                                             : torch::arange(B * T, torch::kLong);
  GT_CHECK(flat.numel() == n, str("distill.cache: ", flat.numel(), " trained targets for ", n, " rows"));
  const auto* s = samples.data_ptr<int64_t>();
  const auto* f = flat.data_ptr<int64_t>();
  std::vector<int64_t> tokens(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) tokens[static_cast<size_t>(i)] = s[f[i] / T] * T + f[i] % T;
  const DistillEntries e = cache_->gather(tokens);
  const int64_t k = e.k;
  auto ids = torch::empty({n, k}, torch::kInt);
  auto logits = torch::empty({n, k}, torch::kFloat);
  auto lse = torch::empty({n}, torch::kDouble);
  std::memcpy(ids.data_ptr<int32_t>(), e.ids.data(), e.ids.size() * sizeof(int32_t));
  std::memcpy(logits.data_ptr<float>(), e.logits.data(), e.logits.size() * sizeof(float));
  std::memcpy(lse.data_ptr<double>(), e.lse.data(), e.lse.size() * sizeof(double));
  return sparse_teacher(ids.to(device), logits.to(device), lse.to(device), settings_.temperature);
}

torch::Tensor Distillation::loss_sum(const torch::Tensor& rows, const torch::Tensor& targets,
                                     const torch::Tensor& input, const torch::Tensor& target) {
  namespace F = torch::nn::functional;
  const auto student = rows.to(torch::kFloat);
  const auto ce = F::cross_entropy(student, targets, F::CrossEntropyFuncOptions().reduction(torch::kSum));
  const torch::Tensor none;
  if (cache_) {
    const auto kd = kd_loss_sum(student, cached_rows(input, rows.size(0), rows.device()), none, settings_.kind,
                                settings_.temperature);
    return (1.0 - settings_.ratio) * ce + settings_.ratio * kd;
  }
  torch::Tensor teacher_rows;
  {
    torch::NoGradGuard ng;
    // The teacher's logits at the student's trained targets, in fp32 (the divergence's dtype).
    teacher_rows = trained_rows(forward_(input), target).first.to(torch::kFloat);
  }
  GT_CHECK(teacher_rows.sizes() == rows.sizes(), "distillation: the teacher's logits do not match the student's");
  const auto kd = settings_.top_k > 0
                      ? kd_loss_sum(student,
                                    sparse_teacher_from_logits(teacher_rows, std::min(settings_.top_k, rows.size(1)),
                                                               settings_.temperature),
                                    none, settings_.kind, settings_.temperature)
                      : kd_loss_sum(student, teacher_rows, none, settings_.kind, settings_.temperature);
  return (1.0 - settings_.ratio) * ce + settings_.ratio * kd;
}

}  // namespace gtrain
