// parallel_engine.cpp: the default micro-batch loop and evaluation forward of every engine.
#include "runtime/train/parallel_engine.h"

#include <ATen/record_function.h>

#include "runtime/core/heartbeat.h"
#include "runtime/models/model.h"
#include "runtime/precision/precision.h"

namespace gtrain {

torch::Tensor ParallelEngine::clip_and_step(double lr, double clip) {
  const double norm = grad_norm();
  const double coef = (clip > 0 && norm > clip) ? clip / (norm + 1e-6) : 1.0;
  step(lr, coef);
  return torch::tensor({norm}, torch::kDouble);
}

void MicroBatchWork::add_loss(torch::Tensor& acc, int64_t i, const torch::Tensor& loss) const {
  if (!acc.defined()) {
    acc = torch::zeros({bitwise() ? total_chunks : 1},
                       torch::TensorOptions().dtype(torch::kDouble).device(loss.device()));
  }
  const auto l = loss.detach().to(torch::kDouble).reshape({1});
  if (bitwise()) {
    acc.narrow(0, chunks.at(static_cast<size_t>(i)), 1).copy_(l);
  } else {
    acc += l;
  }
}

torch::Tensor ParallelEngine::run_micro_batches(const MicroBatchWork& w) {
  prepare_step(w);
  torch::Tensor loss_acc;  // on the loss's device: accumulating it never waits for a GPU
  for (int64_t i = 0; i < w.count; ++i) {
    auto batch = w.next();
    torch::Tensor loss;
    {
      RECORD_USER_SCOPE("gtrain::forward");
      Heartbeat::get().phase(RankPhase::forward);
      auto scope = w.precision->autocast();
      DropoutRowsScope rows(w.rows(i));
      TokenLayoutScope layout(batch.layout);
      loss = w.model->train_loss_sum(batch.input, batch.target) * w.inv_batch;
    }
    begin_micro_batch(i == w.count - 1);
    {
      RECORD_USER_SCOPE("gtrain::backward");
      Heartbeat::get().phase(RankPhase::backward);
      (w.loss_scale != 1.0 ? loss * w.loss_scale : loss).backward();
    }
    end_micro_batch();
    w.add_loss(loss_acc, i, loss);
  }
  // Gradients are summed over data-parallel ranks (each loss was divided by the global batch).
  {
    RECORD_USER_SCOPE("gtrain::grad_sync");
    Heartbeat::get().phase(RankPhase::grad_sync);
    end_backward();
  }
  if (!reports_loss()) loss_acc.zero_();
  return loss_acc;
}

torch::Tensor ParallelEngine::forward_only(Model& model, const torch::Tensor& input) {
  return model.forward(input);
}

}  // namespace gtrain
