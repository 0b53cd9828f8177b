// adapter_shapes.cpp: the block projections of gpt and llama, and the LoRA parameter counts over them.
#include "runtime/core/adapter_shapes.h"

#include <algorithm>

namespace gtrain {

std::vector<LoraProjection> lora_projections(const ModelConfig& m) {
  const int64_t C = m.n_embd;
  if (m.name == "llama") {
    const int64_t HD = m.n_head * m.llama_head_dim(), KVD = m.llama_kv_heads() * m.llama_head_dim();
    const int64_t I = m.llama_intermediate();
    return {{"q", C, HD}, {"k", C, KVD}, {"v", C, KVD}, {"o", HD, C}, {"gate", C, I}, {"up", C, I}, {"down", I, C}};
  }
  if (m.name == "gpt") return {{"qkv", C, 3 * C}, {"o", C, C}, {"up", C, 4 * C}, {"down", 4 * C, C}};
  return {};
}

std::vector<LoraProjection> lora_target_projections(const ModelConfig& m, const AdapterConfig& a) {
  if (!a.lora()) return {};
  const bool all = std::find(a.targets.begin(), a.targets.end(), "all") != a.targets.end();
  std::vector<LoraProjection> out;
  for (const auto& p : lora_projections(m)) {
    if (all || std::find(a.targets.begin(), a.targets.end(), p.name) != a.targets.end()) out.push_back(p);
  }
  return out;
}

int64_t lora_parameters_per_block(const ModelConfig& m, const AdapterConfig& a) {
  int64_t n = 0;
  for (const auto& p : lora_target_projections(m, a)) n += a.rank * (p.in + p.out);
  return n;
}

int64_t lora_parameter_count(const ModelConfig& m, const AdapterConfig& a) {
  return m.n_layer * lora_parameters_per_block(m, a);
}

}  // namespace gtrain
