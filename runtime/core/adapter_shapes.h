// adapter_shapes.h: the projections LoRA adapters sit on and how many parameters the adapters add,
// from the model's shape alone (torch-free: the planner sizes an 8B model's adapters without it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/config/adapter_config.h"
#include "runtime/core/config/model_config.h"

namespace gtrain {

// One projection of a block, W [out, in]: its adapter is A [rank, in] and B [out, rank].
struct LoraProjection {
  std::string name;  // adapter.targets' name: "q", "gate", "qkv", ...
  int64_t in = 0;    // input width
  int64_t out = 0;   // output width
};

// Every projection of one block, in lora_targets_of()'s order. llama: q (C -> H D), k and v
// (C -> KV D), o (H D -> C), gate and up (C -> I), down (I -> C); gpt: qkv (C -> 3C), o (C -> C),
// up (C -> 4C), down (4C -> C). Empty for other models.
std::vector<LoraProjection> lora_projections(const ModelConfig& model);

// The projections `adapter.targets` selects ("all": every one), in lora_projections()' order; empty
// when adapter.kind is not "lora". Targets the model has not are left out (the config check names them).
std::vector<LoraProjection> lora_target_projections(const ModelConfig& model, const AdapterConfig& adapter);

// Adapter parameters in one block: rank x (in + out) summed over the targets (0 without LoRA).
int64_t lora_parameters_per_block(const ModelConfig& model, const AdapterConfig& adapter);

// Adapter parameters of the whole model: n_layer x lora_parameters_per_block (adapters sit in the
// blocks only: none on the embedding or the output layer).
int64_t lora_parameter_count(const ModelConfig& model, const AdapterConfig& adapter);

}  // namespace gtrain
