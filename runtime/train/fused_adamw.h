// fused_adamw.h: AdamW over lists of fp32 CUDA tensors in one kernel of gtrain's, the gradient-norm
// clip folded in (runtime/train/fused_adamw.cu), behind the switch GTRAIN_FUSED_ADAMW_CLIP.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace gtrain {

// A CUDA build and GTRAIN_FUSED_ADAMW_CLIP not "0" (read at each call).
bool fused_adamw_clip_enabled();
// How many times fused_adamw_clip has launched its kernel in this process (for tests of the switch).
int64_t fused_adamw_clip_launches();

// For each i, AdamW on params[i] (fp32, contiguous, one CUDA device) with grads[i], exp_avgs[i] and
// exp_avg_sqs[i], bias corrections of `step`: the update of at::_fused_adamw_ (compat::fused_adamw)
// with its grad_scale computed on the device from `norm` (a 1-element double tensor there, the
// global gradient norm) as clip_and_step does: (norm + 1e-6) / clip when norm > clip, else 1
// (clip <= 0: no clipping, norm may be undefined).
void fused_adamw_clip(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads,
                      const std::vector<torch::Tensor>& exp_avgs, const std::vector<torch::Tensor>& exp_avg_sqs,
                      int64_t step, double lr, double beta1, double beta2, double weight_decay, double eps,
                      const torch::Tensor& norm, double clip);

}  // namespace gtrain
