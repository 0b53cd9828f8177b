// lora.h: [adapter] kind = "lora" on a built model: adapters on the target projections of a gpt or
// llama (runtime/models/parallel_layers.h's LoraOptions), every other parameter frozen, and the
// frozen base held in bf16 when asked. Applied to the whole model before tensor or pipeline
// parallel split it, from the same random stream on every rank, so every layout starts alike.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "runtime/core/config/adapter_config.h"

namespace gtrain {

class Model;

struct LoraSummary {
  int64_t adapters = 0;              // projections that got one
  int64_t trainable = 0;             // adapter parameters
  int64_t frozen = 0;                // base parameters
  std::vector<std::string> targets;  // the targets applied (adapter.targets, "all" expanded)
};

// Adds the adapters and freezes the rest. Throws ConfigError (adapter.targets naming a projection the
// model has not; adapter.rank above a target's smaller side; a model without parallel linear layers).
LoraSummary apply_lora(Model& model, const AdapterConfig& config);

// Holds every frozen parameter of two or more dimensions in `dtype` (adapter.base_dtype), before the
// engine is built (ZeRO-3 shards them in that type; checkpoint.init_from's values are cast as they
// load); the layers compute in their input's type.
void hold_frozen_base(Model& model, const std::string& dtype);

// The adapter target a module name is ("layers.3.self_attn.q_proj" -> "q", "h.0.attn.qkv" -> "qkv"),
// or "" for a module that is not a target projection.
std::string lora_target_of(const std::string& module_name);

// Whether a parameter name is an adapter's ("...q_proj.lora_A").
bool is_lora_parameter(const std::string& name);

}  // namespace gtrain
