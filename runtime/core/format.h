// format.h: the one place for text assembly and for how gtrain writes sizes and durations:
// str() and join() instead of hand-assembled strings, byte sizes, and the duration styles (Slurm's
// D-HH:MM:SS, PBS's HH:MM:SS, a progress clock, words).
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <utility>

namespace gtrain {

// Concatenates its arguments as an ostream writes them: str("step ", 12, " of ", n).
template <class... Args>
std::string str(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

// The items of `range`, each written as an ostream writes it, between `sep`s: join({1, 2}, ", ").
template <class Range>
std::string join(const Range& range, const std::string& sep = ", ") {
  std::ostringstream os;
  bool first = true;
  for (const auto& item : range) {
    if (!first) os << sep;
    os << item;
    first = false;
  }
  return os.str();
}

// A count and its noun, singular for one: plural(1, "rank") = "1 rank", plural(3, "rank") = "3 ranks".
std::string plural(int64_t n, const std::string& noun);

// Whether `s` ends with `tail`.
inline bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// printf into a std::string (the formats gtrain prints numbers with).
std::string strf(const char* format, ...) __attribute__((format(printf, 1, 2)));

constexpr double kKiB = 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Bytes in a unit that shows them: "512.0 KiB", "37.5 MiB", "45.56 GiB"; "unlimited" for infinity.
std::string format_bytes(double bytes);
// Bytes with one decimal in GiB, or MiB below 1 GiB: "12.3 GiB", "512.0 MiB"; "unlimited" for infinity.
std::string format_size(double bytes);
// Bytes as GiB with `decimals` digits and no unit: "45.56"; "unlimited" for infinity.
std::string format_gib(double bytes, int decimals = 2);

// Seconds as Slurm writes a time limit: "D-HH:MM:SS", or "HH:MM:SS" under a day (negative: 0).
std::string format_duration(int64_t seconds);
// Seconds as PBS writes a walltime: "HH:MM:SS", hours unbounded ("100:00:00").
std::string format_walltime(double seconds);
// A progress clock: "MM:SS", or "H:MM:SS" from an hour; "--:--" when unknown (negative, not finite).
std::string format_clock(double seconds);
// A remaining time in whole units, two at most: "45 s", "12 min", "2 h 14 min", "3 days 4 h";
// "unknown" when negative or not finite.
std::string format_eta(double seconds);
// Seconds in words with one decimal: "45.0 s", "12.5 min", "3.0 h", "4.2 days"; "unknown" for <= 0.
std::string format_duration_words(double seconds);

}  // namespace gtrain
