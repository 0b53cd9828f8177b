// env_switch.h: env_switch_on, how gtrain reads its on-by-default GTRAIN_* switches (the fused
// kernels' GTRAIN_FUSED_*): on unless the variable is set to "0".
#pragma once

#include <cstdlib>
#include <cstring>

namespace gtrain {

inline bool env_switch_on(const char* name) {
  const char* v = std::getenv(name);
  return !(v && std::strcmp(v, "0") == 0);
}

}  // namespace gtrain
