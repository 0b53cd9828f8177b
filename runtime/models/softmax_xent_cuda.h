// softmax_xent_cuda.h: the fused loss's CUDA kernel (softmax_xent.cu), torch-free: per row of logits,
// the softmax written over the logits in place, less one at the row's target (the gradient of the
// summed cross-entropy with respect to the logits), and the row's loss. One read of the row from
// memory and one write, where the ATen ops it replaces take about five passes (fused_loss.cpp).
#pragma once

#include <cstdint>
#include <string>

namespace gtrain {
namespace cuda_kernels {

enum class LogitsType { f32, f16, bf16 };

// For each of `rows` rows of `logits` ([rows, vocab], contiguous, of `type`) with target
// targets[r]: logits[r, :] = softmax(logits[r, :]), then logits[r, t] -= 1; row_loss[r] =
// logsumexp(logits[r, :]) - logits[r, t] (fp32; NaN when t is outside [0, vocab)). Runs on `stream`
// (a cudaStream_t). Returns "" or the CUDA error that the launch reported.
std::string softmax_xent_rows(void* logits, LogitsType type, const int64_t* targets, float* row_loss, int64_t rows,
                              int64_t vocab, void* stream);

}  // namespace cuda_kernels
}  // namespace gtrain
