// distillation.cpp: the teacher's forward on the student's micro-batch and the combined loss.
#include "runtime/models/distillation.h"

#include <algorithm>

#include "runtime/core/errors.h"
#include "runtime/models/token_layout.h"

namespace gtrain {

Distillation::Distillation(std::shared_ptr<Model> teacher, DistillSettings settings)
    : teacher_(std::move(teacher)), settings_(settings) {
  GT_CHECK(teacher_ != nullptr, "distillation without a teacher");
  for (auto& p : teacher_->parameters()) p.set_requires_grad(false);
  teacher_->eval();
}

torch::Tensor Distillation::loss_sum(const torch::Tensor& rows, const torch::Tensor& targets,
                                     const torch::Tensor& input, const torch::Tensor& target) {
  namespace F = torch::nn::functional;
  torch::Tensor teacher_rows;
  {
    torch::NoGradGuard ng;
    // The teacher's logits at the student's trained targets, in fp32 (the divergence's dtype).
    teacher_rows = trained_rows(teacher_->forward(input), target).first.to(torch::kFloat);
  }
  GT_CHECK(teacher_rows.sizes() == rows.sizes(), "distillation: the teacher's logits do not match the student's");
  const auto ce =
      F::cross_entropy(rows.to(torch::kFloat), targets, F::CrossEntropyFuncOptions().reduction(torch::kSum));
  const auto student = rows.to(torch::kFloat);
  const torch::Tensor none;
  const auto kd = settings_.top_k > 0
                      ? kd_loss_sum(student,
                                    sparse_teacher_from_logits(teacher_rows, std::min(settings_.top_k, rows.size(1)),
                                                               settings_.temperature),
                                    none, settings_.kind, settings_.temperature)
                      : kd_loss_sum(student, teacher_rows, none, settings_.kind, settings_.temperature);
  return (1.0 - settings_.ratio) * ce + settings_.ratio * kd;
}

}  // namespace gtrain
