// window_calendar.h: when a run finishes over its quota windows (torch-free): stage by stage, each
// in the window it starts in, on the GPUs that window allows, stopped at the close of its window
// stretch or at its time limit, whichever comes first; the calendar `gtrain plan` and `gtrain submit
// --dry-run` print ("2 GPUs daily 08:00-20:00 + 8 GPUs daily 20:00-08:00: done Thursday 12-03 14:00"),
// and the resource-request paragraph of `gtrain report` for a run not yet started.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "launcher/report/report.h"
#include "runtime/core/config/schedule_config.h"
#include "runtime/core/schedule.h"

namespace gtrain {

// What a stage starting in a window with GPU cap `cap` (0 = no cap) runs on: its GPUs and seconds per
// step (step_s 0: no size can run there; the window is skipped).
struct CalendarSize {
  int gpus = 0;
  double step_s = 0;
};

struct CalendarInput {
  std::vector<Window> windows;                        // none: one stretch from `now`
  double now = 0;                                     // unix time the first stage can start
  int64_t steps = 0;                                  // steps to go
  double limit_s = 0;                                 // each stage's time limit (0 = none)
  double overhead_s = 0;                              // each stage's time outside steps (start-up, load, save)
  std::function<CalendarSize(int64_t cap)> size_for;  // the size a window's cap gets
  int max_stages = 1000;                              // the calendar gives up after this many
};

struct CalendarStage {
  int index = 1;
  double start = 0, end = 0;  // unix times: its start, and its end (its close, its limit, or done)
  int gpus = 0;
  int64_t cap = 0;  // the window's max_gpus (0 = none)
  int64_t step_from = 0, step_to = 0;
  std::string ends_at;  // "the window's close", "the time limit" or "done"
};

struct WindowCalendar {
  std::vector<CalendarStage> stages;
  double finish = 0;    // unix time the last step is done (0: not within max_stages)
  int64_t skipped = 0;  // windows no size could run in
};

// The stages, in time order, with no queue wait counted.
WindowCalendar plan_calendar(const CalendarInput& in);

// The longest time a stage can run before the close of its window stretch, over the week from `now`
// (0: no windows, or a stretch that does not end within a week).
double longest_window_stretch(const std::vector<Window>& windows, double now);

// "2 GPUs daily 08:00-20:00 + 8 GPUs daily 20:00-08:00" (no cap: "any GPUs").
std::string windows_summary(const std::vector<WindowConfig>& windows);

// The calendar's headline and its stages, one line each, two spaces in:
//   calendar: 2 GPUs daily 08:00-20:00 + 8 GPUs daily 20:00-08:00: done Thursday 12-03 14:00 (...)
//     stage 1  Mon 11-30 14:28 - Mon 11-30 20:00  2 GPUs  steps 0-1200 (the window's close)
std::string render_calendar(const WindowCalendar& c, const std::vector<WindowConfig>& windows, double now);
nlohmann::json calendar_json(const WindowCalendar& c, const std::vector<WindowConfig>& windows);

// What a run not yet started tells `request_summary` (report.h): the project and the request rows.
struct PlannedRun {
  std::string model;
  int64_t params = 0, steps = 0, global_batch = 0, tokens_per_sample = 0;
  std::string precision;
  bool gpus = true;              // rows count GPUs (else CPU ranks)
  std::vector<RequestRow> rows;  // units, nodes, feasible, layout, step_s (finish and speed-up follow)
};
// The report's resource-request paragraph for it (the report's own builder, request_summary).
std::string planned_request_paragraph(const PlannedRun& run);

}  // namespace gtrain
