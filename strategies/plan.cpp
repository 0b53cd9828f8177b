// plan.cpp: Plan validation and summary.
#include "strategies/plan.h"

#include <cstdio>

#include "runtime/common/errors.h"

namespace gtrain {

void Plan::validate(int64_t expected_world, int64_t expected_global_batch) const {
  auto factors = [&] {
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  "dp=%lld tp=%lld pp=%lld (dp*tp*pp=%lld), world=%lld; micro_batch=%lld "
                  "grad_accum=%lld (dp*micro_batch*grad_accum=%lld), global_batch=%lld",
                  (long long)dp, (long long)tp, (long long)pp, (long long)(dp * tp * pp), (long long)expected_world,
                  (long long)micro_batch, (long long)grad_accum, (long long)global_batch(),
                  (long long)expected_global_batch);
    return std::string(buf);
  };
  if (dp < 1 || tp < 1 || pp < 1 || micro_batch < 1 || grad_accum < 1) {
    throw ConfigError("invalid plan: every factor must be >= 1: " + factors());
  }
  if (dp * tp * pp != expected_world) {
    throw ConfigError("invalid plan: dp*tp*pp must equal the world size: " + factors());
  }
  if (global_batch() != expected_global_batch) {
    throw ConfigError("invalid plan: dp*micro_batch*grad_accum must equal train.global_batch: " + factors());
  }
  if (zero < 0 || zero > 2)
    throw ConfigError("invalid plan: zero must be 0, 1 or 2 (got " + std::to_string(zero) + ")");
}

std::string Plan::summary() const {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "dp=%lld tp=%lld pp=%lld zero=%lld micro_batch=%lld grad_accum=%lld recompute=%s %s",
                (long long)dp, (long long)tp, (long long)pp, (long long)zero, (long long)micro_batch,
                (long long)grad_accum, recompute ? "on" : "off", precision.c_str());
  return buf;
}

std::string Plan::estimate_summary() const {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "est %.2f GiB/rank, %.4g s/step%s%s", est_memory_bytes / (1024.0 * 1024.0 * 1024.0),
                est_step_seconds, profile.empty() ? "" : " on ", profile.c_str());
  return buf;
}

}  // namespace gtrain
