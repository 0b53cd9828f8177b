// schedule.cpp: stop signals, quota windows and deadlines.
#include "runtime/core/schedule.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <regex>
#include <sstream>

#include "runtime/core/errors.h"

namespace gtrain {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;
volatile std::sig_atomic_t g_stage_saved = 0;
volatile std::sig_atomic_t g_announce = 0;
// The notice for each signal number, written before any handler may read it (announce_stop_requests).
constexpr int kMaxSignal = 65;
char g_notice[kMaxSignal][160] = {};

void write_notice(int sig) {
  if (sig <= 0 || sig >= kMaxSignal || !g_notice[sig][0]) return;
  ssize_t ignored = ::write(2, g_notice[sig], std::strlen(g_notice[sig]));
  (void)ignored;
}

// The first stop signal asks for a stop at the next step; TERM or INT once more ends the process
// the default way (a stuck or very long step must still be killable; committed checkpoints are safe),
// unless the stage's final save is already committed: then the process is ending as it should.
void on_stop_signal(int sig) {
  if (g_stop_signal != 0 && !g_stage_saved && (sig == SIGTERM || sig == SIGINT)) {
    static const char kMsg[] =
        "gtrain: second stop signal: exiting now without saving (the last committed "
        "checkpoint stays valid)\n";
    ssize_t ignored = ::write(2, kMsg, sizeof(kMsg) - 1);
    (void)ignored;
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  const bool first = g_stop_signal == 0;
  g_stop_signal = sig;
  if (first && g_announce) write_notice(sig);
}

const char* kDays[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};
const char* kFullDays[] = {"sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday"};

// What a days field accepts, for every error about one.
const char* kDaysForms =
    "expected days such as \"mon-fri\", \"sat,sun\", \"mon,wed-fri\", \"fri-mon\" (across the week end), "
    "\"daily\", \"weekdays\" or \"weekends\"; day names mon..sun in any case, or in full";

std::string lower_trimmed(const std::string& s) {
  const auto a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  std::string out = a == std::string::npos ? "" : s.substr(a, b - a + 1);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

int day_index(const std::string& text, const std::string& where) {
  const std::string d = lower_trimmed(text);
  for (int i = 0; i < 7; ++i) {
    if (d == kDays[i] || d == kFullDays[i]) return i;
  }
  throw ConfigError(where + ".days: unknown day '" + text + "' (" + kDaysForms + ")");
}

// The days field as a mask (bit d = weekday d, 0 = Sunday): lists of days and ranges (a range may
// run across the week end: fri-mon), or one of the words daily, weekdays, weekends.
int days_mask(const std::string& days, const std::string& where) {
  const std::string all = lower_trimmed(days);
  if (all == "daily" || all == "every day" || all == "all") return 0x7f;
  if (all == "weekdays") return 0b0111110;
  if (all == "weekends") return 0b1000001;
  int mask = 0;
  std::stringstream ss(days);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto dash = item.find('-');
    if (dash == std::string::npos) {
      mask |= 1 << day_index(item, where);
      continue;
    }
    const int a = day_index(item.substr(0, dash), where), b = day_index(item.substr(dash + 1), where);
    for (int d = a;; d = (d + 1) % 7) {
      mask |= 1 << d;
      if (d == b) break;
    }
  }
  if (mask == 0) throw ConfigError(where + ".days: no day given (" + kDaysForms + ")");
  return mask;
}

int minutes(const std::string& hhmm, const std::string& where, const std::string& forms) {
  int h = -1, m = -1;
  char extra;
  if (std::sscanf(hhmm.c_str(), "%d:%d%c", &h, &m, &extra) != 2 || h < 0 || h > 24 || m < 0 || m > 59 ||
      (h == 24 && m != 0)) {
    throw ConfigError(where + ".hours: '" + hhmm + "' is not a time HH:MM (00:00 to 24:00)" + forms);
  }
  return h * 60 + m;
}

}  // namespace

const std::vector<int>& stop_signal_candidates() {
  static const std::vector<int> kAll = {SIGUSR1, SIGUSR2, SIGTERM, SIGINT, SIGHUP};
  return kAll;
}

int signal_number(const std::string& name) {
  if (name == "USR1") return SIGUSR1;
  if (name == "USR2") return SIGUSR2;
  if (name == "TERM") return SIGTERM;
  if (name == "INT") return SIGINT;
  if (name == "HUP") return SIGHUP;
  return -1;
}

std::string stop_signal_text(int sig) {
  if (sig == SIGUSR1) return "USR1 (the scheduler's warning before the time limit, or gtrain cancel)";
  if (sig == SIGUSR2) return "USR2 (a stop request sent by hand or by a site's script)";
  if (sig == SIGTERM) return "TERM (a stop request: the scheduler's end or cancel, kill, or a shutdown)";
  if (sig == SIGINT) return "INT (Ctrl-C)";
  if (sig == SIGHUP) return "HUP (the terminal or ssh session closed)";
  return "signal " + std::to_string(sig);
}

std::string describe_stage_exit(const std::string& exit) {
  static const std::regex kSignal("signal ([0-9]+)");
  std::string out;
  auto from = exit.cbegin();
  for (std::sregex_iterator it(exit.begin(), exit.end(), kSignal), end; it != end; ++it) {
    out.append(from, exit.cbegin() + it->position());
    out += stop_signal_text(std::stoi((*it)[1].str()));
    from = exit.cbegin() + it->position() + it->length();
  }
  out.append(from, exit.cend());
  return out;
}

void install_stop_signals(const std::vector<std::string>& names) {
  std::vector<int> sigs;
  for (const auto& n : names) {
    const int sig = signal_number(n);
    if (sig < 0)
      throw ConfigError("schedule.stop_signals: unknown signal '" + n + "' (expected USR1, USR2, TERM, INT, HUP)");
    sigs.push_back(sig);
  }
  for (const int sig : stop_signal_candidates()) {
    const bool stop = std::find(sigs.begin(), sigs.end(), sig) != sigs.end();
    // A hang-up is the console going away (a closed terminal, a dropped ssh session): it must not end
    // training, so HUP left out of the list is ignored. Any other signal left out acts as usual.
    const bool console_gone = sig == SIGHUP && !stop;
    struct sigaction sa {};
    sa.sa_handler = stop ? on_stop_signal : console_gone ? SIG_IGN : SIG_DFL;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    struct sigaction was {};
    sigaction(sig, nullptr, &was);
    if (stop || console_gone || was.sa_handler == on_stop_signal) sigaction(sig, &sa, nullptr);
  }
}

std::vector<int> stop_signal_numbers(const std::vector<std::string>& names) {
  std::vector<int> out;
  for (const auto& n : names) {
    const int sig = signal_number(n);
    if (sig > 0) out.push_back(sig);
  }
  return out;
}

void block_stop_signals(bool block) {
  sigset_t set;
  sigemptyset(&set);
  for (const int sig : stop_signal_candidates()) sigaddset(&set, sig);
  sigprocmask(block ? SIG_BLOCK : SIG_UNBLOCK, &set, nullptr);
}

void hand_on_stop_signal() {
  if (g_stop_signal != 0) std::raise(g_stop_signal);  // blocked: stays pending across exec
}

void announce_stop_requests(bool on) {
  if (on) {
    for (const int sig : stop_signal_candidates()) {
      const bool interactive = sig == SIGTERM || sig == SIGINT;
      std::snprintf(g_notice[sig], sizeof(g_notice[sig]), "gtrain: %s: finishing the step, saving, then exit 3%s\n",
                    strsignal(sig), interactive ? " (TERM or INT again exits without saving)" : "");
    }
  }
  g_announce = on ? 1 : 0;
  if (on && g_stop_signal != 0) write_notice(g_stop_signal);  // it came during start-up
}

void mark_stage_saved() {
  g_stage_saved = 1;
}

int stop_signal_received() {
  return g_stop_signal;
}
void clear_stop_signal() {
  g_stop_signal = 0;
  g_stage_saved = 0;
}

Window parse_window(const WindowConfig& w, const std::string& where) {
  Window out;
  out.max_gpus = w.max_gpus;
  out.days_mask = days_mask(w.days, where);
  const std::string hours = lower_trimmed(w.hours);
  const std::string forms =
      " (expected HH:MM-HH:MM in local time such as \"08:00-20:00\", \"20:00-08:00\" (an end before the start "
      "wraps past midnight) or \"00:00-24:00\" (all day))";
  const auto dash = hours.find('-');
  if (dash == std::string::npos) throw ConfigError(where + ".hours: '" + w.hours + "' is not a span" + forms);
  out.start_min = minutes(lower_trimmed(hours.substr(0, dash)), where, forms);
  out.end_min = minutes(lower_trimmed(hours.substr(dash + 1)), where, forms);
  if (out.start_min == 24 * 60) throw ConfigError(where + ".hours: '" + w.hours + "' starts at 24:00" + forms);
  if (out.start_min == out.end_min) throw ConfigError(where + ".hours: '" + w.hours + "' is empty" + forms);
  return out;
}

namespace {

// The local calendar day `days` days after the one containing t (its date fields and tm_wday).
struct tm local_day(double t, int days) {
  time_t tt = static_cast<time_t>(t);
  struct tm lt;
  localtime_r(&tt, &lt);
  lt.tm_mday += days;
  lt.tm_hour = 12;  // mktime normalises the date at noon, clear of any clock change
  lt.tm_min = lt.tm_sec = 0;
  lt.tm_isdst = -1;
  const time_t noon = mktime(&lt);
  localtime_r(&noon, &lt);
  return lt;
}

// The local wall-clock time `minute` minutes after the start of `day` (plus `days_after` days), as
// mktime reads it: on a daylight-saving change day, 08:00 is 08:00 on the clock, not 8 x 3600 s
// after midnight.
double local_time_of(struct tm day, int days_after, int minute) {
  day.tm_mday += days_after + minute / (24 * 60);
  day.tm_hour = (minute % (24 * 60)) / 60;
  day.tm_min = minute % 60;
  day.tm_sec = 0;
  day.tm_isdst = -1;
  return static_cast<double>(mktime(&day));
}

// The occurrence [start, end) of a window that begins on `day`.
std::pair<double, double> occurrence(const Window& w, const struct tm& day) {
  const double start = local_time_of(day, 0, w.start_min);
  const double end = local_time_of(day, w.end_min > w.start_min ? 0 : 1, w.end_min);
  return {start, end};
}

}  // namespace

double window_end(const std::vector<Window>& windows, double now) {
  double best = 0;
  for (const auto& w : windows) {
    // The occurrence that started today or yesterday (wrapping windows) may contain now.
    for (int back = 0; back <= 1; ++back) {
      const struct tm day = local_day(now, -back);
      if (!(w.days_mask & (1 << day.tm_wday))) continue;
      auto [s, e] = occurrence(w, day);
      if (now >= s && now < e) best = std::max(best, e);
    }
  }
  return best;
}

int64_t window_cap(const std::vector<Window>& windows, double t) {
  int64_t cap = 0;
  for (const auto& w : windows) {
    if (w.max_gpus > 0 && window_end({w}, t + 1) != 0) cap = w.max_gpus;
  }
  return cap;
}

double window_stretch_end(const std::vector<Window>& windows, double now) {
  double end = window_end(windows, now);
  if (end == 0) return 0;
  const int64_t cap = window_cap(windows, now);
  // Daily windows chain at most 8 times a week each; a stretch past a week has no end to keep.
  for (size_t guard = 0; guard < 16 * windows.size() + 16; ++guard) {
    if (end - now > 7 * 86400.0) return 0;
    const double next = window_end(windows, end);
    if (next <= end || window_cap(windows, end) != cap) return end;
    end = next;
  }
  return 0;
}

double next_window_start(const std::vector<Window>& windows, double now) {
  double best = 0;
  for (const auto& w : windows) {
    for (int ahead = 0; ahead <= 7; ++ahead) {
      const struct tm day = local_day(now, ahead);
      if (!(w.days_mask & (1 << day.tm_wday))) continue;
      const double s = occurrence(w, day).first;
      if (s > now && (best == 0 || s < best)) {
        best = s;
        break;
      }
    }
  }
  return best;
}

Deadline earliest(const std::vector<Deadline>& ds) {
  Deadline out;
  for (const auto& d : ds) {
    if (d.unix_time > 0 && (out.unix_time == 0 || d.unix_time < out.unix_time)) out = d;
  }
  return out;
}

}  // namespace gtrain

