// lr_schedule.cpp: warmup + cosine / linear / constant schedules.
#include "runtime/core/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace gtrain {

double lr_at(const TrainConfig& t, double peak, int64_t step, int64_t total) {
  if (t.warmup_steps > 0 && step < t.warmup_steps) {
    return peak * static_cast<double>(step + 1) / static_cast<double>(t.warmup_steps);
  }
  if (t.lr_schedule == LrSchedule::constant) return peak;
  const int64_t decay_steps = std::max<int64_t>(1, total - t.warmup_steps - 1);
  const double progress = std::clamp(static_cast<double>(step - t.warmup_steps) / decay_steps, 0.0, 1.0);
  const double floor = peak * t.min_lr_ratio;
  if (t.lr_schedule == LrSchedule::linear) return peak - (peak - floor) * progress;
  return floor + 0.5 * (peak - floor) * (1.0 + std::cos(M_PI * progress));
}

}  // namespace gtrain
