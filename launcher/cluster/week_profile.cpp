// week_profile.cpp: the hour-of-week model of a partition's free GPUs and queue waits.
#include "launcher/cluster/week_profile.h"

#include <algorithm>
#include <cmath>
#include <ctime>
#include <functional>
#include <map>
#include <sstream>

namespace gtrain {
namespace {

constexpr const char* kDays[] = {"Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"};
constexpr int64_t kSample = 600;  // seconds between samples of the GPUs in use

std::tm local_tm(int64_t unix_time) {
  const std::time_t t = static_cast<std::time_t>(unix_time);
  std::tm tm{};
  localtime_r(&t, &tm);
  return tm;
}

// The start of the local hour holding `t`.
int64_t hour_start(int64_t t) {
  const std::tm tm = local_tm(t);
  return t - tm.tm_min * 60 - tm.tm_sec;
}

std::string two(int v) {
  return (v < 10 ? "0" : "") + std::to_string(v);
}

}  // namespace

int hour_of_week(int64_t unix_time) {
  const std::tm tm = local_tm(unix_time);
  return (tm.tm_wday + 6) % 7 * 24 + tm.tm_hour;
}

std::string hour_of_week_name(int hour) {
  const int h = ((hour % kHoursPerWeek) + kHoursPerWeek) % kHoursPerWeek;
  return std::string(kDays[h / 24]) + " " + two(h % 24) + ":00";
}

int64_t WeekProfile::free_in_share(int hour, double share) const {
  auto v = free[static_cast<size_t>(hour)];
  if (v.empty()) return 0;
  std::sort(v.rbegin(), v.rend());
  const auto m = static_cast<size_t>(std::max(1.0, std::ceil(share * static_cast<double>(v.size()) - 1e-9)));
  return v[std::min(m, v.size()) - 1];
}

double WeekProfile::share_free(int hour, int64_t gpus) const {
  const auto& v = free[static_cast<size_t>(hour)];
  if (v.empty()) return 0;
  const auto n = std::count_if(v.begin(), v.end(), [&](int64_t f) { return f >= gpus; });
  return static_cast<double>(n) / static_cast<double>(v.size());
}

double WeekProfile::median_wait(int hour, int64_t min_gpus, int64_t max_gpus) const {
  std::vector<double> w;
  for (const auto& [g, s] : waits[static_cast<size_t>(hour)]) {
    if (g >= min_gpus && g <= max_gpus) w.push_back(s);
  }
  if (w.empty()) return -1;
  std::sort(w.begin(), w.end());
  const size_t n = w.size();
  return n % 2 ? w[n / 2] : (w[n / 2 - 1] + w[n / 2]) / 2;
}

namespace {

// Where the accounting's history begins: `from`, or when its first job is over a day later, the first
// whole hour from that job on (a job purged with the hour before may have run in it).
int64_t history_begins(const std::vector<HistoryJob>& jobs, int64_t from, int64_t to) {
  if (jobs.empty()) return from;  // no job at all in the period: an idle partition, not a purged one
  int64_t first = to;
  for (const auto& j : jobs) first = std::min(first, j.start > 0 ? std::min(j.start, j.submit) : j.submit);
  if (first <= from + 86400) return from;
  return hour_start(first) == first ? first : hour_start(first + 3600);
}

}  // namespace

WeekProfile build_week_profile(const std::vector<HistoryJob>& jobs, int64_t total_gpus, int64_t from, int64_t to,
                               const std::vector<FreeSample>& samples, bool history) {
  WeekProfile p;
  p.total_gpus = total_gpus;
  p.covered_from = history ? history_begins(jobs, from, to) : to;
  const int64_t known_from = from;  // samples fill [from, covered_from)
  from = p.covered_from;
  // GPUs in use as events: +g at the start, -g at the end (a job still running holds them to `to`).
  std::vector<std::pair<int64_t, int64_t>> events;
  for (const auto& j : jobs) {
    if (j.start <= 0 || j.gpus <= 0 || j.start >= to) continue;
    const int64_t end = j.end > 0 ? j.end : to;
    if (end <= from) continue;
    events.emplace_back(j.start, j.gpus);
    events.emplace_back(end, -j.gpus);
  }
  std::sort(events.begin(), events.end());
  // Sample every 10 minutes; an hour of the history counts once all its samples fall in [from, to).
  std::map<int64_t, std::pair<int64_t, int>> hours;  // hour start -> {fewest free, samples}
  int64_t busy = 0;
  size_t e = 0;
  for (int64_t t = (from + kSample - 1) / kSample * kSample; t < to; t += kSample) {
    while (e < events.size() && events[e].first <= t) busy += events[e++].second;
    auto& h = hours.try_emplace(hour_start(t), std::pair<int64_t, int>{total_gpus, 0}).first->second;
    h.first = std::min(h.first, std::max<int64_t>(0, total_gpus - busy));
    ++h.second;
  }
  for (const auto& [start, h] : hours) {
    if (start >= from && start + 3600 <= to && h.second == 3600 / kSample)
      p.free[static_cast<size_t>(hour_of_week(start))].push_back(h.first);
  }
  // Hours the accounting no longer (or never) showed: the fewest free among gtrain's own samples.
  std::map<int64_t, int64_t> sampled;  // hour start -> fewest free
  for (const auto& s : samples) {
    if (s.time < known_from || s.time >= p.covered_from || s.time >= to) continue;
    auto it = sampled.try_emplace(hour_start(s.time), s.free_gpus).first;
    it->second = std::min(it->second, s.free_gpus);
  }
  for (const auto& [start, f] : sampled)
    p.free[static_cast<size_t>(hour_of_week(start))].push_back(std::clamp<int64_t>(f, 0, total_gpus));
  p.sampled_hours = static_cast<int>(sampled.size());
  p.weeks = static_cast<int>(p.free[0].size());
  for (const auto& v : p.free) p.weeks = std::min(p.weeks, static_cast<int>(v.size()));
  for (const auto& j : jobs) {
    if (j.submit < from || j.submit >= to) continue;
    if (j.start <= 0 && j.state != "PENDING") continue;  // cancelled while waiting: its wait is unknown
    const double wait = static_cast<double>((j.start > 0 ? std::min(j.start, to) : to) - j.submit);
    p.waits[static_cast<size_t>(hour_of_week(j.submit))].emplace_back(j.gpus, std::max(0.0, wait));
  }
  return p;
}

bool profile_known(const WeekProfile& p) {
  return std::any_of(p.free.begin(), p.free.end(), [](const auto& v) { return !v.empty(); });
}

std::string QuietWindow::text() const {
  std::string when;
  if (hours >= kHoursPerWeek) {
    when = "all week";
  } else {
    const int end = first_hour + hours;
    const bool same_day = end / 24 == first_hour / 24 && end % 24 != 0;
    when = hour_of_week_name(first_hour) + "-" + (same_day ? two(end % 24) + ":00" : hour_of_week_name(end));
  }
  return when + ": " + std::to_string(free_gpus) + " of " + std::to_string(total_gpus) + " GPUs free in " +
         std::to_string(static_cast<int>(std::floor(share * 100 + 1e-9))) + "% of weeks";
}

std::vector<QuietWindow> quiet_windows(const WeekProfile& p, int64_t want_gpus, double share) {
  std::array<bool, kHoursPerWeek> good{};
  int count = 0;
  for (int h = 0; h < kHoursPerWeek; ++h)
    count += (good[static_cast<size_t>(h)] = p.share_free(h, want_gpus) >= share - 1e-9);
  std::vector<QuietWindow> out;
  auto finish = [&](QuietWindow w) {
    w.free_gpus = INT64_MAX;
    for (int i = 0; i < w.hours; ++i)
      w.free_gpus = std::min(w.free_gpus, p.free_in_share((w.first_hour + i) % kHoursPerWeek, share));
    w.share = 1;
    for (int i = 0; i < w.hours; ++i)
      w.share = std::min(w.share, p.share_free((w.first_hour + i) % kHoursPerWeek, w.free_gpus));
    w.total_gpus = p.total_gpus;
    out.push_back(w);
  };
  if (count == kHoursPerWeek) {
    finish({0, kHoursPerWeek});
    return out;
  }
  for (int h = 0; h < kHoursPerWeek; ++h) {
    if (!good[static_cast<size_t>(h)] || good[static_cast<size_t>((h + kHoursPerWeek - 1) % kHoursPerWeek)]) continue;
    int n = 0;
    while (good[static_cast<size_t>((h + n) % kHoursPerWeek)]) ++n;
    finish({h, n});
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const QuietWindow& a, const QuietWindow& b) { return a.hours > b.hours; });
  return out;
}