namespace gtrain {

double parse_duration(const std::string& text, const std::string& what, double plain_unit_s) {
  const std::string expected = what + ": expected a duration like 90s, 15m, 2h, 1h30m, HH:MM:SS or D-HH[:MM[:SS]] " +
                               "above 0 and at most 366 days" +
                               (plain_unit_s == 60 ? " (a plain number is minutes)" : "") + ", got '" + text + "'";
  // Plain decimal numbers only: no hex, exponents, inf or nan; minutes and seconds fields below 60.
  static const std::regex kPlain(R"(^([0-9]+(\.[0-9]+)?)$)");
  static const std::regex kUnits(
      R"(^(([0-9]+(\.[0-9]+)?)d)?(([0-9]+(\.[0-9]+)?)h)?(([0-9]+(\.[0-9]+)?)m)?(([0-9]+(\.[0-9]+)?)s)?$)");
  static const std::regex kClock(R"(^(([0-9]+):)?([0-9]+):([0-9]{1,2})$)");
  static const std::regex kDays(R"(^([0-9]+)-([0-9]{1,2})(:([0-9]{1,2}))?(:([0-9]{1,2}))?$)");
  std::smatch m;
  double s = 0;
  if (std::regex_match(text, m, kPlain)) {
    s = std::stod(m[1].str()) * plain_unit_s;
  } else if (!text.empty() && std::regex_match(text, m, kUnits)) {
    // 2d, 2h, 15m, 90s and their sums in that order: 1h30m, 2h15s, 1d12h.
    const double scale[] = {86400, 3600, 60, 1};
    for (int i = 0; i < 4; ++i) {
      if (m[2 + 3 * i].matched) s += std::stod(m[2 + 3 * i].str()) * scale[i];
    }
  } else if (std::regex_match(text, m, kClock)) {
    // MM:SS or HH:MM:SS: seconds, and minutes after hours, below 60.
    const double h = m[2].matched ? std::stod(m[2].str()) : 0;
    const double mi = std::stod(m[3].str()), sec = std::stod(m[4].str());
    if (sec >= 60 || (m[2].matched && mi >= 60)) throw ConfigError(expected);
    s = (h * 60 + mi) * 60 + sec;
  } else if (std::regex_match(text, m, kDays)) {
    // Slurm's D-HH, D-HH:MM and D-HH:MM:SS (so "1-00:30" is a day and 30 minutes, as sbatch --time reads it).
    const double d = std::stod(m[1].str()), h = std::stod(m[2].str());
    const double mi = m[4].matched ? std::stod(m[4].str()) : 0, sec = m[6].matched ? std::stod(m[6].str()) : 0;
    if (h >= 24 || mi >= 60 || sec >= 60) throw ConfigError(expected);
    s = ((d * 24 + h) * 60 + mi) * 60 + sec;
  } else {
    throw ConfigError(expected);
  }
  if (!(s > 0) || s > 366.0 * 86400) throw ConfigError(expected);
  return s;
}

}  // namespace gtrain
