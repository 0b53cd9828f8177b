// test_schedule.cpp: quota windows, deadlines and durations for stages.
#include <gtest/gtest.h>

#include <csignal>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <string>

#include <sys/wait.h>
#include <unistd.h>

#include "runtime/core/config/job_config.h"
#include "runtime/core/errors.h"
#include "runtime/core/schedule.h"
#include "tests/support/test_util.h"

namespace gtrain {
namespace {

// Unix time of a local date and time.
double at(int year, int month, int day, int hour, int minute) {
  struct tm t {};
  t.tm_year = year - 1900;
  t.tm_mon = month - 1;
  t.tm_mday = day;
  t.tm_hour = hour;
  t.tm_min = minute;
  t.tm_isdst = -1;
  return static_cast<double>(mktime(&t));
}

// Runs `body` with the local time zone set to `tz` (a POSIX rule: no tzdata needed), then restores it.
void in_time_zone(const char* tz, const std::function<void()>& body) {
  const char* old = std::getenv("TZ");
  const std::string saved = old ? old : "";
  setenv("TZ", tz, 1);
  tzset();
  body();
  if (old)
    setenv("TZ", saved.c_str(), 1);
  else
    unsetenv("TZ");
  tzset();
}

TEST(Schedule, ParsesDaysAndHours) {
  Window w = parse_window({"mon-fri", "18:00-08:00", 4}, "schedule.window[0]");
  EXPECT_EQ(w.days_mask, 0b0111110);  // Monday (bit 1) .. Friday (bit 5)
  EXPECT_EQ(w.start_min, 18 * 60);
  EXPECT_EQ(w.end_min, 8 * 60);
  EXPECT_EQ(w.max_gpus, 4);
  EXPECT_EQ(parse_window({"sat,sun", "00:00-24:00", 0}, "w").days_mask, 0b1000001);
  EXPECT_EQ(parse_window({"fri-mon", "00:00-24:00", 0}, "w").days_mask, 0b1100011);  // wraps the week
}

TEST(Schedule, BadWindowsNameTheField) {
  try {
    parse_window({"mon-fir", "08:00-18:00", 0}, "schedule.window[1]");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("schedule.window[1].days: unknown day 'fir' (expected days such as "
                                          "\"mon-fri\", \"sat,sun\"",
                                          0),
              0u)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("\"daily\", \"weekdays\" or \"weekends\""), std::string::npos) << e.what();
  }
  EXPECT_THROW(parse_window({"mon", "8-18", 0}, "w"), ConfigError);
  EXPECT_THROW(parse_window({"mon", "08:00-25:00", 0}, "w"), ConfigError);
  EXPECT_THROW(parse_window({"mon", "08:00-08:00", 0}, "w"), ConfigError);
}

