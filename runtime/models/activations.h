// activations.h: activation functions with faster CPU paths than LibTorch 1.13's kernels.
#pragma once

#include <torch/torch.h>

namespace gtrain {

// GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// On CPU it is computed as x * sigmoid(2 sqrt(2/pi) (x + 0.044715 x^3)) (the same function) with a
// hand-written backward: LibTorch 1.13's CPU tanh is scalar, which made gelu(x, "tanh") and its
// backward ~10x slower than sigmoid here and 13% of a small GPT's step. Saves only x for
// backward (as at::gelu does), so activation memory is unchanged. CUDA keeps at::gelu.
torch::Tensor gelu_tanh(const torch::Tensor& x);

}  // namespace gtrain
