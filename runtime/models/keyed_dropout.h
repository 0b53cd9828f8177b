// keyed_dropout.h: dropout whose masks do not depend on the parallel layout. The mask of a row
// (one sample of the batch) is drawn from a generator seeded by (train.seed, the sample's global
// index in the run, the dropout site, the head), so dp, micro-batching, accumulation, tensor and
// pipeline parallelism and recompute all draw the same masks, and a run resumed on another
// number of GPUs keeps its trajectory with dropout on.
//
// The engines say which global samples a micro-batch holds with a DropoutRowsScope around its
// forward; recompute saves the scope of the first forward and restores it in backward. Outside
// any scope (a model called directly), keyed_dropout is plain torch::dropout.
#pragma once

#include <torch/torch.h>

#include <cstdint>

namespace gtrain {

// The rows of the micro-batch being computed: row b is global sample first_sample + b.
struct DropoutRows {
  bool active = false;
  uint64_t seed = 0;
  int64_t first_sample = 0;
};

// The rows in effect on this thread.
DropoutRows current_dropout_rows();

// Sets the rows for this thread until destroyed (then restores the previous ones).
class DropoutRowsScope {
 public:
  explicit DropoutRowsScope(const DropoutRows& rows);
  DropoutRowsScope(uint64_t seed, int64_t first_sample) : DropoutRowsScope(DropoutRows{true, seed, first_sample}) {}
  ~DropoutRowsScope();
  DropoutRowsScope(const DropoutRowsScope&) = delete;
  DropoutRowsScope& operator=(const DropoutRowsScope&) = delete;

 private:
  DropoutRows saved_;
};

// Inverted dropout of `x` ([rows, ...]) with probability `p` when `train`, else `x` itself. `site`
// names the place in the model (distinct per layer and per dropout in it). With `head_offset` >= 0,
// dimension 1 holds heads head_offset, head_offset + 1, ... of a tensor-parallel split and each
// (row, global head) plane gets its own mask, so a rank holding some heads draws their masks only.
torch::Tensor keyed_dropout(const torch::Tensor& x, double p, uint64_t site, bool train, int64_t head_offset = -1);

// The mask keyed_dropout applies to a tensor of `shape` on `device` (true = zeroed), for tests
// and for models that apply it themselves. Needs an active DropoutRowsScope.
torch::Tensor keyed_drop_mask(at::IntArrayRef shape, double p, uint64_t site, const torch::Device& device,
                              int64_t head_offset = -1);

}  // namespace gtrain
