// start_prediction.h: when a job of N GPUs and a time limit would start if submitted now, from the
// partition's history (the waits of similar jobs submitted at the same hour of the week) and its
// queue now; and how good such predictions were on held-out jobs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "launcher/cluster/week_profile.h"
#include "launcher/scheduler/cluster_reading.h"

namespace gtrain {

struct StartPrediction {
  bool known = false;            // enough similar jobs (or a free partition) to say
  bool starts_now = false;       // the partition has the GPUs free now and nobody waits
  double wait_s = 0;             // the expected wait (the similar jobs' median; 0 when it starts now)
  double low_s = 0, high_s = 0;  // the spread observed: 10th and 90th percentile of their waits
  int samples = 0;               // the similar jobs
  std::string basis;             // "31 jobs of 2-8 GPUs submitted Wed 03:00-07:00 in 4 weeks"
};

// Jobs like it: GPUs within half to twice `gpus`, a time limit within a quarter to four times
// `time_s` (when both known), submitted within an hour of now's hour of the week; widened (three
// hours, then any hour, then any time limit) until at least 5 are found. `profile` (may be null): an
// hour at which the GPUs were free in 80% of weeks means it starts at once (the similar jobs' waits
// still give the spread). `live` (may be null) is the partition now: enough GPUs free with nobody
// pending means it starts now.
StartPrediction predict_start(const std::vector<HistoryJob>& history, int64_t gpus, int64_t time_s, int64_t now,
                              const PartitionFacts* live, const WeekProfile* profile = nullptr);

// Predictions for the jobs submitted from `split` on, each from the history before it alone,
// against a model that knows no rhythm (the median wait of all jobs before `split`).
struct PredictionCheck {
  int jobs = 0;                 // held-out jobs predicted
  double model_error_s = 0;     // median absolute error of predict_start
  double baseline_error_s = 0;  // median absolute error of the overall median wait
};
PredictionCheck check_predictions(const std::vector<HistoryJob>& history, int64_t split);

}  // namespace gtrain
