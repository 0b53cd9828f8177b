// recompute.h: per-block activation recompute (what torch.utils.checkpoint does in Python): the
// block runs without keeping its activations, and backward reruns it with gradients enabled,
// from the saved input, with the dropout rows (runtime/models/keyed_dropout.h) and the random
// generator state of the first run, so dropout matches.
#pragma once

#include <torch/torch.h>

#include <functional>

namespace gtrain {

using BlockFunction = std::function<torch::Tensor(const torch::Tensor&)>;

// Returns block(x); only x is kept for backward. `block` must outlive every backward of the result.
torch::Tensor recompute_in_backward(const BlockFunction& block, const torch::Tensor& x);

}  // namespace gtrain
