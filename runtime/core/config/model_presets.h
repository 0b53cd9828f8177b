// model_presets.h: model.preset, the published shapes of Llama 3.x and Qwen3 decoders (and small
// ones for tests), applied before the [model] keys so that keys set in the file override them.
#pragma once

#include <string>
#include <vector>

#include "runtime/core/config/model_config.h"

namespace gtrain {

// The preset names, in the order `gtrain config reference` lists them.
std::vector<std::string> model_preset_names();

// `base` with preset `name` applied (its model.name, shape, norms and rotary settings); throws
// ConfigError naming model.preset and the known names for an unknown one. "" returns `base`.
ModelConfig apply_model_preset(const ModelConfig& base, const std::string& name);

}  // namespace gtrain
