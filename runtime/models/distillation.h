// distillation.h: Distillation, the knowledge-distillation term of a student's training loss: a
// frozen teacher model run on the student's micro-batch (under the same token layout: packed rows,
// trained targets) and kd_loss.h's divergence between the two over the trained rows.
#pragma once

#include <memory>

#include "runtime/models/kd_loss.h"
#include "runtime/models/model.h"

namespace gtrain {

struct DistillSettings {
  double ratio = 0.5;                            // r: loss = (1 - r) CE + r T^2 divergence
  double temperature = 1.0;                      // T of teacher and student in the divergence
  KdDivergence kind = KdDivergence::forward_kl;  // which divergence
  int64_t top_k = 0;                             // > 0: the teacher's top-k and tail (the cache's estimator)
};

class Distillation {
 public:
  // `teacher`: the whole teacher on this rank's device (parameters frozen, eval mode).
  Distillation(std::shared_ptr<Model> teacher, DistillSettings settings);

  // ((1 - r) x cross-entropy sum + r x kd_loss_sum) over the trained rows of the student's logits
  // `rows` [N, V] (targets `targets` [N]); the teacher runs on `input` [B, T] under the layout in
  // effect (its trained_rows pick the same N rows). Not yet divided by model.seq_len.
  torch::Tensor loss_sum(const torch::Tensor& rows, const torch::Tensor& targets, const torch::Tensor& input,
                         const torch::Tensor& target);

  const DistillSettings& settings() const { return settings_; }
  Model& teacher() { return *teacher_; }

 private:
  std::shared_ptr<Model> teacher_;
  DistillSettings settings_;
};

}  // namespace gtrain
