// parallel_engine.h: what the trainer needs from a parallel strategy (implemented in strategies/):
// gradients synchronised while backward runs, the global gradient norm, the (possibly sharded)
// optimizer step, and the optimizer state for checkpoints, keyed by parameter name.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>

namespace gtrain {

class ParallelEngine {
 public:
  virtual ~ParallelEngine() = default;

  // Before the first micro-batch of a step.
  virtual void zero_grad() = 0;
  // Before each micro-batch's backward; `last` enables communication (none on earlier ones).
  virtual void begin_micro_batch(bool last) = 0;
  // After the last micro-batch's backward: waits for communication; gradients are final.
  virtual void end_backward() = 0;
  // fp16: multiplies gradients by `inv_scale`; false (and no change) if any is inf/nan on any rank.
  virtual bool unscale_gradients(double inv_scale) = 0;
  // Global L2 norm of the gradients.
  virtual double grad_norm() = 0;
  // Scales gradients by `grad_coef` (clipping) and applies the optimizer with learning rate `lr`.
  virtual void step(double lr, double grad_coef) = 0;

  // Full optimizer state ("<param>.exp_avg", ..., "step"); a collective: every rank calls it.
  virtual std::map<std::string, torch::Tensor> optimizer_state() = 0;
  virtual void load_optimizer_state(const std::map<std::string, torch::Tensor>& state) = 0;

  virtual std::string describe() const = 0;
};

}  // namespace gtrain
