// lr_schedule.h: learning rate at a step: linear warmup, then cosine / linear decay or constant.
#pragma once

#include <cstdint>

#include "runtime/core/config/train_config.h"

namespace gtrain {

// `step` is the 0-based index of the optimizer step about to be taken; `total` the run's steps.
double lr_at(const TrainConfig& t, double peak_lr, int64_t step, int64_t total);

}  // namespace gtrain
