// train_steps.h: compute_total_steps, the optimizer steps a config's [train] section asks for; no
// torch, so the launcher's plan and submit count them without opening data they do not need.
#pragma once

#include <cstdint>
#include <optional>

#include "runtime/core/config/train_config.h"

namespace gtrain {

// Optimizer steps a config asks for (train.steps, or epochs / tokens rounded up): `train_size` is
// the training set's samples (epochs), `tokens_per_sample` a sample's tokens (tokens). ConfigError
// past 2^62 steps.
int64_t compute_total_steps(const TrainConfig& t, int64_t train_size, int64_t tokens_per_sample);

// The steps known without opening the data: train.steps, or train.tokens over samples of `seq_len`
// tokens (seq_len > 0); 0 when the config sets none of them; nullopt when train.epochs asks for the
// training set's size.
std::optional<int64_t> total_steps_without_data(const TrainConfig& t, int64_t seq_len);

}  // namespace gtrain
