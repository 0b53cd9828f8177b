// precision.cpp: autocast scopes and dynamic loss scaling.
#include "runtime/precision/precision.h"

#include "runtime/common/torch_compat.h"
#include "runtime/core/errors.h"
#include "runtime/core/format.h"

namespace gtrain {

void DynamicLossScaler::update(bool overflow) {
  if (overflow) {
    scale_ = std::max(scale_ * 0.5, 1.0);
    clean_steps_ = 0;
  } else if (++clean_steps_ >= window_) {
    scale_ *= 2.0;
    clean_steps_ = 0;
  }
}

Precision::Precision(const PrecisionConfig& config, torch::Device device) : config_(config), device_(device) {
  if (config.dtype == "bf16") {
    dtype_ = torch::kBFloat16;
  } else if (config.dtype == "fp16") {
    if (!device.is_cuda()) {
      throw ConfigError(str("precision.dtype = \"fp16\" needs a CUDA device (this rank runs on ", device.str(), ")"),
                        "use \"bf16\" or \"fp32\" on CPU");
    }
    dtype_ = torch::kHalf;
    scaler_ = std::make_unique<DynamicLossScaler>(config.loss_scale_init, config.loss_scale_window);
  }
}

Precision::Scope::Scope(const Precision& p) : p_(p) {
  if (p_.dtype_ != torch::kFloat) compat::set_autocast(p_.device_.type(), true, p_.dtype_);
}

Precision::Scope::~Scope() {
  if (p_.dtype_ != torch::kFloat) compat::set_autocast(p_.device_.type(), false, p_.dtype_);
}

}  // namespace gtrain
