// week_profile.h: WeekProfile, a partition's rhythm learned from its job history: for each hour of
// the week (local time), the GPUs free in each week of the history and the queue waits of the jobs
// submitted then; the quiet windows named in words; the hours x days heat maps `gtrain cluster` prints.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "launcher/scheduler/cluster_reading.h"

namespace gtrain {

constexpr int kHoursPerWeek = 168;

// Monday 00:00-00:59 = 0 ... Sunday 23:00-23:59 = 167, in local time.
int hour_of_week(int64_t unix_time);
// "Wed 05:00" for an hour of the week; hour 168 (a run's end) is "Mon 00:00".
std::string hour_of_week_name(int hour);

// GPUs free at one moment, as a sample gtrain took during one of its own stages (cluster_samples.h).
struct FreeSample {
  int64_t time = 0;
  int64_t free_gpus = 0;
};

struct WeekProfile {
  int64_t total_gpus = 0;    // the partition's GPUs
  int weeks = 0;             // whole weeks the history covers (the fewest instances of any hour)
  int64_t covered_from = 0;  // where the accounting's history begins (after a purge: later than asked)
  int sampled_hours = 0;     // hours known only from gtrain's own samples
  // Per hour of the week, one value per week of history: the fewest GPUs free during that hour
  // (sampled every 10 minutes).
  std::array<std::vector<int64_t>, kHoursPerWeek> free;
  // Per hour of the week, the queue waits (seconds) of jobs submitted then, with their GPU counts.
  std::array<std::vector<std::pair<int64_t, double>>, kHoursPerWeek> waits;

  // The most GPUs free during `hour` in at least `share` of the weeks (0 when no week covers it).
  int64_t free_in_share(int hour, double share) const;
  // The share of weeks with at least `gpus` free during `hour` (0 when none covers it).
  double share_free(int hour, int64_t gpus) const;
  // The median wait (s) of jobs of `min_gpus`..`max_gpus` submitted during `hour`; -1 without any.
  double median_wait(int hour, int64_t min_gpus, int64_t max_gpus) const;
};

// The profile of `jobs` (one partition's) over [from, to): jobs running at a sample hold their GPUs;
// a job still pending at `to` counts as waiting until then. The accounting's history is taken to
// begin at its first job when that is more than a day after `from` (a site that purges old jobs: those
// hours are unknown, not idle; with no job at all the partition was idle); hours it does not cover (or
// all, when `history` is false) take the fewest GPUs free among `samples` in that hour.
WeekProfile build_week_profile(const std::vector<HistoryJob>& jobs, int64_t total_gpus, int64_t from, int64_t to,
                               const std::vector<FreeSample>& samples = {}, bool history = true);

// True when some hour of the week has a value (from the history or from samples).
bool profile_known(const WeekProfile& p);

struct QuietWindow {
  int first_hour = 0;     // hour of the week it starts
  int hours = 0;          // how long (may wrap past Sunday midnight)
  int64_t free_gpus = 0;  // GPUs free throughout it in at least `share` of weeks
  double share = 0;       // the share of weeks in which that many were free, at its worst hour
  int64_t total_gpus = 0;
  // "Wed 05:00-09:00: 6 of 8 GPUs free in 80% of weeks"
  std::string text() const;
};

// Runs of hours in which `want_gpus` are free in at least `share` of weeks, longest first (then by
// start); each names the GPUs free throughout it.
std::vector<QuietWindow> quiet_windows(const WeekProfile& p, int64_t want_gpus, double share = 0.8);

// The next moment at or after `now` that falls in `w` (its start, or now when inside it).
int64_t next_in_window(const QuietWindow& w, int64_t now);

// Terminal heat maps (a row per day, a column per hour): the GPUs free in 80% of weeks as a share of
// the partition (" .:-=+*#%@", from none to all), and the median queue wait of jobs of
// `min_gpus`..`max_gpus` ("0" up to a minute, "1" up to 10 min, "2" up to an hour, "3" up to 4 h,
// "4" longer, "." no such job).
std::string free_heat_map(const WeekProfile& p);
std::string wait_heat_map(const WeekProfile& p, int64_t min_gpus, int64_t max_gpus);

}  // namespace gtrain
