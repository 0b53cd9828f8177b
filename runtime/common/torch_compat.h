// torch_compat.h: the only place that knows LibTorch 1.13 from 2.x (autocast API, SDPA, fused AdamW,
// profiler event times).
#pragma once

#include <cmath>
#include <cstdlib>

#include <functional>
#include <limits>
#include <optional>
#include <type_traits>
#include <utility>

#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#include <torch/version.h>

#define GTRAIN_TORCH_AT_LEAST(maj, min) \
  (TORCH_VERSION_MAJOR > (maj) || (TORCH_VERSION_MAJOR == (maj) && TORCH_VERSION_MINOR >= (min)))

namespace gtrain::compat {

// Causal self-attention on [B, H, T, D] tensors by the explicit masked softmax. One batched GEMM
// computes scale * q k^T plus the causal bias (0 / -inf, cached per shape), one softmax, one batched
// GEMM with v: fewer passes over the [B*H, T, T] scores than matmul, scale, masked_fill.
// `on_probs`, when set, transforms the probabilities (viewed [B, H, T, T]) before the product with v:
// gpt's layout-independent attention dropout (runtime/models/keyed_dropout.h).
inline torch::Tensor math_causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                           const std::function<torch::Tensor(const torch::Tensor&)>& on_probs = {}) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
  static thread_local torch::Tensor bias;
  if (!bias.defined() || bias.size(0) != T || bias.device() != q.device() || bias.scalar_type() != q.scalar_type()) {
    bias = torch::full({T, T}, -std::numeric_limits<double>::infinity(), q.options().requires_grad(false)).triu(1);
  }
  auto att = torch::baddbmm(bias, q.reshape({B * H, T, D}), k.reshape({B * H, T, D}).transpose(1, 2), /*beta=*/1.0,
                            /*alpha=*/1.0 / std::sqrt(static_cast<double>(D)));
  att = torch::softmax(att, -1);
  if (on_probs) att = on_probs(att.view({B, H, T, T})).reshape({B * H, T, T});
  return torch::bmm(att, v.reshape({B * H, T, D})).view({B, H, T, D});
}

// Causal self-attention without dropout: scaled_dot_product_attention (flash / memory-efficient
// kernels on CUDA, flash on CPU) where LibTorch has it, else the explicit masked softmax.
inline torch::Tensor causal_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
#if GTRAIN_TORCH_AT_LEAST(2, 0)
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true);
#else
  return math_causal_attention(q, k, v);
#endif
}

// Attention of q [B, H, T, D] over k, v [B, H, T, D] where `mask` ([B, 1, T, T] bool, true = may
// attend; every query attends at least itself) allows it: the document-causal attention of packed
// rows. scaled_dot_product_attention with the mask where LibTorch has it and nothing transforms the
// probabilities; else the explicit masked softmax, `on_probs` as in math_causal_attention.
inline torch::Tensor masked_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const torch::Tensor& mask,
                                      const std::function<torch::Tensor(const torch::Tensor&)>& on_probs = {}) {
#if GTRAIN_TORCH_AT_LEAST(2, 0)
  if (!on_probs) return at::scaled_dot_product_attention(q, k, v, mask, /*dropout_p=*/0.0, /*is_causal=*/false);
#endif
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  auto bias = torch::zeros(mask.sizes(), q.options().requires_grad(false))
                  .masked_fill_(mask.logical_not(), -std::numeric_limits<double>::infinity());
  auto att = torch::softmax(torch::matmul(q, k.transpose(-2, -1)).mul_(scale).add_(bias), -1);
  if (on_probs) att = on_probs(att);
  return torch::matmul(att, v);
}

// Causal grouped-query attention without dropout: q [B, H, T, D] over k, v [B, KV, T, D], KV
// dividing H, query head h reading key/value head h / (H / KV). LibTorch >= 2.5: SDPA's enable_gqa
// (the kernels index the shared heads; nothing repeated in memory, nothing scattered back in
// backward); before: the key/value heads repeated, then causal_attention.
inline torch::Tensor causal_gqa_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  if (k.size(1) == q.size(1)) return causal_attention(q, k, v);
#if GTRAIN_TORCH_AT_LEAST(2, 5)
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true,
                                          /*scale=*/std::nullopt, /*enable_gqa=*/true);
#else
  const int64_t group = q.size(1) / k.size(1);
  return causal_attention(q, k.repeat_interleave(group, 1), v.repeat_interleave(group, 1));
#endif
}

// Whether autocast is on for a device type.
inline bool autocast_enabled(c10::DeviceType device) {
#if GTRAIN_TORCH_AT_LEAST(2, 4)
  return at::autocast::is_autocast_enabled(device);
#else
  return device == c10::DeviceType::CPU ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
#endif
}

// Turns autocast on or off for a device type with a lower-precision dtype.
inline void set_autocast(c10::DeviceType device, bool enabled, c10::ScalarType dtype) {
#if GTRAIN_TORCH_AT_LEAST(2, 4)
  at::autocast::set_autocast_enabled(device, enabled);
  if (enabled) at::autocast::set_autocast_dtype(device, dtype);
#else
  if (device == c10::DeviceType::CPU) {
    at::autocast::set_cpu_enabled(enabled);
    if (enabled) at::autocast::set_autocast_cpu_dtype(dtype);
  } else {
    at::autocast::set_enabled(enabled);
    if (enabled) at::autocast::set_autocast_gpu_dtype(dtype);
  }
#endif
  if (!enabled) at::autocast::clear_cache();
}

