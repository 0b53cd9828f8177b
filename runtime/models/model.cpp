// model.cpp: default loss, accuracy and size estimates shared by all models.
#include "runtime/models/model.h"

#include "runtime/core/errors.h"
#include "runtime/models/parallel_layers.h"

namespace gtrain {

torch::Tensor Model::loss_sum(const torch::Tensor& output, const torch::Tensor& target) {
  namespace F = torch::nn::functional;
  if (output.dim() == 3) {  // [B, T, V] token logits: mean over tokens, sum over samples
    const auto T = output.size(1);
    auto l = F::cross_entropy(output.reshape({-1, output.size(2)}).to(torch::kFloat), target.reshape({-1}),
                              F::CrossEntropyFuncOptions().reduction(torch::kSum));
    return l / static_cast<double>(T);
  }
  return F::cross_entropy(output.to(torch::kFloat), target, F::CrossEntropyFuncOptions().reduction(torch::kSum));
}

torch::Tensor Model::correct(const torch::Tensor& output, const torch::Tensor& target) {
  return output.argmax(-1).eq(target).sum();
}

int64_t Model::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

ModelStats Model::stats(const DataSpec& spec) const {
  ModelStats s;
  s.params = num_parameters();
  const double per = spec.tokens ? static_cast<double>(spec.tokens_per_sample()) : 1.0;
  s.flops_per_sample = 6.0 * static_cast<double>(s.params) * per;
  int64_t in = 1;
  for (auto d : spec.input_shape) in *= d;
  s.activation_bytes_per_sample = 4.0 * static_cast<double>(in) * 8;
  s.recompute_bytes_per_sample = s.activation_bytes_per_sample;
  return s;
}

void Model::shard_tensor_parallel(std::shared_ptr<Communicator> tp) {
  throw ConfigError("tp = " + std::to_string(tp ? tp->size() : 1) +
                    ": this model is not built from tensor-parallel "
                    "layers (runtime/models/parallel_layers.h); use tp = 1");
}

std::map<std::string, TensorPlacement> Model::parameter_placements() {
  return parallel_layer_placements(*this);
}

namespace {
[[noreturn]] void no_pipeline() {
  throw ConfigError(
      "pp > 1: this model does not expose pipeline stages (blocks() and pipeline_embed/block/head); use pp = 1");
}
}  // namespace

torch::Tensor Model::pipeline_embed(const torch::Tensor&) {
  no_pipeline();
}
torch::Tensor Model::pipeline_block(int64_t, const torch::Tensor&) {
  no_pipeline();
}
torch::Tensor Model::pipeline_head(const torch::Tensor&) {
  no_pipeline();
}
std::vector<int64_t> Model::pipeline_activation_shape(const torch::Tensor&) {
  no_pipeline();
}
std::vector<std::string> Model::pipeline_outer_parameters(bool) {
  no_pipeline();
}

void Model::set_recompute(bool on) {
  if (on) throw ConfigError("parallel.recompute = true: this model has no blocks to recompute; set it to false");
}

}  // namespace gtrain
