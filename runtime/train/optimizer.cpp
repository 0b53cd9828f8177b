// optimizer.cpp: AdamW and SGD with momentum; weight decay on matrices only.
#include "runtime/train/optimizer.h"

namespace gtrain {

std::unique_ptr<torch::optim::Optimizer> make_optimizer(const OptimizerConfig& c, Model& model) {
  std::vector<torch::Tensor> decay, no_decay;
  split_decay_params(model, &decay, &no_decay);
  if (c.name == "sgd") {
    auto opts = [&](double wd) {
      return std::make_unique<torch::optim::SGDOptions>(
          torch::optim::SGDOptions(c.learning_rate).momentum(c.momentum).nesterov(c.nesterov).weight_decay(wd));
    };
    std::vector<torch::optim::OptimizerParamGroup> groups;
    if (!decay.empty()) groups.emplace_back(decay, opts(c.weight_decay));
    if (!no_decay.empty()) groups.emplace_back(no_decay, opts(0.0));
    return std::make_unique<torch::optim::SGD>(groups, torch::optim::SGDOptions(c.learning_rate));
  }
  auto opts = [&](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(c.learning_rate)
                                                            .betas({c.beta1, c.beta2})
                                                            .eps(c.eps)
                                                            .weight_decay(wd));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (!decay.empty()) groups.emplace_back(decay, opts(c.weight_decay));
  if (!no_decay.empty()) groups.emplace_back(no_decay, opts(0.0));
  return std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(c.learning_rate));
}

void set_learning_rate(torch::optim::Optimizer& opt, double lr) {
  for (auto& g : opt.param_groups()) g.options().set_lr(lr);
}

}  // namespace gtrain
