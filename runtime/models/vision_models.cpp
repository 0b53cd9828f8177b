// vision_models.cpp: the built-in classifiers "mlp" and "cnn", and built-in registration.
#include <cmath>

#include "runtime/core/errors.h"
#include "runtime/models/gpt.h"
#include "runtime/models/keyed_dropout.h"
#include "runtime/models/llama.h"
#include "runtime/models/model_registry.h"

namespace gtrain {
namespace {

int64_t flat_size(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

// Runs `seq` on `x` with keyed dropout after each ReLU (sites site, site + 1, ...). Dropout is not a
// module of `seq`, so the parameter names, and the checkpoints, do not depend on model.dropout.
torch::Tensor forward_with_dropout(torch::nn::Sequential& seq, torch::Tensor x, double p, uint64_t site, bool train) {
  for (auto& m : *seq) {
    x = m.forward(x);
    if (m.ptr()->as<torch::nn::ReLU>() != nullptr) x = keyed_dropout(x, p, site++, train);
  }
  return x;
}

void require_classes(const DataSpec& spec, const char* model) {
  if (spec.tokens || spec.num_classes < 2) {
    throw ConfigError(std::string("model.name = \"") + model +
                      "\" is a classifier and needs labelled data (data.kind = \"idx\" or \"synthetic\")");
  }
}

// Multi-layer perceptron: flatten, [Linear, ReLU, dropout] per hidden width, Linear to classes.
class Mlp : public Model {
 public:
  Mlp(const ModelConfig& c, const DataSpec& spec) : dropout_(c.dropout) {
    require_classes(spec, "mlp");
    int64_t in = flat_size(spec.input_shape);
    for (size_t i = 0; i < c.hidden.size(); ++i) {
      if (c.hidden[i] < 1) throw ConfigError("model.hidden: widths must be >= 1");
      layers_->push_back(torch::nn::Linear(in, c.hidden[i]));
      layers_->push_back(torch::nn::ReLU());
      in = c.hidden[i];
    }
    layers_->push_back(torch::nn::Linear(in, spec.num_classes));
    register_module("layers", layers_);
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    return forward_with_dropout(layers_, x.flatten(1), dropout_, /*site=*/0, is_training());
  }

  ModelStats stats(const DataSpec& spec) const override {
    ModelStats s = Model::stats(spec);
    double acts = static_cast<double>(flat_size(spec.input_shape));
    for (const auto& m : layers_->children()) {
      if (auto* lin = m->as<torch::nn::Linear>()) acts += 2.0 * lin->options.out_features();
    }
    s.activation_bytes_per_sample = 4.0 * acts;
    s.recompute_bytes_per_sample = s.activation_bytes_per_sample;
    return s;
  }

 private:
  torch::nn::Sequential layers_;
  double dropout_;  // after each hidden ReLU
};

// Small ConvNet for 28x28 images: [Conv3x3, ReLU, MaxPool2] per channel entry, then two Linear.
class Cnn : public Model {
 public:
  Cnn(const ModelConfig& c, const DataSpec& spec) : dropout_(c.dropout) {
    require_classes(spec, "cnn");
    if (spec.input_shape.size() != 3) {
      throw ConfigError("model.name = \"cnn\" needs image data [C, H, W] (data.kind = \"idx\")");
    }
    int64_t ch = spec.input_shape[0], h = spec.input_shape[1], w = spec.input_shape[2];
    for (int64_t out : c.channels) {
      if (out < 1) throw ConfigError("model.channels: each entry must be >= 1");
      if (h < 2 || w < 2)
        throw ConfigError("model.channels: too many conv blocks for " + std::to_string(spec.input_shape[1]) + "x" +
                          std::to_string(spec.input_shape[2]) + " images");
      features_->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(ch, out, 3).padding(1)));
      features_->push_back(torch::nn::ReLU());
      features_->push_back(torch::nn::MaxPool2d(2));
      conv_acts_ += static_cast<double>(out) * h * w * 2 + static_cast<double>(out) * (h / 2) * (w / 2);
      ch = out, h /= 2, w /= 2;
    }
    hidden_ = 128;
    head_->push_back(torch::nn::Flatten());
    head_->push_back(torch::nn::Linear(ch * h * w, hidden_));
    head_->push_back(torch::nn::ReLU());
    head_->push_back(torch::nn::Linear(hidden_, spec.num_classes));
    register_module("features", features_);
    register_module("head", head_);
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    return forward_with_dropout(head_, features_->forward(x), dropout_, /*site=*/0, is_training());
  }

  ModelStats stats(const DataSpec& spec) const override {
    ModelStats s = Model::stats(spec);
    // Convolutions reuse weights per pixel: FLOPs are 6 x (MACs per sample).
    double macs = 0;
    int64_t h = spec.input_shape[1], w = spec.input_shape[2];
    for (const auto& m : features_->children()) {
      if (auto* conv = m->as<torch::nn::Conv2d>()) {
        const auto& o = conv->options;
        macs += static_cast<double>(o.in_channels()) * o.out_channels() * 9 * h * w;
        h /= 2, w /= 2;
      }
    }
    for (const auto& m : head_->children()) {
      if (auto* lin = m->as<torch::nn::Linear>()) macs += static_cast<double>(lin->weight.numel());
    }
    s.flops_per_sample = 6.0 * macs;
    s.activation_bytes_per_sample = 4.0 * (conv_acts_ + flat_size(spec.input_shape) + 2.0 * hidden_);
    s.recompute_bytes_per_sample = s.activation_bytes_per_sample;
    return s;
  }

 private:
  torch::nn::Sequential features_;
  torch::nn::Sequential head_;
  int64_t hidden_ = 128;
  double conv_acts_ = 0;
  double dropout_;  // after the hidden ReLU of the head
};

}  // namespace

void register_builtin_models(ModelRegistry& r) {
  r.add("mlp", [](const ModelConfig& c, const DataSpec& s) { return std::make_shared<Mlp>(c, s); });
  r.add("cnn", [](const ModelConfig& c, const DataSpec& s) { return std::make_shared<Cnn>(c, s); });
  r.add("gpt", [](const ModelConfig& c, const DataSpec& s) { return std::make_shared<Gpt>(c, s); });
  r.add("llama", [](const ModelConfig& c, const DataSpec& s) { return std::make_shared<Llama>(c, s); });
}

}  // namespace gtrain
