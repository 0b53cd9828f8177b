// fused_adamw.cpp: fused_adamw_clip's tensors described to the kernel (fused_adamw_cuda.h).
#include "runtime/train/fused_adamw.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/core/env_switch.h"
#include "runtime/core/errors.h"

#ifdef GTRAIN_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "runtime/train/fused_adamw_cuda.h"
#endif

namespace gtrain {
namespace {
std::atomic<int64_t> g_launches{0};
}  // namespace

int64_t fused_adamw_clip_launches() {
  return g_launches.load(std::memory_order_relaxed);
}

bool fused_adamw_clip_enabled() {
#ifdef GTRAIN_WITH_CUDA
  return env_switch_on("GTRAIN_FUSED_ADAMW_CLIP");
#else
  return false;
#endif
}

void fused_adamw_clip(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads,
                      const std::vector<torch::Tensor>& exp_avgs, const std::vector<torch::Tensor>& exp_avg_sqs,
                      int64_t step, double lr, double beta1, double beta2, double weight_decay, double eps,
                      const torch::Tensor& norm, double clip) {
#ifdef GTRAIN_WITH_CUDA
  const size_t n = params.size();
  GT_CHECK(grads.size() == n && exp_avgs.size() == n && exp_avg_sqs.size() == n && step > 0,
           "fused_adamw_clip: one gradient and two moments per parameter, step >= 1");
  if (n == 0) return;
  const auto device = params[0].device();
  const c10::cuda::CUDAGuard guard(device);
  GT_CHECK(!norm.defined() || (norm.numel() == 1 && norm.scalar_type() == torch::kDouble && norm.device() == device),
           "fused_adamw_clip: the norm is one double on the parameters' device");
  // The descriptors and the starts, in pinned memory, then one copy to the device that does not
  // wait for the stream (the pinned block is not reused before the copy is done).
  std::vector<cuda_kernels::AdamWTensor> desc(n);
  std::vector<int64_t> starts(n);
  int64_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    for (const auto* t : {&params[i], &grads[i], &exp_avgs[i], &exp_avg_sqs[i]}) {
      GT_CHECK(t->scalar_type() == torch::kFloat && t->is_contiguous() && t->device() == device &&
                   t->numel() == params[i].numel(),
               "fused_adamw_clip: contiguous fp32 tensors of one size per parameter, on one CUDA device");
    }
    desc[i] = {params[i].data_ptr<float>(), grads[i].data_ptr<float>(), exp_avgs[i].data_ptr<float>(),
               exp_avg_sqs[i].data_ptr<float>(), params[i].numel()};
    starts[i] = total;
    total += params[i].numel();
  }
  const size_t desc_bytes = n * sizeof(cuda_kernels::AdamWTensor), bytes = desc_bytes + n * sizeof(int64_t);
  static_assert(sizeof(cuda_kernels::AdamWTensor) % sizeof(int64_t) == 0, "AdamWTensor: 8-byte aligned size");
  auto host = torch::empty({static_cast<int64_t>(bytes / sizeof(int64_t))},
                           torch::TensorOptions().dtype(torch::kLong).pinned_memory(true));
  std::memcpy(host.data_ptr(), desc.data(), desc_bytes);
  std::memcpy(static_cast<char*>(host.data_ptr()) + desc_bytes, starts.data(), n * sizeof(int64_t));
  const auto dev = host.to(device, /*non_blocking=*/true);
  const auto* d = dev.data_ptr<int64_t>();
  fused_math::AdamWStep s{};
  s.lr = static_cast<float>(lr), s.beta1 = static_cast<float>(beta1), s.beta2 = static_cast<float>(beta2);
  s.weight_decay = static_cast<float>(weight_decay), s.eps = static_cast<float>(eps);
  s.bias_correction1 = static_cast<float>(1.0 - std::pow(beta1, static_cast<double>(step)));
  s.bias_correction2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(beta2, static_cast<double>(step))));
  s.grad_divisor = 1.0f;
  const auto stream = c10::cuda::getCurrentCUDAStream(device.index());
  const std::string err = cuda_kernels::adamw_clip(reinterpret_cast<const cuda_kernels::AdamWTensor*>(d),
                                                   d + desc_bytes / sizeof(int64_t), static_cast<int>(n), total,
                                                   norm.defined() && clip > 0 ? norm.data_ptr<double>() : nullptr, clip,
                                                   s, static_cast<void*>(stream.stream()));
  if (!err.empty()) throw Error(err + " (set GTRAIN_FUSED_ADAMW_CLIP=0 to use at::_fused_adamw_ instead)");
  g_launches.fetch_add(1, std::memory_order_relaxed);
#else
  (void)params, (void)grads, (void)exp_avgs, (void)exp_avg_sqs, (void)step, (void)lr, (void)beta1, (void)beta2;
  (void)weight_decay, (void)eps, (void)norm, (void)clip;
  throw Error("fused_adamw_clip: this build has no CUDA kernels");
#endif
}

}  // namespace gtrain