// The grammar docs/clusters.md documents: day names in any case or in full, ranges across the week
// end, the words daily / weekdays / weekends, blanks around items; hours HH:MM-HH:MM wrapping past
// midnight. Anything else is refused with the accepted forms listed.
TEST(Schedule, WindowGrammarAsDocumented) {
  const auto mask = [](const std::string& days) { return parse_window({days, "08:00-20:00", 0}, "w").days_mask; };
  EXPECT_EQ(mask("Mon-Fri"), 0b0111110);
  EXPECT_EQ(mask("MON-FRI"), 0b0111110);
  EXPECT_EQ(mask("monday-friday"), 0b0111110);
  EXPECT_EQ(mask("weekdays"), 0b0111110);
  EXPECT_EQ(mask("daily"), 0x7f);
  EXPECT_EQ(mask("Daily"), 0x7f);
  EXPECT_EQ(mask("weekends"), 0b1000001);
  EXPECT_EQ(mask("Sat, Sun"), 0b1000001);
  EXPECT_EQ(mask("sat-sun"), 0b1000001);
  EXPECT_EQ(mask("sun-sat"), 0x7f);
  EXPECT_EQ(mask("mon,wed-fri"), 0b0111010);
  EXPECT_EQ(mask("sat-mon"), 0b1000011) << "a range across the week end";
  const Window w = parse_window({"daily", " 20:00 - 08:00 ", 8}, "w");
  EXPECT_EQ(w.start_min, 20 * 60);
  EXPECT_EQ(w.end_min, 8 * 60);
  EXPECT_EQ(parse_window({"daily", "8:30-17:45", 0}, "w").start_min, 8 * 60 + 30);
  EXPECT_EQ(parse_window({"daily", "00:00-24:00", 0}, "w").end_min, 24 * 60);
  const auto error = [](const std::string& days, const std::string& hours) {
    try {
      parse_window({days, hours, 0}, "schedule.window[0]");
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  for (const std::string bad : {"everyday", "mo-fr", "", "mon-", "wochentags"})
    EXPECT_NE(error(bad, "08:00-20:00").find("(expected days such as \"mon-fri\""), std::string::npos)
        << bad << ": " << error(bad, "08:00-20:00");
  for (const std::string bad : {"8-18", "08:00", "08:00-25:00", "24:00-08:00", "08:00-08:00", "8am-6pm"})
    EXPECT_NE(error("daily", bad).find("expected HH:MM-HH:MM in local time such as \"08:00-20:00\""), std::string::npos)
        << bad << ": " << error("daily", bad);
  EXPECT_EQ(error("daily", "8-18").rfind("schedule.window[0].hours: ", 0), 0u);
}

// Windows are read in the local time zone (TZ) of the machine gtrain runs on: the same window is
// another instant in another zone.
TEST(Schedule, WindowsAreInTheLocalTimeZone) {
  const std::vector<Window> day = {parse_window({"daily", "08:00-20:00", 2}, "w")};
  double utc_end = 0, tokyo_end = 0;
  in_time_zone("UTC0", [&] { utc_end = window_end(day, at(2026, 12, 1, 12, 0)); });
  in_time_zone("JST-9", [&] { tokyo_end = window_end(day, at(2026, 12, 1, 12, 0)); });
  EXPECT_EQ(utc_end, 1796155200.0) << "2026-12-01 20:00 UTC";
  EXPECT_EQ(tokyo_end, 1796155200.0 - 9 * 3600) << "2026-12-01 20:00 in Tokyo";
}

TEST(Schedule, WindowEndAndNextStart) {
  // Nights on weekdays: Monday 2026-11-30 18:00 to Tuesday 08:00, and so on.
  std::vector<Window> nights = {parse_window({"mon-fri", "18:00-08:00", 4}, "w")};
  EXPECT_EQ(window_end(nights, at(2026, 11, 30, 20, 0)), at(2026, 12, 1, 8, 0));  // Monday evening
  EXPECT_EQ(window_end(nights, at(2026, 12, 1, 3, 0)), at(2026, 12, 1, 8, 0));    // Tuesday early morning
  EXPECT_EQ(window_end(nights, at(2026, 12, 1, 12, 0)), 0);                       // Tuesday noon: outside
  EXPECT_EQ(next_window_start(nights, at(2026, 12, 1, 12, 0)), at(2026, 12, 1, 18, 0));
  // Friday night's window starts Friday; Saturday has none: next start is Monday 18:00.
  EXPECT_EQ(next_window_start(nights, at(2026, 12, 5, 12, 0)), at(2026, 12, 7, 18, 0));
  EXPECT_EQ(window_end(nights, at(2026, 12, 5, 7, 0)), at(2026, 12, 5, 8, 0));  // Saturday 07:00, from Friday
}

// Window hours are wall-clock times, also on the days the clocks change (they used to be counted in
// seconds from midnight: an hour off on those days, both for submit's --begin and the run's deadline).
TEST(Schedule, WindowsFollowTheWallClockAcrossDaylightSavingChanges) {
  in_time_zone("CET-1CEST,M3.5.0,M10.5.0/3", [] {  // Europe/Berlin's rule
    const std::vector<Window> sundays = {parse_window({"sun", "08:00-20:00", 4}, "w")};
    // 2026-03-29: clocks go forward at 02:00. 2026-10-25: back at 03:00.
    EXPECT_EQ(next_window_start(sundays, at(2026, 3, 28, 22, 0)), at(2026, 3, 29, 8, 0));
    EXPECT_EQ(window_end(sundays, at(2026, 3, 29, 12, 0)), at(2026, 3, 29, 20, 0));
    EXPECT_EQ(at(2026, 3, 29, 20, 0) - at(2026, 3, 29, 12, 0), 8 * 3600.0);
    EXPECT_EQ(next_window_start(sundays, at(2026, 10, 24, 22, 0)), at(2026, 10, 25, 8, 0));
    EXPECT_EQ(window_end(sundays, at(2026, 10, 25, 7, 30)), 0) << "before the opening";
    EXPECT_EQ(window_end(sundays, at(2026, 10, 25, 19, 59)), at(2026, 10, 25, 20, 0));
    // A night window across the change ends at 08:00 on the clock.
    const std::vector<Window> nights = {parse_window({"sat", "22:00-08:00", 4}, "w")};
    EXPECT_EQ(window_end(nights, at(2026, 3, 29, 4, 0)), at(2026, 3, 29, 8, 0));
    EXPECT_EQ(window_end(nights, at(2026, 10, 24, 23, 0)), at(2026, 10, 25, 8, 0));
  });
}

// A stage's deadline is the end of the stretch of back-to-back windows with its cap, not the end of
// each day's occurrence: "00:00-24:00" every day has no end to stop for.
TEST(Schedule, BackToBackWindowsWithTheSameCapAreOneStretch) {
  const std::vector<Window> always = {parse_window({"mon-sun", "00:00-24:00", 4}, "w")};
  EXPECT_EQ(window_end(always, at(2026, 12, 1, 23, 0)), at(2026, 12, 2, 0, 0));
  EXPECT_EQ(window_stretch_end(always, at(2026, 12, 1, 23, 0)), 0);
  // Weekdays 00:00-24:00: the stretch runs to Saturday 00:00.
  const std::vector<Window> weekdays = {parse_window({"mon-fri", "00:00-24:00", 4}, "w")};
  EXPECT_EQ(window_stretch_end(weekdays, at(2026, 12, 1, 23, 0)), at(2026, 12, 5, 0, 0));
  // Day (8 GPUs) then night (32): the day's stretch ends at 20:00, where the cap changes.
  const std::vector<Window> day_night = {parse_window({"mon-fri", "08:00-20:00", 8}, "w"),
                                         parse_window({"mon-fri", "20:00-08:00", 32}, "w")};
  EXPECT_EQ(window_stretch_end(day_night, at(2026, 12, 1, 14, 0)), at(2026, 12, 1, 20, 0));
  EXPECT_EQ(window_stretch_end(day_night, at(2026, 12, 1, 21, 0)), at(2026, 12, 2, 8, 0));
  EXPECT_EQ(window_stretch_end(day_night, at(2026, 12, 5, 12, 0)), 0) << "Saturday: in no window";
}

TEST(Schedule, EarliestDeadlineWins) {
  auto d = earliest({{0, "none"}, {200, "--time-limit"}, {150, "slurm end time"}});
  EXPECT_EQ(d.unix_time, 150);
  EXPECT_EQ(d.source, "slurm end time");
  EXPECT_EQ(earliest({}).unix_time, 0);
}

TEST(Schedule, Durations) {
  EXPECT_EQ(parse_duration("90", "--time-limit"), 90);
  EXPECT_EQ(parse_duration("90s", "--time-limit"), 90);
  EXPECT_EQ(parse_duration("15m", "--time-limit"), 900);
  EXPECT_EQ(parse_duration("2h", "--time-limit"), 7200);
  EXPECT_EQ(parse_duration("1:30:00", "--time-limit"), 5400);
  EXPECT_EQ(parse_duration("45:00", "--time-limit"), 2700);
  try {
    parse_duration("ten minutes", "--time-limit");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "--time-limit: expected a duration like 90s, 15m, 2h, 1h30m, HH:MM:SS or D-HH[:MM[:SS]] above 0 and "
                 "at most "
                 "366 days, got 'ten minutes'");
  }
  EXPECT_EQ(parse_duration("1.5h", "x"), 5400);
  EXPECT_EQ(parse_duration("1-02:03:04", "x"), 86400 + 2 * 3600 + 3 * 60 + 4);
  EXPECT_EQ(parse_duration("366-00:00:00", "x"), 366 * 86400);
  // Slurm's day forms read as sbatch --time reads them: D-HH and D-HH:MM too (not D-MM:SS).
  EXPECT_EQ(parse_duration("1-02", "x"), 26 * 3600);
  EXPECT_EQ(parse_duration("1-00:30", "x"), 86400 + 1800);
  EXPECT_EQ(parse_duration("0-00:00:30", "x"), 30);
  // Out-of-range fields, zero, overflowing or non-decimal numbers: each refused, none read as something else.
  for (const char* bad : {"-5",  "99:99:99", "1:60:00",   "10:75",        "00:00:00", "0",    "0s",      "inf",
                          "nan", "1e30",     "0x10",      "367-00:00:00", "9999999h", "1-24", "1-02:60", "1-02:03:60",
                          "1-",  "-02:00",   "1-2:3:4:5", "0-00",         "1:2:3:4",  "",     "5 m",     "5min"}) {
    EXPECT_THROW(parse_duration(bad, "x"), ConfigError) << bad;
  }
}

// One duration reader for every flag and key: sums of units (1h30m), days, Slurm's forms, a plain
// number in the caller's unit (minutes for submit --time, as sbatch reads it), and the config's keys
// in seconds given as duration strings.
TEST(Schedule, DurationsInEveryForm) {
  EXPECT_EQ(parse_duration("1h30m", "x"), 5400);
  EXPECT_EQ(parse_duration("2h15s", "x"), 7215);
  EXPECT_EQ(parse_duration("45m30s", "x"), 2730);
  EXPECT_EQ(parse_duration("1d12h", "x"), 129600);
  EXPECT_EQ(parse_duration("2d", "x"), 172800);
  EXPECT_EQ(parse_duration("1.5h30m", "x"), 7200);
  EXPECT_EQ(parse_duration("90", "--time", 60), 5400);
  EXPECT_EQ(parse_duration("1h", "--time", 60), 3600);
  EXPECT_EQ(parse_duration("01:30:00", "--time", 60), 5400);
  for (const char* bad : {"1h30", "30m1h", "h", "1hm", "1h 30m", "ms", "1s1s"}) {
    EXPECT_THROW(parse_duration(bad, "x"), ConfigError) << bad;
  }
  try {
    parse_duration("soon", "--time", 60);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "--time: expected a duration like 90s, 15m, 2h, 1h30m, HH:MM:SS or D-HH[:MM[:SS]] above 0 and at most "
                 "366 days (a plain number is minutes), got 'soon'");
  }
  // Keys in seconds take a duration string too, from the file, --set and the environment.
  test::TempDir dir;
  test::write_file(dir.file("job.toml"),
                   "[train]\nsteps = 10\n[schedule]\ntime_limit_s = \"1h30m\"\nmin_lead_s = \"00:00:20\"\n");
  JobConfig cfg = load_job_config(dir.file("job.toml"), {}, {});
  EXPECT_EQ(cfg.schedule.time_limit_s, 5400);
  EXPECT_EQ(cfg.schedule.min_lead_s, 20);
  cfg = load_job_config(dir.file("job.toml"), {"schedule.time_limit_s=2h"}, {{"GTRAIN_SCHEDULE_MIN_LEAD_S", "1m"}});
  EXPECT_EQ(cfg.schedule.time_limit_s, 7200);
  EXPECT_EQ(cfg.schedule.min_lead_s, 60);
  EXPECT_EQ(load_job_config(dir.file("job.toml"), {"schedule.time_limit_s=600"}, {}).schedule.time_limit_s, 600);
  try {
    load_job_config(dir.file("job.toml"), {"schedule.time_limit_s=soon"}, {});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("schedule.time_limit_s: expected a number >= 0 or a duration such as "
                                         "\"90s\", \"15m\", \"1h30m\", \"01:30:00\", got 'soon' (string)"),
              std::string::npos)
        << e.what();
  }
}

TEST(Schedule, StopSignalsSetAFlag) {
  clear_stop_signal();
  install_stop_signals({"USR2"});
  std::raise(SIGUSR2);
  EXPECT_EQ(stop_signal_received(), SIGUSR2);
  clear_stop_signal();
  EXPECT_EQ(stop_signal_received(), 0);
  EXPECT_THROW(install_stop_signals({"KILL"}), ConfigError);
}

// A second TERM ends the process at once, unless the stage's final save is already committed.
TEST(Schedule, SecondTermEndsTheProcessUnlessTheStageIsSaved) {
  for (bool saved : {false, true}) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(2);  // the "second stop signal" line is not this test's output
      clear_stop_signal();
      install_stop_signals({"TERM"});
      std::raise(SIGTERM);  // the stop request
      if (stop_signal_received() != SIGTERM) std::_Exit(10);
      if (saved) mark_stage_saved();
      std::raise(SIGTERM);
      std::_Exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    if (saved) {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    } else {
      EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
    }
  }
}

}  // namespace
}  // namespace gtrain
