// optimizer.h: builds the configured torch optimizer with decay / no-decay parameter groups.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "runtime/models/model.h"
#include "runtime/train/optimizer_config.h"

namespace gtrain {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& c, Model& model);
void set_learning_rate(torch::optim::Optimizer& opt, double lr);

}  // namespace gtrain
