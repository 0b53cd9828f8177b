// tiny_resnet.cpp: an example model plugin. Build it (it is part of the gtrain build as
// libgtrain_custom_model.so), then in a config:
//   [model]
//   name = "tiny_resnet"
//   plugin = "build/libgtrain_custom_model.so"
// The plugin links gtrain_runtime and registers its factory through GTRAIN_PLUGIN_ENTRY. To build
// a copy outside gtrain's build, see CMakeLists.txt here.
#include <torch/torch.h>

#include "runtime/core/errors.h"
#include "runtime/models/model_registry.h"

namespace {

// A residual conv block: x + conv(relu(conv(x))).
struct ResBlockImpl : torch::nn::Module {
  explicit ResBlockImpl(int64_t ch) {
    c1 = register_module("c1", torch::nn::Conv2d(torch::nn::Conv2dOptions(ch, ch, 3).padding(1)));
    c2 = register_module("c2", torch::nn::Conv2d(torch::nn::Conv2dOptions(ch, ch, 3).padding(1)));
  }
  torch::Tensor forward(const torch::Tensor& x) { return torch::relu(x + c2->forward(torch::relu(c1->forward(x)))); }
  torch::nn::Conv2d c1{nullptr}, c2{nullptr};
};
TORCH_MODULE(ResBlock);

class TinyResNet : public gtrain::Model {
 public:
  TinyResNet(const gtrain::ModelConfig& c, const gtrain::DataSpec& spec) {
    if (spec.input_shape.size() != 3 || spec.num_classes < 2) {
      throw gtrain::ConfigError("model.name = \"tiny_resnet\" needs labelled images (data.kind = \"idx\")");
    }
    const int64_t ch = c.channels.empty() ? 16 : c.channels[0];
    stem_ = register_module("stem", torch::nn::Conv2d(torch::nn::Conv2dOptions(spec.input_shape[0], ch, 3).padding(1)));
    block_ = register_module("block", ResBlock(ch));
    head_ = register_module("head", torch::nn::Linear(ch, spec.num_classes));
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    auto y = torch::max_pool2d(torch::relu(stem_->forward(x)), 2);
    y = block_->forward(y);
    return head_->forward(y.mean({2, 3}));  // global average pool
  }

 private:
  torch::nn::Conv2d stem_{nullptr};
  ResBlock block_{nullptr};
  torch::nn::Linear head_{nullptr};
};

}  // namespace

GTRAIN_PLUGIN_ENTRY(registry) {
  registry.add("tiny_resnet", [](const gtrain::ModelConfig& c, const gtrain::DataSpec& s) {
    return std::make_shared<TinyResNet>(c, s);
  });
}
