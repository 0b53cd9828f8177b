// window_calendar.cpp: a run's stages over its quota windows, and their calendar (see window_calendar.h).
#include "launcher/chain/window_calendar.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "launcher/base/text_util.h"
#include "runtime/core/format.h"

namespace gtrain {

WindowCalendar plan_calendar(const CalendarInput& in) {
  WindowCalendar out;
  const bool windowed = !in.windows.empty();
  double t = in.now;
  int64_t done = 0;
  // Each pass is one stage, or one window no size can run in; a year of them at most.
  for (int pass = 0; done < in.steps && static_cast<int>(out.stages.size()) < in.max_stages && pass < 5000 &&
                     t < in.now + 366 * 86400.0;
       ++pass) {
    if (windowed && window_end(in.windows, t) == 0) {
      t = next_window_start(in.windows, t);
      if (t == 0) break;
    }
    const int64_t cap = windowed ? window_cap(in.windows, t) : 0;
    const CalendarSize size = in.size_for ? in.size_for(cap) : CalendarSize{};
    double end = in.limit_s > 0 ? t + in.limit_s : std::numeric_limits<double>::infinity();
    std::string ends_at = "the time limit";
    if (const double close = windowed ? window_stretch_end(in.windows, t) : 0; close > t && close < end) {
      end = close;
      ends_at = "the window's close";
    }
    if (size.step_s <= 0 || size.gpus <= 0) {
      if (!std::isfinite(end)) break;  // no size runs, and nothing ever changes
      ++out.skipped;
      t = end;
      continue;
    }
    const int64_t left = in.steps - done;
    const double room = end - t - in.overhead_s;  // infinite without a limit or a close
    int64_t n = room > 0 ? static_cast<int64_t>(std::min<double>(static_cast<double>(left), room / size.step_s)) : 0;
    if (n >= left) {
      n = left;
      end = t + in.overhead_s + static_cast<double>(n) * size.step_s;
      ends_at = "done";
    }
    if (n <= 0) {  // too short for a step: the next stretch
      ++out.skipped;
      t = end;
      continue;
    }
    CalendarStage s;
    s.index = static_cast<int>(out.stages.size()) + 1;
    s.start = t;
    s.end = end;
    s.gpus = size.gpus;
    s.cap = cap;
    s.step_from = done;
    s.step_to = done + n;
    s.ends_at = ends_at;
    out.stages.push_back(s);
    done += n;
    t = end;
  }
  if (done >= in.steps && in.steps > 0 && !out.stages.empty()) out.finish = out.stages.back().end;
  if (in.steps <= 0) out.finish = in.now;
  return out;
}

double longest_window_stretch(const std::vector<Window>& windows, double now) {
  double longest = 0;
  double t = now;
  for (int guard = 0; guard < 64 && t < now + 7 * 86400.0; ++guard) {
    if (window_end(windows, t) == 0) {
      t = next_window_start(windows, t);
      if (t == 0) break;
    }
    const double close = window_stretch_end(windows, t);
    if (close <= t) return 0;  // a stretch with no end within a week
    longest = std::max(longest, close - t);
    t = close;
  }
  return longest;
}

std::string windows_summary(const std::vector<WindowConfig>& windows) {
  std::vector<std::string> parts;
  for (const auto& w : windows) {
    parts.push_back((w.max_gpus > 0 ? plural(w.max_gpus, "GPU") : std::string("any GPUs")) + " " + w.days + " " +
                    w.hours);
  }
  return join(parts, " + ");
}

namespace {

std::string when(double t) {
  return text::local_time(t, "%a %m-%d %H:%M");
}

}  // namespace

std::string render_calendar(const WindowCalendar& c, const std::vector<WindowConfig>& windows, double now) {
  std::ostringstream o;
  o << "calendar: " << windows_summary(windows) << ": ";
  if (c.finish > 0) {
    o << "done " << text::local_time(c.finish, "%A %m-%d %H:%M") << " (" << format_eta(c.finish - now) << " from now, "
      << plural(static_cast<int64_t>(c.stages.size()), "stage") << ", no queue wait counted)\n";
  } else {
    o << "not done within " << plural(static_cast<int64_t>(c.stages.size()), "stage")
      << (c.stages.empty() ? " (no window's GPU count can run it)" : "") << "\n";
  }
  const size_t shown = std::min<size_t>(c.stages.size(), 12);
  for (size_t i = 0; i < shown; ++i) {
    const CalendarStage& s = c.stages[i];
    o << "  stage " << s.index << "  " << when(s.start) << " - " << when(s.end) << "  " << plural(s.gpus, "GPU")
      << "  steps " << s.step_from << "-" << s.step_to << " (" << s.ends_at << ")\n";
  }
  if (shown < c.stages.size())
    o << "  ... " << plural(static_cast<int64_t>(c.stages.size() - shown), "more stage") << "\n";
  if (c.skipped > 0)
    o << "  (" << plural(c.skipped, "window") << " skipped: no GPU count it allows can run the job, or too short)\n";
  return o.str();
}

nlohmann::json calendar_json(const WindowCalendar& c, const std::vector<WindowConfig>& windows) {
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& s : c.stages) {
    stages.push_back({{"index", s.index},
                      {"start", s.start},
                      {"end", s.end},
                      {"gpus", s.gpus},
                      {"cap", s.cap},
                      {"step_from", s.step_from},
                      {"step_to", s.step_to},
                      {"ends_at", s.ends_at}});
  }
  return {{"windows", windows_summary(windows)},
          {"finish", c.finish > 0 ? nlohmann::json(c.finish) : nlohmann::json()},
          {"skipped", c.skipped},
          {"stages", stages}};
}

std::string planned_request_paragraph(const PlannedRun& run) {
  Report r;
  r.model = run.model;
  r.params = run.params;
  r.h.total_steps = run.steps;
  r.h.global_batch = run.global_batch;
  r.h.tokens_per_sample = run.tokens_per_sample;
  r.h.precision = run.precision;
  r.h.gpus = run.gpus;
  r.request.rows = run.rows;
  r.request.steps = run.steps;
  finish_request_rows(r.request);
  return request_summary(r);
}

}  // namespace gtrain
