// stop_policy.cpp: the stop agreement's local decision and the reason the ranks report.
#include "runtime/core/stop_policy.h"

#include <algorithm>
#include <cstdio>
#include <fstream>

namespace gtrain {

StopPolicy::Decision StopPolicy::decide(int signal, double now_unix, double last_step_s, double longest_save_s,
                                        bool before_first_step) const {
  Decision d;
  if (signal) d.code = kSignal, d.signal = signal, d.reason = "signal " + std::to_string(signal);
  if (!d.code && main_rank_ && !s_.stop_file.empty()) {
    std::ifstream f(s_.stop_file);  // the launcher's stop request: "signal N"
    if (f && std::getline(f, d.reason) && !d.reason.empty()) {
      d.code = kSignal;
      if (std::sscanf(d.reason.c_str(), "signal %d", &d.signal) != 1) d.signal = 0;
    }
  }
  if (d.code || s_.deadline_unix <= 0 || !main_rank_) return d;
  const double save = std::max(longest_save_s, 1.0);
  const double lead = before_first_step ? 0.0 : last_step_s + save * s_.save_safety + s_.min_lead_s;
  const double left = s_.deadline_unix - now_unix;
  if (left > lead) return d;
  d.code = kDeadline, d.reason = "deadline (" + s_.deadline_source + ")";
  // Why now: a stop well before the limit is the lead it keeps for the next step and the save.
  char why[320];
  if (before_first_step) {
    std::snprintf(why, sizeof(why), "the deadline (%s) passed %.1f s before the first step", s_.deadline_source.c_str(),
                  -left);
  } else {
    std::snprintf(why, sizeof(why),
                  "%.1f s left before the deadline (%s) < next step %.2f s + %g x save %.1f s "
                  "(schedule.save_safety x the longest save, at least 1 s) + schedule.min_lead_s %g s",
                  left, s_.deadline_source.c_str(), last_step_s, s_.save_safety, save, s_.min_lead_s);
  }
  d.detail = why;
  return d;
}

std::string first_step_cannot_fit(double est_step_s, double save_s, double left_s, const std::string& source) {
  if (est_step_s <= 0 || left_s <= 0) return "";
  const double save = std::max(save_s, 1.0);
  if (est_step_s + save <= left_s) return "";
  char buf[320];
  std::snprintf(buf, sizeof(buf),
                "the first step is estimated at %.4g s and a save at %.3g s, but the stage has %.4g s before its "
                "deadline (%s): it would end without a checkpoint",
                est_step_s, save, left_s, source.c_str());
  return buf;
}

std::string StopPolicy::agreed_reason(const Decision& mine, int agreed, int agreed_signal) const {
  if (agreed == kGoOn) return "";
  if (agreed == mine.code) return mine.reason;
  if (agreed == kDeadline) return "deadline (" + s_.deadline_source + ")";
  return agreed_signal > 0 ? "signal " + std::to_string(agreed_signal) : "signal (on another rank)";
}

}  // namespace gtrain