// Whether at::_fused_adamw_ (one multi-tensor CUDA kernel for the whole AdamW update) exists, and
// whether it has a CPU kernel too (LibTorch 2.4).
constexpr bool kHaveFusedAdamW = GTRAIN_TORCH_AT_LEAST(2, 1);
constexpr bool kHaveFusedAdamWCpu = GTRAIN_TORCH_AT_LEAST(2, 4);

// AdamW on lists of same-device CUDA (from 2.4 also CPU) tensors in one fused kernel: for each i,
// params[i] *= 1 - lr * weight_decay, then the Adam update with bias corrections from steps[i] (a
// float scalar tensor the caller advances; the same tensor may repeat). grads[i] is first divided
// by `grad_scale` (a float scalar tensor on the device; undefined = 1), so gradient clipping costs
// no extra pass. Only call when kHaveFusedAdamW (and, for CPU tensors, kHaveFusedAdamWCpu).
inline void fused_adamw(at::TensorList params, at::TensorList grads, at::TensorList exp_avgs,
                        at::TensorList exp_avg_sqs, at::TensorList steps, double lr, double beta1, double beta2,
                        double weight_decay, double eps, const torch::Tensor& grad_scale) {
#if GTRAIN_TORCH_AT_LEAST(2, 1)
#if GTRAIN_TORCH_AT_LEAST(2, 4)
  using Optional = std::optional<at::Tensor>;  // c10::optional became std::optional
#else
  using Optional = c10::optional<at::Tensor>;
#endif
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, lr, beta1, beta2, weight_decay,
                    eps, /*amsgrad=*/false, /*maximize=*/false,
                    grad_scale.defined() ? Optional(grad_scale) : Optional(), /*found_inf=*/Optional());
#else
  (void)params, (void)grads, (void)exp_avgs, (void)exp_avg_sqs, (void)steps, (void)lr, (void)beta1, (void)beta2;
  (void)weight_decay, (void)eps, (void)grad_scale;
  TORCH_CHECK(false, "fused AdamW needs LibTorch >= 2.1");
#endif
}

// The lower-precision dtype autocast computes in on `device`, or nullopt when autocast is off there.
inline std::optional<c10::ScalarType> autocast_dtype(c10::DeviceType device) {
#if GTRAIN_TORCH_AT_LEAST(2, 4)
  if (!at::autocast::is_autocast_enabled(device)) return std::nullopt;
  return at::autocast::get_autocast_dtype(device);
#else
  if (device == c10::DeviceType::CPU) {
    if (!at::autocast::is_cpu_enabled()) return std::nullopt;
    return at::autocast::get_autocast_cpu_dtype();
  }
  if (!at::autocast::is_enabled()) return std::nullopt;
  return at::autocast::get_autocast_gpu_dtype();
#endif
}

// Deterministic algorithms where the backend has them (warn-only: an op CUDA has no deterministic
// kernel for still runs). cuBLAS needs a fixed workspace for reproducible matmuls: set it unless the
// user did, before the first CUDA matmul creates a handle.
// `strict` (bitwise mode): an operation without a deterministic kernel is an error naming it.
inline void set_deterministic(bool on, bool strict = false) {
  at::globalContext().setDeterministicAlgorithms(on, /*warn_only=*/!strict);
  at::globalContext().setDeterministicCuDNN(on);
  if (on) setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
}

// A profiler event's duration in microseconds: KinetoEvent::durationUs() (1.13) became
// durationNs() (2.x); whichever the event has is used.
template <class Event, class = void>
struct HasDurationNs : std::false_type {};
template <class Event>
struct HasDurationNs<Event, std::void_t<decltype(std::declval<const Event&>().durationNs())>> : std::true_type {};
template <class Event>
double event_duration_us(const Event& e) {
  if constexpr (HasDurationNs<Event>::value) {
    return static_cast<double>(e.durationNs()) / 1000.0;
  } else {
    return static_cast<double>(e.durationUs());
  }
}
// Its start, in microseconds on the profiler's clock (startUs() then, startNs() now).
template <class Event>
double event_start_us(const Event& e) {
  if constexpr (HasDurationNs<Event>::value) {
    return static_cast<double>(e.startNs()) / 1000.0;
  } else {
    return static_cast<double>(e.startUs());
  }
}

// Frees the memory of t's storage and keeps the tensor (and every view of the storage, such as the
// ones autograd saved) with its shape: FSDP's storage().resize_(0). Nothing may read t until
// restore_storage. StorageImpl::set_data_ptr / set_nbytes are the same in LibTorch 1.13 and 2.x.
inline void release_storage(const torch::Tensor& t) {
  auto* s = t.storage().unsafeGetStorageImpl();
  if (s->nbytes() == 0) return;
  s->set_data_ptr(s->allocator()->allocate(0));  // the old DataPtr, returned and destroyed, frees the memory
  s->set_nbytes(0);
}
// Gives t's storage `nbytes` of fresh (uninitialised) memory from its allocator.
inline void restore_storage(const torch::Tensor& t, size_t nbytes) {
  auto* s = t.storage().unsafeGetStorageImpl();
  if (s->nbytes() == nbytes) return;
  s->set_data_ptr(s->allocator()->allocate(nbytes));
  s->set_nbytes(nbytes);
}

}  // namespace gtrain::compat
