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
//
// On CUDA (builds with CUDA) the softmax, its gradient and the row losses after each block's product
// are one kernel (softmax_xent_cuda.h) that reads the block's logits in the product dtype once and
// writes the gradient over them, in place of the fp32 copy, log-softmax and exp passes of the ATen
// ops: `kernel` = aten keeps the ATen ops (tests compare the two), and so does the environment
// variable GTRAIN_FUSED_LOSS_KERNEL=0 (what the kernel is worth, bench/gpu_gpt2.sh).
enum class FusedLossKernel { automatic, aten };
torch::Tensor linear_cross_entropy_sum(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& target,
                                       int64_t block_rows = 0, FusedLossKernel kernel = FusedLossKernel::automatic);

// Whether linear_cross_entropy_sum uses the CUDA kernel for CUDA tensors by default (a CUDA build,
// GTRAIN_FUSED_LOSS_KERNEL not 0).
bool fused_loss_cuda_kernel_enabled();

}  // namespace gtrain
