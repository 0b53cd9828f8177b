// optimizer_config.h: the [optimizer] section: AdamW or SGD with momentum and their settings.
#pragma once

#include <string>

#include "runtime/core/config/schema.h"

namespace gtrain {

struct OptimizerConfig {
  std::string name = "adamw";   // adamw | sgd
  double learning_rate = 1e-3;  // peak learning rate (after warmup)
  double weight_decay = 0.01;   // decoupled weight decay (not applied to biases and norms)
  double beta1 = 0.9;           // adamw: first-moment decay
  double beta2 = 0.999;         // adamw: second-moment decay
  double eps = 1e-8;            // adamw: denominator epsilon
  double momentum = 0.9;        // sgd: momentum
  bool nesterov = false;        // sgd: Nesterov momentum
  bool fused = true;            // adamw on CUDA: one fused kernel where LibTorch has it

  template <class V>
  void visit(V& v) {
    v("name", name, "Optimizer: \"adamw\" or \"sgd\" (with momentum).", cfg::one_of({"adamw", "sgd"}));
    v("learning_rate", learning_rate, "Peak learning rate, reached after train.warmup_steps.", cfg::greater_than(0.0));
    v("weight_decay", weight_decay,
      "Weight decay of parameters with 2 or more dimensions (weight matrices, convolution kernels and "
      "embeddings, as nanoGPT); biases and norm gains are exempt. adamw: decoupled (as torch.optim.AdamW); "
      "sgd: L2, added to the gradient before momentum (as torch.optim.SGD).",
      cfg::at_least(0.0));
    v("beta1", beta1, "adamw: decay of the first moment.", cfg::range(0.0, 0.999999));
    v("beta2", beta2, "adamw: decay of the second moment.", cfg::range(0.0, 0.999999));
    v("eps", eps, "adamw: epsilon added to the denominator.", cfg::greater_than(0.0));
    v("momentum", momentum, "sgd: momentum factor (0 = plain SGD).", cfg::range(0.0, 0.999999));
    v("nesterov", nesterov, "sgd: use Nesterov momentum.");
    v("fused", fused,
      "adamw on CUDA: the update is one fused kernel (at::_fused_adamw_, LibTorch >= 2.1); false = "
      "the flat element-wise update (CPU always uses it).");
  }
};

}  // namespace gtrain
