// progress.cpp: progress bar and plain log lines.
#include "runtime/metrics/progress.h"

#include "runtime/core/format.h"

#include <unistd.h>

#include <cmath>

namespace gtrain {

Progress::Progress(const LogConfig& c, int64_t total_steps, bool enabled, std::FILE* out)
    : total_(total_steps), interval_(c.interval), out_(out), start_(std::chrono::steady_clock::now()) {
  if (!enabled || c.progress == "none")
    style_ = Style::kNone;
  else if (c.progress == "bar")
    style_ = Style::kBar;
  else if (c.progress == "plain")
    style_ = Style::kPlain;
  else
    style_ = isatty(fileno(out)) ? Style::kBar : Style::kPlain;
}

void Progress::set_start(int64_t first_step) {
  first_ = first_step;
  start_ = std::chrono::steady_clock::now();
}

std::string Progress::format_rate(double r) {
  char buf[32];
  if (r >= 1e6)
    std::snprintf(buf, sizeof(buf), "%.2fM", r / 1e6);
  else if (r >= 1e4)
    std::snprintf(buf, sizeof(buf), "%.1fk", r / 1e3);
  else
    std::snprintf(buf, sizeof(buf), "%.1f", r);
  return buf;
}

void Progress::update(int64_t step, double loss, double rate, const char* unit, double lr) {
  if (style_ == Style::kNone) return;
  const int64_t done = step + 1;
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double per_step = elapsed / std::max<int64_t>(1, done - first_);
  const double eta = per_step * static_cast<double>(total_ - done);
  if (style_ == Style::kPlain) {
    if (done % interval_ != 0 && done != total_) return;
    std::fprintf(out_, "step %lld/%lld  loss %.4f  lr %.3g  %s %s/s  elapsed %s  eta %s\n", (long long)done,
                 (long long)total_, loss, lr, format_rate(rate).c_str(), unit, format_eta(elapsed).c_str(),
                 format_eta(eta).c_str());
    std::fflush(out_);
    return;
  }
  constexpr int kWidth = 28;
  const int filled = static_cast<int>(kWidth * static_cast<double>(done) / std::max<int64_t>(1, total_));
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(kWidth, '.');
  std::fprintf(out_, "\r[%s] %lld/%lld  loss %.4f  %s %s/s  eta %s \x1b[K", bar.c_str(), (long long)done,
               (long long)total_, loss, format_rate(rate).c_str(), unit, format_eta(eta).c_str());
  std::fflush(out_);
  bar_drawn_ = true;
}

bool Progress::prints(int64_t step) const {
  if (style_ == Style::kNone) return false;
  const int64_t done = step + 1;
  return style_ == Style::kBar || done % interval_ == 0 || done == total_;
}

void Progress::message(const std::string& line) {
  if (style_ == Style::kNone) return;
  if (bar_drawn_) std::fprintf(out_, "\r\x1b[K");
  std::fprintf(out_, "%s\n", line.c_str());
  std::fflush(out_);
}

void Progress::finish() {
  if (style_ == Style::kBar && bar_drawn_) {
    std::fprintf(out_, "\n");
    std::fflush(out_);
    bar_drawn_ = false;
  }
}

}  // namespace gtrain
