// quota_burn.h: a GPU-minute quota's burn-down: what is used and left, the rate the user's (or the
// account's) jobs burn it at, and the day it runs out at that rate.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "launcher/scheduler/cluster_reading.h"

namespace gtrain {

struct BurnDown {
  std::string quota;              // "account proj", "QOS burst", "stated 500 GPU-hours"
  int64_t limit_gpu_minutes = 0;  // the quota
  int64_t used_gpu_minutes = 0;   // used against it
  int64_t left_gpu_minutes = 0;
  double burn_gpu_minutes_per_day = 0;  // over the last `days` days
  int days = 0;                         // the days the rate was measured over
  int64_t runs_out_unix = 0;            // when it is used up at that rate (0 = it is not burning)
  std::string text() const;  // "account proj: 412 of 500 GPU-hours left; burning 21.3 a day: runs out Tue 12-22"
};

// The GPU-minutes `jobs` used in [from, to) (the part of each run inside it).
double gpu_minutes_used(const std::vector<HistoryJob>& jobs, int64_t from, int64_t to);

// Whether a job is charged to quota `q` (its account for an account or association, its QOS for a QOS).
bool charges(const HistoryJob& j, const QuotaFacts& q);

// When a quota period began: `since` ("YYYY-MM-DD", local time), or "" for the first day of `now`'s
// month. ConfigError naming `what` (the flag or key) when it is not a date.
int64_t quota_period_start(const std::string& since, const std::string& what, int64_t now);

// A quota the user states (kept outside the scheduler): `hours` GPU-hours, its use the `user`'s jobs'
// GPU-minutes in `history` from `since` to `now` (`unknown_used` when the history was not read).
QuotaFacts stated_quota(const std::string& kind, const std::string& user, double hours,
                        const std::vector<HistoryJob>& history, bool history_read, int64_t since, int64_t now,
                        int64_t unknown_used);

// The burn-down of `q` (which has a GPU-minute limit and a known use) at `now`, the rate from the
// history's jobs charged to it over the last `days` days.
BurnDown burn_down(const QuotaFacts& q, const std::vector<HistoryJob>& history, int64_t now, int days = 7);

}  // namespace gtrain
