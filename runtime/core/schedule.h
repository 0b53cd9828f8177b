// schedule.h: stage control: stop signals caught into a flag, deadlines (Slurm end time,
// --time-limit, quota windows), and the quota-window calendar.
#pragma once

#include <ctime>
#include <string>
#include <vector>

#include "runtime/core/config/schedule_config.h"

namespace gtrain {

// Installs handlers that only record the signal; training notices between steps.
void install_stop_signals(const std::vector<std::string>& names);
int stop_signal_received();  // 0 = none
void clear_stop_signal();
// The stage's final save is committed: a second TERM or INT no longer ends the process early.
void mark_stage_saved();
// This process is the job's only rank with no gtrain parent to say it (one rank, or srun's rank 0):
// the first stop signal prints what happens now ("finishing the step, saving, exit 3"), once; one
// that came already is said at once. Off (the default) for --quiet and for ranks under mpirun.
void announce_stop_requests(bool on);
std::vector<int> stop_signal_numbers(const std::vector<std::string>& names);  // known names only
const std::vector<int>& stop_signal_candidates();  // every signal a stop list may name: USR1 USR2 TERM INT HUP
// Blocks (or unblocks) every signal a stop list may name: a blocked signal stays pending, across
// exec too, until the next program installs its handlers and unblocks it.
void block_stop_signals(bool block);
// With the stop signals blocked: raises the recorded stop signal again so that it is pending for the
// program this process is about to exec.
void hand_on_stop_signal();
int signal_number(const std::string& name);  // "USR1" -> SIGUSR1; -1 when unknown
// A stop signal by name and what usually sends it: "USR1 (the scheduler's warning before the time
// limit, or gtrain cancel)"; "signal N" for one gtrain does not stop on.
std::string stop_signal_text(int sig);
// A stage's recorded exit ("resumable: signal 10") with each "signal N" in words (stop_signal_text).
std::string describe_stage_exit(const std::string& exit);

// A parsed quota window. Days: bit d set for weekday d (0 = Sunday). Minutes since midnight.
struct Window {
  int days_mask = 0x7f;
  int start_min = 0, end_min = 24 * 60;  // end < start: wraps past midnight
  int64_t max_gpus = 0;
};

// Parses a window; throws ConfigError naming `where` and the field.
Window parse_window(const WindowConfig& w, const std::string& where);

// Wall-clock now as unix time (seconds, fractional): what deadlines, windows and records use.
double unix_now();

// The end (unix time) of the window containing `now`, or 0 when `now` is in none.
double window_end(const std::vector<Window>& windows, double now_unix);
// The end of the stretch of back-to-back windows with the same GPU cap that starts with the one
// containing `now` (a "mon-sun 00:00-24:00" window does not end at each midnight): the deadline of a
// stage running now. 0 when `now` is in no window, or when the stretch runs on for over a week.
double window_stretch_end(const std::vector<Window>& windows, double now_unix);
// The GPU cap at unix time `t`: the max_gpus of the (last listed) capped window containing it, 0 = none.
int64_t window_cap(const std::vector<Window>& windows, double t);
// The next start of any window after `now` (unix time), or 0 when there are no windows.
double next_window_start(const std::vector<Window>& windows, double now_unix);

// The earliest of the non-zero deadlines, with its source ("" when none).
struct Deadline {
  double unix_time = 0;
  std::string source;
};
Deadline earliest(const std::vector<Deadline>& ds);

}  // namespace gtrain

namespace gtrain {
// The one reader of durations, for every flag and key that takes one: "90s", "15m", "2h", "2d" and
// their sums ("1h30m"), "1:30:00", "45:00" (MM:SS), Slurm's D-HH, D-HH:MM, D-HH:MM:SS -> seconds. A
// plain number is `plain_unit_s` seconds each (60 for submit --time, as sbatch reads it). Throws
// ConfigError naming `what`.
double parse_duration(const std::string& text, const std::string& what, double plain_unit_s = 1);
}  // namespace gtrain
