// plan_lora.h: `gtrain plan`'s LoRA suggestion: when no full fine-tune layout fits, the same job
// planned with LoRA adapters on a frozen base, printed with the exact [adapter] keys to add. A
// suggestion only: the plan itself stays the job's as configured (and still does not fit).
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/core/config/adapter_config.h"
#include "runtime/core/config/job_config.h"
#include "strategies/planner/planner.h"

namespace gtrain {

// What a torchtune or Axolotl user starts from: rank 16, alpha 32, every projection, no dropout,
// the frozen base in bf16 on GPUs (fp32 on CPU ranks, whose matmuls bf16 slows down).
AdapterConfig suggested_lora(bool gpu);

struct LoraSuggestion {
  AdapterConfig adapter;         // the [adapter] keys to add
  int64_t adapter_params = 0;    // the adapters' parameters
  std::vector<RankedPlan> fits;  // the LoRA layouts that fit, best first
  std::string closest;           // none fits: what the closest one misses by
};

// Whether `gtrain plan` offers LoRA for `cfg`: adapter.kind is "none" and the model is one LoRA
// adapts (gpt, llama).
bool lora_suggestion_applies(const JobConfig& cfg);

// `cfg` with `adapter`, planned through `input_for` (the command's PlannerInput for a config).
LoraSuggestion plan_lora_suggestion(const JobConfig& cfg, const AdapterConfig& adapter,
                                    const std::function<PlannerInput(const JobConfig&)>& input_for);

// The keys to add, as TOML ("[adapter]\nkind = \"lora\"\n...") and as JSON ({"kind": "lora", ...}).
std::string lora_keys_toml(const AdapterConfig& a);
nlohmann::json lora_keys_json(const AdapterConfig& a);

// "No full fine-tune fits 2 x 24.0 GiB GPUs. With LoRA these fit:", the layouts (memory split into
// the frozen base, the adapters' state and the activations) and the keys. `unit` "GPU" or "rank";
// `memory` the card's total per unit (0: unknown).
void render_lora_suggestion(const LoraSuggestion& s, const std::string& unit, int64_t world, double memory,
                            std::ostream& out);

// {"keys": {...}, "adapter_params": N, "candidates": [candidate_json...], "closest": "..." | null}.
nlohmann::json lora_suggestion_json(const LoraSuggestion& s);

}  // namespace gtrain
