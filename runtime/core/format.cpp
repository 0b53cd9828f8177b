// format.cpp: byte-size and duration formatting.
#include "runtime/core/format.h"

#include <cmath>
#include <cstdarg>
#include <cstdio>

namespace gtrain {

std::string strf(const char* format, ...) {
  char buf[512];
  va_list args;
  va_start(args, format);
  const int n = std::vsnprintf(buf, sizeof(buf), format, args);
  va_end(args);
  if (n < 0) return {};
  if (static_cast<size_t>(n) < sizeof(buf)) return buf;
  std::string out(static_cast<size_t>(n) + 1, '\0');
  va_start(args, format);
  std::vsnprintf(out.data(), out.size(), format, args);
  va_end(args);
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string format_bytes(double bytes) {
  if (std::isinf(bytes)) return "unlimited";
  const double a = std::fabs(bytes);
  if (a >= kGiB) return strf("%.2f GiB", bytes / kGiB);
  if (a >= kMiB) return strf("%.1f MiB", bytes / kMiB);
  return strf("%.1f KiB", bytes / kKiB);
}

std::string format_size(double bytes) {
  if (std::isinf(bytes)) return "unlimited";
  if (std::fabs(bytes) < kGiB) return strf("%.1f MiB", bytes / kMiB);
  return strf("%.1f GiB", bytes / kGiB);
}

std::string format_gib(double bytes, int decimals) {
  if (std::isinf(bytes)) return "unlimited";
  return strf("%.*f", decimals, bytes / kGiB);
}

std::string format_duration(int64_t s) {
  if (s < 0) s = 0;
  const int64_t d = s / 86400, h = (s % 86400) / 3600, m = (s % 3600) / 60, sec = s % 60;
  if (d > 0) return strf("%lld-%02lld:%02lld:%02lld", (long long)d, (long long)h, (long long)m, (long long)sec);
  return strf("%02lld:%02lld:%02lld", (long long)h, (long long)m, (long long)sec);
}

std::string format_walltime(double seconds) {
  const auto s = static_cast<int64_t>(seconds);
  return strf("%02lld:%02lld:%02lld", (long long)(s / 3600), (long long)(s / 60 % 60), (long long)(s % 60));
}

std::string format_clock(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  const auto t = static_cast<int64_t>(seconds + 0.5);
  if (t >= 3600)
    return strf("%lld:%02lld:%02lld", (long long)(t / 3600), (long long)(t / 60 % 60), (long long)(t % 60));
  return strf("%02lld:%02lld", (long long)(t / 60), (long long)(t % 60));
}

std::string format_duration_words(double s) {
  if (s <= 0 || !std::isfinite(s)) return "unknown";
  if (s < 120) return strf("%.1f s", s);
  if (s < 7200) return strf("%.1f min", s / 60);
  if (s < 3 * 86400) return strf("%.1f h", s / 3600);
  return strf("%.1f days", s / 86400);
}

std::string plural(int64_t n, const std::string& noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

std::string format_eta(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "unknown";
  const auto t = static_cast<long long>(seconds + 0.5);
  const long long m = (t + 30) / 60, h = (m + 30) / 60;  // whole minutes, whole hours
  if (t < 60) return strf("%lld s", t);
  if (m < 60) return strf("%lld min", m);
  if (m < 24 * 60) return strf("%lld h %lld min", m / 60, m % 60);
  return strf("%lld day%s %lld h", h / 24, h / 24 == 1 ? "" : "s", h % 24);
}

}  // namespace gtrain
