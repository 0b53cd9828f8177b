// parallel_engine.h: what the trainer needs from a parallel strategy (implemented in strategies/):
// gradients synchronised while backward runs, the global gradient norm, the (possibly sharded)
// optimizer step, and the optimizer state for checkpoints, keyed by parameter name.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace gtrain {

// A piece of a named global tensor held by this rank, for checkpoints that reshard on load.
// `data` holds elements [flat_begin, flat_begin + data.numel()) of the row-major flattening of the
// region [region_offsets, region_offsets + region_shape) of the global tensor. A whole replicated
// tensor is one region covering everything; a tensor-parallel slice is a smaller region; a ZeRO
// chunk is a flat range inside its region.
struct TensorShard {
  std::string name;                    // "h.0.attn.qkv.weight", "h.0.attn.qkv.weight.exp_avg", "optimizer.step"
  std::vector<int64_t> global_shape;
  std::vector<int64_t> region_offsets;
  std::vector<int64_t> region_shape;
  int64_t flat_begin = 0;
  torch::Tensor data;                  // 1-D contiguous
  bool write = true;                   // false when another rank writes the same elements (replicas)
};

// Produces the full (unsharded) tensor of a name from a checkpoint; throws when it is missing.
using GlobalTensorReader = std::function<torch::Tensor(const std::string& name)>;

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

  // This rank's pieces of the parameters and optimizer state (names: parameter names, and
  // "<param>.exp_avg", "<param>.exp_avg_sq", "<param>.momentum_buffer", "optimizer.step"). Not a
  // collective: each rank writes its own pieces, nothing is gathered.
  virtual std::vector<TensorShard> state_shards() = 0;
  // Sets parameters and optimizer state from global tensors, each rank taking the part it holds
  // in the current layout (any dp / ZeRO stage / tp / pp the checkpoint was written with).
  virtual void load_state(const GlobalTensorReader& read) = 0;

  virtual std::string describe() const = 0;
};

}  // namespace gtrain
