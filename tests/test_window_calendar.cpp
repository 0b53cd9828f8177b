// test_window_calendar.cpp: a run's stages over quota windows (launcher/chain/window_calendar.h):
// each stage on the GPUs of the window it starts in, stopped at the window's close or its time
// limit; the calendar's text, and the request paragraph of a run not yet started.
#include <gtest/gtest.h>

#include <ctime>
#include <string>

#include "launcher/chain/window_calendar.h"
#include "runtime/core/format.h"

namespace gtrain {
namespace {

double at(int year, int month, int day, int hour, int minute) {
  std::tm t{};
  t.tm_year = year - 1900, t.tm_mon = month - 1, t.tm_mday = day, t.tm_hour = hour, t.tm_min = minute;
  t.tm_isdst = -1;
  return static_cast<double>(std::mktime(&t));
}

const std::vector<WindowConfig> kDayNight = {{"daily", "08:00-20:00", 2}, {"daily", "20:00-08:00", 8}};

std::vector<Window> parsed(const std::vector<WindowConfig>& ws) {
  std::vector<Window> out;
  for (const auto& w : ws) out.push_back(parse_window(w, "w"));
  return out;
}

// 1 s a step on 2 GPUs by day, 0.25 s on 8 at night, 24 h stages from Monday 14:28: day and night
// alternate (a 24 h --time does not skip the windows), done Tuesday 10:00.
TEST(WindowCalendar, DayAndNightStagesAlternateUntilDone) {
  CalendarInput in;
  in.windows = parsed(kDayNight);
  in.now = at(2026, 11, 30, 14, 28);
  in.limit_s = 24 * 3600;
  in.size_for = [](int64_t cap) { return cap == 8 ? CalendarSize{8, 0.25} : CalendarSize{2, 1.0}; };
  const int64_t day1 = 5 * 3600 + 32 * 60, night = 12 * 3600 * 4, day2 = 2 * 3600;
  in.steps = day1 + night + day2;
  const WindowCalendar c = plan_calendar(in);
  ASSERT_EQ(c.stages.size(), 3u);
  EXPECT_EQ(c.stages[0].gpus, 2);
  EXPECT_EQ(c.stages[0].end, at(2026, 11, 30, 20, 0));
  EXPECT_EQ(c.stages[0].step_to, day1);
  EXPECT_EQ(c.stages[0].ends_at, "the window's close");
  EXPECT_EQ(c.stages[1].gpus, 8);
  EXPECT_EQ(c.stages[1].cap, 8);
  EXPECT_EQ(c.stages[1].start, at(2026, 11, 30, 20, 0));
  EXPECT_EQ(c.stages[1].end, at(2026, 12, 1, 8, 0));
  EXPECT_EQ(c.stages[2].gpus, 2);
  EXPECT_EQ(c.stages[2].ends_at, "done");
  EXPECT_EQ(c.finish, at(2026, 12, 1, 10, 0));
  const std::string text = render_calendar(c, kDayNight, in.now);
  EXPECT_EQ(text.rfind("calendar: 2 GPUs daily 08:00-20:00 + 8 GPUs daily 20:00-08:00: done Tuesday 12-01 10:00 "
                       "(19 h 32 min from now, 3 stages, no queue wait counted)\n",
                       0),
            0u)
      << text;
  EXPECT_NE(text.find("  stage 2  Mon 11-30 20:00 - Tue 12-01 08:00  8 GPUs  steps 19920-192720 (the window's "
                      "close)\n"),
            std::string::npos)
      << text;
  // The JSON form carries the same stages.
  const auto j = calendar_json(c, kDayNight);
  EXPECT_EQ(j["stages"].size(), 3u);
  EXPECT_EQ(j["finish"].get<double>(), c.finish);
}

// A time limit shorter than the window splits it; each stage pays its overhead; a window whose cap no
// size can run in is skipped; without windows the stages run back to back.
TEST(WindowCalendar, LimitsOverheadAndWindowsNoSizeRuns) {
  CalendarInput in;
  in.now = at(2026, 11, 30, 0, 0);
  in.steps = 10000;
  in.limit_s = 3600;
  in.overhead_s = 600;
  in.size_for = [](int64_t) { return CalendarSize{4, 1.0}; };
  WindowCalendar c = plan_calendar(in);
  ASSERT_EQ(c.stages.size(), 4u);  // 3000 steps an hour: 3000, 3000, 3000, 1000
  EXPECT_EQ(c.stages[1].start, in.now + 3600);
  EXPECT_EQ(c.stages[3].step_from, 9000);
  EXPECT_EQ(c.finish, in.now + 3 * 3600 + 600 + 1000);
  // Nights only on 8 GPUs, which the job cannot use: days are skipped... and nights run it.
  in.windows = parsed(kDayNight);
  in.limit_s = 0;
  in.overhead_s = 0;
  in.size_for = [](int64_t cap) { return cap == 2 ? CalendarSize{} : CalendarSize{8, 1.0}; };
  in.steps = 12 * 3600 + 100;  // a night and 100 s
  in.now = at(2026, 11, 30, 9, 0);
  c = plan_calendar(in);
  ASSERT_EQ(c.stages.size(), 2u);
  EXPECT_EQ(c.stages[0].start, at(2026, 11, 30, 20, 0));
  EXPECT_EQ(c.stages[1].start, at(2026, 12, 1, 20, 0));
  EXPECT_EQ(c.finish, at(2026, 12, 1, 20, 0) + 100);
  EXPECT_EQ(c.skipped, 2);  // Monday's day and Tuesday's
  EXPECT_NE(render_calendar(c, kDayNight, in.now).find("(2 windows skipped"), std::string::npos);
  // No size runs anywhere: not done, said so.
  in.size_for = [](int64_t) { return CalendarSize{}; };
  c = plan_calendar(in);
  EXPECT_EQ(c.finish, 0);
  EXPECT_NE(render_calendar(c, kDayNight, in.now).find(": not done within 0 stages (no window's GPU count can run it)"),
            std::string::npos);
}

TEST(WindowCalendar, LongestStretchAndSummary) {
  const double monday = at(2026, 11, 30, 14, 0);
  EXPECT_EQ(longest_window_stretch(parsed(kDayNight), monday), 12 * 3600);
  EXPECT_EQ(longest_window_stretch(parsed({{"daily", "00:00-24:00", 4}}), monday), 0) << "never closes";
  EXPECT_EQ(longest_window_stretch(parsed({{"mon-fri", "00:00-24:00", 4}}), monday), 5 * 86400)
      << "next week's Monday 00:00 to Saturday 00:00";
  EXPECT_EQ(windows_summary({{"sat,sun", "00:00-24:00", 0}, {"mon-fri", "18:00-08:00", 1}}),
            "any GPUs sat,sun 00:00-24:00 + 1 GPU mon-fri 18:00-08:00");
}

// Remaining times and counts as a person reads them (status's ETA, the progress line, the calendar).
TEST(WindowCalendar, EtaAndCountsInWords) {
  EXPECT_EQ(format_eta(44.6), "45 s");
  EXPECT_EQ(format_eta(60), "1 min");
  EXPECT_EQ(format_eta(12 * 60 + 20), "12 min");
  EXPECT_EQ(format_eta(2 * 3600 + 14 * 60), "2 h 14 min");
  EXPECT_EQ(format_eta(3599.9), "1 h 0 min");
  EXPECT_EQ(format_eta(86400 + 4 * 3600), "1 day 4 h");
  EXPECT_EQ(format_eta(3 * 86400 + 4 * 3600 + 20 * 60), "3 days 4 h");
  EXPECT_EQ(format_eta(-1), "unknown");
  EXPECT_EQ(plural(1, "rank"), "1 rank");
  EXPECT_EQ(plural(0, "stage"), "0 stages");
  EXPECT_EQ(plural(3, "GPU"), "3 GPUs");
}

// The report's request paragraph for a run not yet started: the plan, no "so far".
TEST(WindowCalendar, RequestParagraphOfAPlannedRun) {
  PlannedRun run;
  run.model = "gpt";
  run.params = 124000000;
  run.steps = 1000;
  run.global_batch = 256;
  run.tokens_per_sample = 1024;
  run.precision = "bf16";
  RequestRow one, two;
  one.units = 1, one.nodes = 1, one.feasible = true, one.layout = "dp=1", one.step_s = 2.0;
  two.units = 2, two.nodes = 1, two.feasible = true, two.layout = "dp=2", two.step_s = 1.1;
  run.rows = {one, two};
  const std::string p = planned_request_paragraph(run);
  EXPECT_EQ(p.rfind("Project: training gpt (124 M parameters) for 1000 steps of 256 samples (262 M tokens), bf16, "
                    "with gtrain. Plan for the 1000 steps to go: 2 GPUs (dp=2), 1.1 s a step",
                    0),
            0u)
      << p;
  EXPECT_EQ(p.find("So far"), std::string::npos) << p;
  run.rows = {one};
  EXPECT_NE(planned_request_paragraph(run).find("Plan for the 1000 steps to go: 1 GPU (dp=1), 2 s a step"),
            std::string::npos)
      << planned_request_paragraph(run);
}

}  // namespace
}  // namespace gtrain
