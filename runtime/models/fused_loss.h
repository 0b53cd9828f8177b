// fused_loss.h: the output layer and cross-entropy fused, a block of rows at a time, so the [N, V]
// logits (and their fp32 copy under autocast, and their gradient) never exist whole.
#pragma once

#include <torch/torch.h>

namespace gtrain {

// Sum over rows i of cross_entropy(x[i] W^T, target[i]): x [N, C], weight [V, C], target [N]
// (int64). Forward computes the gradients too (softmax - onehot, per block of `block_rows` rows, or
// when 0 of fused_loss_block_rows(): at most 64 MiB of fp32 logits on CPU, 512 MiB on a GPU), so
// backward only scales them: the same three matrix products as the unfused layer, without
// materialising the logits. Under autocast the products run in the autocast dtype and the softmax
// in fp32, as autocast does for the unfused layer.
torch::Tensor linear_cross_entropy_sum(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& target,
                                       int64_t block_rows = 0);

}  // namespace gtrain