int64_t next_in_window(const QuietWindow& w, int64_t now) {
  const int h = hour_of_week(now);
  if ((h - w.first_hour + kHoursPerWeek) % kHoursPerWeek < w.hours) return now;
  const int ahead = (w.first_hour - h + kHoursPerWeek) % kHoursPerWeek;
  // Step hour by hour in local time (summer time may make a day 23 or 25 hours).
  int64_t t = hour_start(now);
  for (int i = 0; i < ahead; ++i) t = hour_start(t + 3600 + 60);
  while (hour_of_week(t) != w.first_hour) t = hour_start(t + 3600 + 60);
  return t;
}

namespace {

std::string grid(const std::function<char(int)>& cell, const std::string& legend) {
  std::ostringstream o;
  o << "     0         1         2\n     012345678901234567890123\n";
  for (int d = 0; d < 7; ++d) {
    o << kDays[d] << "  ";
    for (int h = 0; h < 24; ++h) o << cell(d * 24 + h);
    o << "\n";
  }
  o << legend << "\n";
  return o.str();
}

}  // namespace

std::string free_heat_map(const WeekProfile& p) {
  static const std::string kShades = " .:-=+*#%@";
  return grid(
      [&](int h) {
        if (p.free[static_cast<size_t>(h)].empty() || p.total_gpus <= 0) return '?';
        const double f = static_cast<double>(p.free_in_share(h, 0.8)) / static_cast<double>(p.total_gpus);
        return kShades[static_cast<size_t>(std::min(9.0, std::floor(f * 9 + 1e-9)))];
      },
      "     GPUs free in 80% of weeks: ' ' none ... '@' all of " + std::to_string(p.total_gpus) + "; '?' no history");
}

std::string wait_heat_map(const WeekProfile& p, int64_t min_gpus, int64_t max_gpus) {
  return grid(
      [&](int h) {
        const double w = p.median_wait(h, min_gpus, max_gpus);
        if (w < 0) return '.';
        return w <= 60 ? '0' : w <= 600 ? '1' : w <= 3600 ? '2' : w <= 4 * 3600 ? '3' : '4';
      },
      "     median wait: 0 up to a minute, 1 up to 10 min, 2 up to 1 h, 3 up to 4 h, 4 longer; '.' no such job");
}

}  // namespace gtrain
