// lora.cpp: adapters on a built model, the base frozen.
#include "runtime/models/lora.h"

#include <algorithm>
#include <map>

#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/models/model.h"
#include "runtime/models/parallel_layers.h"

namespace gtrain {

namespace {

// Dropout sites of the adapters: far above the models' own (1 + 3 x layer .. 3 + 3 x layer).
constexpr uint64_t kLoraSiteBase = uint64_t{1} << 40;

}  // namespace

std::string lora_target_of(const std::string& name) {
  static const std::vector<std::pair<std::string, std::string>> kSuffixes = {
      {".self_attn.q_proj", "q"}, {".self_attn.k_proj", "k"}, {".self_attn.v_proj", "v"}, {".self_attn.o_proj", "o"},
      {".mlp.gate_proj", "gate"}, {".mlp.up_proj", "up"},     {".mlp.down_proj", "down"}, {".attn.qkv", "qkv"},
      {".attn.proj", "o"},        {".mlp.fc", "up"},          {".mlp.proj", "down"}};
  for (const auto& [suffix, target] : kSuffixes) {
    if (ends_with(name, suffix)) return target;
  }
  return "";
}

bool is_lora_parameter(const std::string& name) {
  return ends_with(name, ".lora_A") || ends_with(name, ".lora_B");
}

LoraSummary apply_lora(Model& model, const AdapterConfig& c) {
  LoraSummary out;
  // The model's projections by target, in module order.
  std::map<std::string, std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>>> by_target;
  std::vector<std::string> order;
  for (const auto& kv : model.named_modules("", /*include_self=*/false)) {
    const std::string t = lora_target_of(kv.key());
    if (t.empty()) continue;
    if (!by_target.count(t)) order.push_back(t);
    by_target[t].emplace_back(kv.key(), kv.value());
  }
  if (by_target.empty()) {
    throw ConfigError("adapter.kind = \"lora\": this model has no projections an adapter can sit on",
                      "LoRA needs a gpt or llama model (model.name)");
  }
  std::vector<std::string> targets = c.targets;
  if (targets.size() == 1 && targets[0] == "all") targets = order;
  std::string have;
  for (const auto& t : order) have += (have.empty() ? "" : ", ") + t;
  for (const auto& t : targets) {
    if (!by_target.count(t)) {
      throw ConfigError("adapter.targets: '" + t + "' is not a projection of this model (it has " + have + ")",
                        "list targets among: " + have + ", or [\"all\"]");
    }
  }
  uint64_t site = kLoraSiteBase;
  // Adapters in module order (the random draws of A follow it), whichever order targets lists.
  std::vector<std::pair<std::string, std::shared_ptr<torch::nn::Module>>> chosen;
  for (const auto& kv : model.named_modules("", /*include_self=*/false)) {
    const std::string t = lora_target_of(kv.key());
    if (!t.empty() && std::find(targets.begin(), targets.end(), t) != targets.end())
      chosen.emplace_back(kv.key(), kv.value());
  }
  for (const auto& [name, module] : chosen) {
    LoraOptions o;
    o.rank = c.rank;
    o.scaling = c.scaling();
    o.dropout = c.dropout;
    o.gaussian = c.init == "gaussian";
    o.site = site++;
    int64_t in = 0, outf = 0;
    auto* col = dynamic_cast<ColumnParallelLinearImpl*>(module.get());
    auto* row = dynamic_cast<RowParallelLinearImpl*>(module.get());
    if (col) in = col->in_features, outf = col->out_features;
    if (row) in = row->in_features, outf = row->out_features;
    if (!col && !row) throw Error("apply_lora: " + name + " is not a parallel linear layer");
    if (c.rank > std::min(in, outf)) {
      throw ConfigError("adapter.rank = " + std::to_string(c.rank) + " is above " + name + "'s smaller side (" +
                            std::to_string(in) + " -> " + std::to_string(outf) + ")",
                        "a low-rank adapter needs adapter.rank <= " + std::to_string(std::min(in, outf)));
    }
    if (col) col->add_lora(o);
    if (row) row->add_lora(o);
    ++out.adapters;
  }
  for (const auto& kv : model.named_parameters()) {
    if (is_lora_parameter(kv.key())) {
      out.trainable += kv.value().numel();
    } else {
      kv.value().requires_grad_(false);
      out.frozen += kv.value().numel();
    }
  }
  out.targets = targets;
  return out;
}

void hold_frozen_base(Model& model, const std::string& dtype) {
  if (dtype == "fp32") return;
  if (dtype != "bf16") throw ConfigError("adapter.base_dtype = \"" + dtype + "\": expected \"fp32\" or \"bf16\"");
  torch::NoGradGuard ng;
  for (auto& p : model.parameters()) {
    if (!p.requires_grad() && p.dim() >= 2 && p.numel() > 0) p.set_data(p.detach().to(torch::kBFloat16));
  }
}

}  // namespace gtrain
