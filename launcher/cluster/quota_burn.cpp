// quota_burn.cpp: GPU-minute quota burn-down from the scheduler's use and the history's rate.
#include "launcher/cluster/quota_burn.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "launcher/base/text_util.h"
#include "runtime/core/errors.h"

namespace gtrain {

double gpu_minutes_used(const std::vector<HistoryJob>& jobs, int64_t from, int64_t to) {
  double m = 0;
  for (const auto& j : jobs) {
    if (j.start <= 0 || j.gpus <= 0) continue;
    const int64_t a = std::max(j.start, from), b = std::min(j.end > 0 ? j.end : to, to);
    if (b > a) m += static_cast<double>(b - a) * static_cast<double>(j.gpus) / 60.0;
  }
  return m;
}

bool charges(const HistoryJob& j, const QuotaFacts& q) {
  if (q.kind == "QOS") return j.qos == q.name;
  if (q.kind == "stated") return j.user == q.name;
  const std::string account = q.name.substr(0, q.name.find_first_of("/ "));
  if (q.kind == "association") {
    const size_t slash = q.name.find('/');
    const std::string user = q.name.substr(slash + 1, q.name.find(' ', slash) - slash - 1);
    return j.account == account && j.user == user;
  }
  return j.account == account;
}

int64_t quota_period_start(const std::string& since, const std::string& what, int64_t now) {
  if (!since.empty()) {
    const auto t = text::parse_local_time(since, "%Y-%m-%d");
    if (!t) throw ConfigError(what + ": expected a date YYYY-MM-DD, got '" + since + "'");
    return static_cast<int64_t>(*t);
  }
  const std::time_t t = static_cast<std::time_t>(now);
  std::tm tm{};
  localtime_r(&t, &tm);
  tm.tm_mday = 1, tm.tm_hour = 0, tm.tm_min = 0, tm.tm_sec = 0, tm.tm_isdst = -1;
  return static_cast<int64_t>(std::mktime(&tm));
}

QuotaFacts stated_quota(const std::string& kind, const std::string& user, double hours,
                        const std::vector<HistoryJob>& history, bool history_read, int64_t since, int64_t now,
                        int64_t unknown_used) {
  QuotaFacts q;
  q.kind = kind;
  q.name = user;
  q.limit_gpu_minutes = static_cast<int64_t>(std::llround(hours * 60));
  std::vector<HistoryJob> mine;
  for (const auto& j : history) {
    if (j.user == user) mine.push_back(j);
  }
  q.used_gpu_minutes =
      history_read ? static_cast<int64_t>(std::llround(gpu_minutes_used(mine, since, now))) : unknown_used;
  return q;
}

BurnDown burn_down(const QuotaFacts& q, const std::vector<HistoryJob>& history, int64_t now, int days) {
  BurnDown b;
  b.quota = q.kind + " " + q.name;
  b.limit_gpu_minutes = q.limit_gpu_minutes;
  b.used_gpu_minutes = q.used_gpu_minutes;
  b.left_gpu_minutes = std::max<int64_t>(0, q.limit_gpu_minutes - q.used_gpu_minutes);
  b.days = days;
  std::vector<HistoryJob> mine;
  for (const auto& j : history) {
    if (charges(j, q)) mine.push_back(j);
  }
  b.burn_gpu_minutes_per_day = gpu_minutes_used(mine, now - int64_t{days} * 86400, now) / days;
  if (b.burn_gpu_minutes_per_day >= 0.5)  // under half a GPU-minute a day: not burning
    b.runs_out_unix = now + static_cast<int64_t>(std::llround(static_cast<double>(b.left_gpu_minutes) /
                                                              b.burn_gpu_minutes_per_day * 86400));
  return b;
}

std::string BurnDown::text() const {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "%s: %.1f of %.1f GPU-hours left (%.1f used); burning %.2f a day over the last %d days", quota.c_str(),
                static_cast<double>(left_gpu_minutes) / 60, static_cast<double>(limit_gpu_minutes) / 60,
                static_cast<double>(used_gpu_minutes) / 60, burn_gpu_minutes_per_day / 60, days);
  return std::string(buf) +
         (runs_out_unix > 0 ? ": runs out " + text::local_time(static_cast<double>(runs_out_unix), "%a %Y-%m-%d %H:%M")
                            : ": not burning");
}

}  // namespace gtrain
