// train_steps.cpp: the optimizer steps a config asks for.
#include "runtime/core/train_steps.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "runtime/core/errors.h"

namespace gtrain {

int64_t compute_total_steps(const TrainConfig& t, int64_t train_size, int64_t tokens_per_sample) {
  if (t.steps > 0) return t.steps;
  const bool by_epochs = t.epochs > 0;
  const double steps = by_epochs
                           ? std::ceil(t.epochs * static_cast<double>(train_size) / static_cast<double>(t.global_batch))
                           : std::ceil(static_cast<double>(t.tokens) /
                                       (static_cast<double>(t.global_batch) * static_cast<double>(tokens_per_sample)));
  // 2^62 steps: far past any run, and within int64 with room for step x global_batch.
  if (!(steps <= 4.6e18)) {
    char what[160];
    if (by_epochs)
      std::snprintf(what, sizeof(what), "train.epochs = %g makes %g optimizer steps", t.epochs, steps);
    else
      std::snprintf(what, sizeof(what), "train.tokens = %lld makes %g optimizer steps", (long long)t.tokens, steps);
    throw ConfigError(std::string(what) + " (more than 2^62)", "give a realistic length");
  }
  return std::max<int64_t>(1, static_cast<int64_t>(steps));
}

std::optional<int64_t> total_steps_without_data(const TrainConfig& t, int64_t seq_len) {
  if (t.steps > 0) return t.steps;
  if (t.tokens > 0 && seq_len > 0) return compute_total_steps(t, 0, seq_len);
  if (t.epochs > 0) return std::nullopt;  // the data's size decides
  return 0;
}

}  // namespace gtrain
