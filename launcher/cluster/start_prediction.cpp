// start_prediction.cpp: start-time prediction from the waits of similar jobs.
#include "launcher/cluster/start_prediction.h"

#include <algorithm>
#include <cmath>

namespace gtrain {
namespace {

double quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double at = q * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(at));
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

int hour_distance(int a, int b) {
  const int d = std::abs(a - b) % kHoursPerWeek;
  return std::min(d, kHoursPerWeek - d);
}

// A job's wait, when it is known by `now`: started (start - submit), or still pending then.
bool wait_of(const HistoryJob& j, int64_t now, double* wait) {
  if (j.submit <= 0 || j.submit >= now) return false;
  if (j.start > 0 && j.start <= now) {
    *wait = static_cast<double>(j.start - j.submit);
    return true;
  }
  if (j.start <= 0 && j.state != "PENDING") return false;
  *wait = static_cast<double>(now - j.submit);  // still waiting: at least this long
  return true;
}

// predict_start with each job's hour of the week already known (`hours`, one per job).
StartPrediction predict_from(const std::vector<HistoryJob>& history, const std::vector<int>& hours, int64_t gpus,
                             int64_t time_s, int64_t now, const PartitionFacts* live, const WeekProfile* profile) {
  StartPrediction p;
  const int here = hour_of_week(now);
  const int64_t lo_g = std::max<int64_t>(1, (gpus + 1) / 2), hi_g = std::max<int64_t>(1, gpus * 2);
  struct Width {
    int hours;
    bool by_limit;
  };
  for (const Width w : {Width{1, true}, Width{3, true}, Width{kHoursPerWeek, true}, Width{kHoursPerWeek, false}}) {
    std::vector<double> waits;
    for (size_t i = 0; i < history.size(); ++i) {
      const HistoryJob& j = history[i];
      double wait = 0;
      if (j.gpus < lo_g || j.gpus > hi_g || !wait_of(j, now, &wait)) continue;
      if (w.by_limit && time_s > 0 && j.time_limit_s > 0 &&
          (j.time_limit_s * 4 < time_s || j.time_limit_s > time_s * 4))
        continue;
      if (hour_distance(hours[i], here) > w.hours) continue;
      waits.push_back(wait);
    }
    if (waits.size() < 5) continue;
    p.known = true;
    p.samples = static_cast<int>(waits.size());
    p.wait_s = quantile(waits, 0.5);
    p.low_s = quantile(waits, 0.1);
    p.high_s = quantile(waits, 0.9);
    p.basis = std::to_string(p.samples) + " jobs of " + std::to_string(lo_g) + "-" + std::to_string(hi_g) + " GPUs" +
              (w.by_limit && time_s > 0 ? " with a similar time limit" : "") +
              (w.hours < kHoursPerWeek
                   ? " submitted " + hour_of_week_name(here - w.hours) + "-" + hour_of_week_name(here + w.hours + 1)
                   : " submitted at any hour");
    break;
  }
  const int hour = hour_of_week(now);
  if (profile && profile->weeks > 0 && profile->share_free(hour, gpus) >= 0.8 - 1e-9) {
    const double share = profile->share_free(hour, gpus);
    p.known = true;
    p.wait_s = 0, p.low_s = 0;
    if (p.samples == 0) p.high_s = 0;
    p.basis = std::to_string(gpus) + " of " + std::to_string(profile->total_gpus) + " GPUs free at this hour in " +
              std::to_string(static_cast<int>(std::floor(share * 100 + 1e-9))) + "% of weeks" +
              (p.samples > 0 ? "; " + p.basis : "");
  }
  if (live && live->free_gpus >= gpus && live->pending_jobs == 0) {
    p.starts_now = true;
    p.known = true;
    p.wait_s = 0;
    if (p.basis.empty()) p.basis = "the partition has the GPUs free now";
  }
  return p;
}

std::vector<int> submit_hours(const std::vector<HistoryJob>& jobs) {
  std::vector<int> out;
  out.reserve(jobs.size());
  for (const auto& j : jobs) out.push_back(hour_of_week(j.submit));
  return out;
}

}  // namespace

StartPrediction predict_start(const std::vector<HistoryJob>& history, int64_t gpus, int64_t time_s, int64_t now,
                              const PartitionFacts* live, const WeekProfile* profile) {
  return predict_from(history, submit_hours(history), gpus, time_s, now, live, profile);
}

PredictionCheck check_predictions(const std::vector<HistoryJob>& history, int64_t split) {
  PredictionCheck c;
  std::vector<HistoryJob> before;
  std::vector<double> all;
  for (const auto& j : history) {
    double wait = 0;
    if (j.submit < split && wait_of(j, split, &wait)) {
      before.push_back(j);
      all.push_back(wait);
    }
  }
  if (all.empty()) return c;
  const double overall = quantile(all, 0.5);
  const std::vector<int> hours = submit_hours(before);
  std::vector<double> model_err, base_err;
  for (const auto& j : history) {
    if (j.submit < split || j.start <= 0) continue;
    const StartPrediction p = predict_from(before, hours, j.gpus, j.time_limit_s, j.submit, nullptr, nullptr);
    if (!p.known) continue;
    const double actual = static_cast<double>(j.start - j.submit);
    model_err.push_back(std::fabs(p.wait_s - actual));
    base_err.push_back(std::fabs(overall - actual));
  }
  c.jobs = static_cast<int>(model_err.size());
  if (c.jobs > 0) {
    c.model_error_s = quantile(model_err, 0.5);
    c.baseline_error_s = quantile(base_err, 0.5);
  }
  return c;
}

}  // namespace gtrain
