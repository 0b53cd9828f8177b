// precision_config.h: the [precision] section: fp32, bf16 autocast, fp16 with dynamic loss scaling.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/core/config/schema.h"

namespace gtrain {

struct PrecisionConfig {
  std::string dtype = "fp32";        // fp32 | bf16 | fp16 (fp16 needs CUDA)
  double loss_scale_init = 65536.0;  // fp16: initial dynamic loss scale
  int64_t loss_scale_window = 2000;  // fp16: overflow-free steps before the scale doubles

  template <class V>
  void visit(V& v) {
    v("dtype", dtype,
      "Compute precision: \"fp32\"; \"bf16\" (autocast, fp32 master weights); "
      "\"fp16\" (autocast with dynamic loss scaling, CUDA only).",
      cfg::one_of({"fp32", "bf16", "fp16"}));
    v("loss_scale_init", loss_scale_init, "fp16: initial loss scale.", cfg::greater_than(0.0));
    v("loss_scale_window", loss_scale_window, "fp16: steps without overflow before the loss scale doubles.",
      cfg::at_least(1));
  }
};

}  // namespace gtrain
