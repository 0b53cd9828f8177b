// fused_adamw_cuda.h: the launcher of the AdamW kernel with the gradient-norm clip folded in
// (fused_adamw.cu), torch-free.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/models/fused_math.h"

namespace gtrain {
namespace cuda_kernels {

// One fp32 tensor's parameter, gradient and moments (device pointers, `numel` elements each).
struct AdamWTensor {
  float* p;
  const float* g;
  float* m;
  float* v;
  int64_t numel;
};

// AdamW (fused_math::adamw_element) over n tensors: `tensors` and `starts` (each tensor's first
// element in their concatenation; total elements in all) are device arrays. The gradients are
// divided by clip_divisor(*norm, clip) (norm: a device double; null: by step.grad_divisor).
std::string adamw_clip(const AdamWTensor* tensors, const int64_t* starts, int n, int64_t total, const double* norm,
                       double clip, const fused_math::AdamWStep& step, void* stream);

}  // namespace cuda_kernels
}  // namespace gtrain
