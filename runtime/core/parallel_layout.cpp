// parallel_layout.cpp: ParallelLayout validation, with every factor in the message.
#include "runtime/core/parallel_layout.h"

#include <cstdio>

#include "runtime/core/errors.h"

namespace gtrain {

std::string ParallelLayout::factors(int64_t world, int64_t global_batch_expected) const {
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "dp=%lld tp=%lld pp=%lld (dp*tp*pp=%lld), world=%lld; micro_batch=%lld "
                "grad_accum=%lld (dp*micro_batch*grad_accum=%lld), global_batch=%lld",
                (long long)dp, (long long)tp, (long long)pp, (long long)ranks(), (long long)world,
                (long long)micro_batch, (long long)grad_accum, (long long)global_batch(),
                (long long)global_batch_expected);
  return buf;
}

void ParallelLayout::validate(int64_t world, int64_t global_batch_expected) const {
  if (dp < 1 || tp < 1 || pp < 1 || micro_batch < 1 || grad_accum < 1) {
    throw ConfigError("invalid plan: every factor must be >= 1: " + factors(world, global_batch_expected));
  }
  if (ranks() != world) {
    throw ConfigError("invalid plan: dp*tp*pp must equal the world size: " + factors(world, global_batch_expected));
  }
  if (global_batch() != global_batch_expected) {
    throw ConfigError("invalid plan: dp*micro_batch*grad_accum must equal train.global_batch: " +
                      factors(world, global_batch_expected));
  }
  if (zero < 0 || zero > 2)
    throw ConfigError("invalid plan: zero must be 0, 1 or 2 (got " + std::to_string(zero) + ")");
}

}  // namespace gtrain
