// distillation.h: Distillation, the knowledge-distillation term of a student's training loss: a
// frozen teacher model run on the student's micro-batch (under the same token layout: packed rows,
// trained targets), or its top-k outputs read from a cache (`gtrain distill cache`), and kd_loss.h's
// divergence between the two over the trained rows.
#pragma once

#include <functional>
#include <memory>

#include "runtime/core/distill_cache.h"
#include "runtime/models/kd_loss.h"
#include "runtime/models/model.h"

namespace gtrain {

struct DistillSettings {
  double ratio = 0.5;                            // r: loss = (1 - r) CE + r T^2 divergence
  double temperature = 1.0;                      // T of teacher and student in the divergence
  KdDivergence kind = KdDivergence::forward_kl;  // which divergence
  int64_t top_k = 0;                             // > 0: the teacher's top-k and tail (the cache's estimator)
};

// The teacher's logits [B, T, V] for ids [B, T] (no gradients): a whole teacher's forward, or one
// sharded over the data-parallel ranks (strategies/sharded_frozen_model.h), which is collective.
using TeacherForward = std::function<torch::Tensor(const torch::Tensor&)>;

class Distillation {
 public:
  // `teacher`: frozen, in eval mode, whole on this rank's device; or, with `forward`, whatever that
  // runs (the teacher sharded: `teacher` is then only kept alive).
  Distillation(std::shared_ptr<Model> teacher, DistillSettings settings, TeacherForward forward = nullptr);
  // The teacher's outputs from a cache (its key checked by the caller): token g of the training data
  // is sample g / T's position g % T (T = the rows' length); the micro-batch's layout names the
  // samples (TokenLayout::samples). settings.top_k is the cache's k.
  Distillation(std::shared_ptr<DistillCacheReader> cache, DistillSettings settings);

  // ((1 - r) x cross-entropy sum + r x kd_loss_sum) over the trained rows of the student's logits
  // `rows` [N, V] (targets `targets` [N]); the teacher runs on `input` [B, T] under the layout in
  // effect (its trained_rows pick the same N rows), or the cache gives those rows (then `input` may
  // be any [B, T, ...] tensor of the batch: only its first two sizes are read). Not yet divided by
  // model.seq_len.
  torch::Tensor loss_sum(const torch::Tensor& rows, const torch::Tensor& targets, const torch::Tensor& input,
                         const torch::Tensor& target);

  const DistillSettings& settings() const { return settings_; }
  bool cached() const { return cache_ != nullptr; }
  const DistillCacheReader* cache() const { return cache_.get(); }  // null: the teacher runs online

 private:
  // The teacher's top-k of the N trained rows of `input` [B, T], from the cache, on `device`.
  SparseTeacher cached_rows(const torch::Tensor& input, int64_t n, const torch::Device& device);

  std::shared_ptr<Model> teacher_;
  TeacherForward forward_;
  std::shared_ptr<DistillCacheReader> cache_;
  DistillSettings settings_;
};

}  // namespace gtrain
