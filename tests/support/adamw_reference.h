// adamw_reference.h: a small tanh MLP and torch::optim::AdamW with decay for matrices only, the
// reference the data-parallel step tests compare gtrain's sharded, fused step with, and the engine
// options those tests share.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "strategies/data_parallel.h"

namespace gtrain::test {

// The device step (device_step) with AdamW, decay 0.1 on matrices, ZeRO `zero`, fused or not, over
// three buckets of 10 floats: each holds a bias and a matrix of SmallMlp, so owned ranges alternate
// between the weight-decay classes.
inline DataParallelOptions device_step_options(int zero, bool fused) {
  DataParallelOptions o;
  o.zero_stage = zero;
  o.bucket_bytes = 40;
  o.optimizer.name = "adamw";
  o.optimizer.weight_decay = 0.1;
  o.optimizer.fused = fused;
  o.device_step = true;
  return o;
}

// Parameters of a 6 -> 5 -> 4 -> 3 MLP: weight, bias per layer, in that order.
struct SmallMlp {
  std::vector<std::pair<std::string, torch::Tensor>> named;  // for the engine
  std::vector<torch::Tensor> params;                         // the same tensors
  std::vector<torch::Tensor> ref;                            // equal copies for the reference
  std::unique_ptr<torch::optim::AdamW> ref_opt;              // AdamW(lr, weight_decay) on ref

  SmallMlp(double lr, double weight_decay) {
    const std::vector<std::vector<int64_t>> shapes = {{6, 5}, {5}, {5, 4}, {4}, {4, 3}, {3}};
    std::vector<torch::Tensor> decay, plain;
    for (size_t i = 0; i < shapes.size(); ++i) {
      auto t0 = torch::randn(shapes[i]);
      named.emplace_back("p" + std::to_string(i), t0.clone().requires_grad_());
      params.push_back(named.back().second);
      ref.push_back(t0.clone().requires_grad_());
      (t0.dim() >= 2 ? decay : plain).push_back(ref.back());
    }
    std::vector<torch::optim::OptimizerParamGroup> groups;
    groups.emplace_back(
        decay, std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(lr).weight_decay(weight_decay)));
    groups.emplace_back(plain,
                        std::make_unique<torch::optim::AdamWOptions>(torch::optim::AdamWOptions(lr).weight_decay(0.0)));
    ref_opt = std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(lr));
  }

  // Sum of squared outputs for x [N, 6] through parameters p (params or ref).
  static torch::Tensor loss(const std::vector<torch::Tensor>& p, const torch::Tensor& x) {
    auto h = torch::tanh(torch::matmul(x, p[0]) + p[1]);
    h = torch::tanh(torch::matmul(h, p[2]) + p[3]);
    return (torch::matmul(h, p[4]) + p[5]).pow(2).sum();
  }

  // One reference step on x with clip_grad_norm_(clip); returns the norm before clipping.
  double ref_step(const torch::Tensor& x, double clip) {
    ref_opt->zero_grad();
    loss(ref, x).backward();
    const double norm = torch::nn::utils::clip_grad_norm_(ref, clip);
    ref_opt->step();
    return norm;
  }

  // Every parameter equals its reference copy; `what` names the case in a failure.
  void expect_matches_reference(const std::string& what) const {
    for (size_t i = 0; i < params.size(); ++i) {
      EXPECT_TRUE(torch::allclose(params[i], ref[i], 1e-5, 1e-6))
          << what << " param " << i << ": " << (params[i] - ref[i]).abs().max().item<double>();
    }
  }
};

}  // namespace gtrain::test
