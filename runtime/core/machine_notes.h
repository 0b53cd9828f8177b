// machine_notes.h: notes a user needs to read once per machine, not at every run (the estimate-off
// advice): a marker file beside the machine's hardware profile remembers that one was said.
// Torch-free.
#pragma once

#include <map>
#include <string>

namespace gtrain {

// The key of the advice a run gives when its steps are far from the planner's estimate.
inline constexpr const char* kEstimateOffNote = "estimate-off";

// The marker for note `key` on `host`: <dir>/note-<key>-<host>, dir being where hardware profiles
// live ($GTRAIN_PROFILE_DIR, else $HOME/.cache/gtrain); "" when neither is set.
std::string machine_note_path(const std::map<std::string, std::string>& env, const std::string& host,
                              const std::string& key);

// True the first time note `key` is asked for on `host` (the marker is then written), false after;
// true every time when there is nowhere to keep the marker (better said twice than never).
bool first_time_on_this_machine(const std::map<std::string, std::string>& env, const std::string& host,
                                const std::string& key);

// Forgets note `key` on `host` (the next run says it again): `gtrain plan --calibrate` does, so an
// estimate still off after calibrating is said once more.
void forget_machine_note(const std::map<std::string, std::string>& env, const std::string& host,
                         const std::string& key);

}  // namespace gtrain
