// submit_calendar.h: what `gtrain submit` prints for a config with quota windows: the calendar of
// stages on the GPUs of the window each starts in (window_calendar.h), what a --time longer than the
// windows costs, and the resource-request paragraph gtrain report has.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "launcher/chain/chain.h"
#include "launcher/commands/submit_command.h"
#include "runtime/core/config/job_config.h"
#include "runtime/core/schedule.h"

namespace gtrain {

// Prints nothing without windows. `limit_s` and `lead`: the stage time limit and its save lead.
void print_windows_plan(const SubmitOptions& o, const JobConfig& cfg, const Chain& chain,
                        const std::vector<Window>& windows, const std::vector<StagePlan>& plans,
                        const std::string& run_dir, double limit_s, int lead, double now, std::ostream& out);

}  // namespace gtrain
