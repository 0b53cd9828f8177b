// precision.h: compute precision for a device: autocast scopes (bf16/fp16) and the dynamic loss
// scaler fp16 needs (the parallel engine unscales and checks gradients; a step with inf/nan
// gradients is skipped and halves the scale; a window of clean steps doubles it).
#pragma once

#include <torch/torch.h>

#include "runtime/core/config/precision_config.h"

namespace gtrain {

class DynamicLossScaler {
 public:
  DynamicLossScaler(double init_scale, int64_t window) : scale_(init_scale), window_(window) {}
  double scale() const { return scale_; }
  // After a step: halve on overflow, double after `window` clean steps.
  void update(bool overflow);

 private:
  double scale_;
  int64_t window_;
  int64_t clean_steps_ = 0;
};

class Precision {
 public:
  // Throws ConfigError when the dtype is not available on `device` (fp16 on CPU).
  Precision(const PrecisionConfig& config, torch::Device device);

  // RAII: autocast on for the device while alive (no-op for fp32).
  class Scope {
   public:
    Scope(const Precision& p);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    const Precision& p_;
  };
  Scope autocast() const { return Scope(*this); }

  bool uses_loss_scaling() const { return scaler_ != nullptr; }
  DynamicLossScaler* scaler() { return scaler_.get(); }
  const std::string& name() const { return config_.dtype; }
  c10::ScalarType compute_dtype() const { return dtype_; }

 private:
  PrecisionConfig config_;
  torch::Device device_;
  c10::ScalarType dtype_ = torch::kFloat;
  std::unique_ptr<DynamicLossScaler> scaler_;
};

}  // namespace gtrain
