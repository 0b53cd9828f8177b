// progress.h: console progress: a live bar (step/total, loss, throughput, ETA) on a TTY, one plain
// line per log interval otherwise. Only rank 0 draws.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "runtime/core/config/log_config.h"

namespace gtrain {

class Progress {
 public:
  enum class Style { kBar, kPlain, kNone };
  Progress(const LogConfig& c, int64_t total_steps, bool enabled, std::FILE* out = stdout);
  void set_start(int64_t first_step);
  // After each step: loss, throughput (units per second) and the unit name ("samples", "tokens").
  void update(int64_t step, double loss, double rate, const char* unit, double lr);
  // Whether update() for `step` (0-based) draws anything: callers skip reading values otherwise.
  bool prints(int64_t step) const;
  void message(const std::string& line);  // a line that does not break the bar
  void finish();
  Style style() const { return style_; }
  static std::string format_rate(double rate);

 private:
  Style style_;
  int64_t total_, first_ = 0, interval_;
  std::FILE* out_;
  bool bar_drawn_ = false;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace gtrain
