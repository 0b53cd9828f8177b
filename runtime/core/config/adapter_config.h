// adapter_config.h: the [adapter] section: low-rank adapters (LoRA) trained on a frozen base model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/config/schema.h"

namespace gtrain {

struct AdapterConfig {
  std::string kind = "none";                      // "none" (train every parameter) or "lora"
  int64_t rank = 8;                               // lora: rank r of each adapter
  double alpha = 16.0;                            // lora: the update is scaled by alpha / rank
  double dropout = 0.0;                           // lora: dropout on the adapter's input
  std::vector<std::string> targets = {"q", "v"};  // lora: projections that get an adapter
  std::string init = "kaiming";     // lora: A's initialisation ("kaiming" or "gaussian"); B starts at zero
  std::string base_dtype = "fp32";  // lora: dtype the frozen base is held in ("fp32" or "bf16")

  bool lora() const { return kind == "lora"; }
  double scaling() const { return alpha / static_cast<double>(rank); }

  template <class V>
  void visit(V& v) {
    v("kind", kind,
      "\"none\": every parameter trains. \"lora\": the base model is frozen and each target projection "
      "W gets a low-rank update W + (alpha / rank) B A, A [rank, in] and B [out, rank] trained in fp32 "
      "(with their optimizer state); checkpoints then hold the adapters and the base's identity.",
      cfg::one_of({"none", "lora"}));
    v("rank", rank, "lora: rank of each adapter (at least 1, at most the projection's smaller side).",
      cfg::at_least(1));
    v("alpha", alpha, "lora: scale numerator; the adapter's output is multiplied by alpha / rank.",
      cfg::greater_than(0.0));
    v("dropout", dropout, "lora: dropout probability on each adapter's input (training only).", cfg::range(0.0, 0.99));
    v("targets", targets,
      "lora: projections that get an adapter. llama: any of q, k, v, o, gate, up, down; gpt: any of "
      "qkv (the fused attention input), o (attention output), up (MLP input), down (MLP output). "
      "\"all\" alone: every projection of the model.");
    v("init", init,
      "lora: how A starts: \"kaiming\" (uniform, as PEFT's and torch.nn.Linear's default) or "
      "\"gaussian\" (normal with std 1 / rank, as PEFT's init_lora_weights = \"gaussian\"); B starts at zero "
      "either way, so step 0 computes exactly the base model.",
      cfg::one_of({"kaiming", "gaussian"}));
    v("base_dtype", base_dtype,
      "lora: dtype of the frozen base weights: \"fp32\", or \"bf16\" (half the memory; the adapters and "
      "their optimizer state stay fp32).",
      cfg::one_of({"fp32", "bf16"}));
  }
};

// The adapter targets of a model family ("llama", "gpt"; "hf": either, decided by config.json).
inline std::vector<std::string> lora_targets_of(const std::string& model) {
  if (model == "llama") return {"q", "k", "v", "o", "gate", "up", "down"};
  if (model == "gpt") return {"qkv", "o", "up", "down"};
  return {"q", "k", "v", "o", "gate", "up", "down", "qkv"};
}
inline bool lora_target_known(const std::string& model, const std::string& target) {
  for (const auto& t : lora_targets_of(model)) {
    if (t == target) return true;
  }
  return false;
}
// "q, k, v, o, gate, up, down" for messages.
inline std::string lora_target_list(const std::string& model) {
  std::string out;
  for (const auto& t : lora_targets_of(model)) out += (out.empty() ? "" : ", ") + t;
  return out;
}

}  // namespace gtrain
