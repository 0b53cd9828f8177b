// schedule_config.h: the [schedule] section: what ends a stage (signals, time limit, quota
// windows) and how early to stop so the final save fits.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/config/schema.h"

namespace gtrain {

// One quota window of a site's policy, e.g. nights and weekends with up to 4 GPUs.
struct WindowConfig {
  std::string days = "mon-sun";       // "mon-fri", "sat,sun", "mon,wed-fri"
  std::string hours = "00:00-24:00";  // "18:00-08:00" wraps past midnight
  int64_t max_gpus = 0;               // GPUs the site allows in this window (0 = no limit)

  template <class V>
  void visit(V& v) {
    v("days", days, "Days of the week: ranges and lists of mon..sun.");
    v("hours", hours, "Local time span HH:MM-HH:MM; an end before the start wraps past midnight.");
    v("max_gpus", max_gpus, "GPUs allowed in this window (0 = no limit).", cfg::at_least(0));
  }
};

struct ScheduleConfig {
  std::vector<std::string> stop_signals = {"USR1", "TERM", "INT"};  // end the stage: save, exit 3
  double time_limit_s = 0;           // stage wall-time limit from start (0 = none; --time-limit)
  double save_safety = 2.0;          // stop when remaining time < step time + save time x this
  double min_lead_s = 5.0;           // and keep at least this much in hand
  std::vector<WindowConfig> window;  // quota windows ([[schedule.window]])
  int64_t max_restarts = 2;          // restarts of the ranks inside a stage after a failure or hang
  double startup_timeout_s = 600;    // a rank with no progress this long before its first step is stuck
  int64_t stop_at_step = 0;          // end the stage once this step is done (0 = no): evaluate, save, exit 3

  template <class V>
  void visit(V& v) {
    v("stop_signals", stop_signals,
      "Signals that end a stage: finish the step, save, exit with code 3 "
      "(resumable). Any of USR1, USR2, TERM, INT, HUP; HUP left out is ignored (a closed terminal or ssh "
      "session does not end training).");
    v("time_limit_s", time_limit_s,
      "Wall-time limit of a stage in seconds from its start (0 = none; "
      "--time-limit overrides).",
      cfg::at_least(0.0));
    v("save_safety", save_safety,
      "Stop early enough for the final save: remaining time must exceed the next "
      "step's time plus the measured save time times this factor.",
      cfg::at_least(1.0));
    v("min_lead_s", min_lead_s, "Seconds always kept in hand before a deadline.", cfg::at_least(0.0));
    v("window", window,
      "Quota windows: [[schedule.window]] tables with days, hours and max_gpus; a stage that "
      "runs inside one stops before it closes (back-to-back windows with the same max_gpus count as one), and "
      "gtrain submit starts stages at their openings.");
    v("stop_at_step", stop_at_step,
      "End the stage once this step is done (0 = never): evaluate, save and exit 3 (resumable) as at "
      "a deadline; the learning-rate schedule still runs over the whole train length. `gtrain sweep` "
      "pauses its trials at their rungs this way.",
      cfg::at_least(0));
    v("max_restarts", max_restarts,
      "After a rank fails or hangs, gtrain run restarts the ranks from the last committed checkpoint "
      "in the same allocation, at most this many times per stage; each restart is recorded in "
      "restarts.jsonl (0 = a failure ends the stage, and one rank runs as gtrain's own process, "
      "unwatched).",
      cfg::at_least(0));
    v("startup_timeout_s", startup_timeout_s,
      "A rank that makes no progress for this long before its first step (model build, data, "
      "compilation; also the first save or evaluation, before one was measured) counts as hung.",
      cfg::greater_than(0.0));
  }
};

}  // namespace gtrain
