// sweep_report.h: `gtrain report SWEEP_DIR`: a sweep's report as one self-contained HTML page (or
// Markdown): the search and its state, the cost in rank-hours (GPU-hours) and the share outside
// training steps (start-up, resume, rung evaluations and saves), the best trial with its job as
// TOML, every trial's curve on one chart (its metric at each rung, and its training loss), the
// trials table (state, rung, steps, metric, runs, rank-hours, pause share, values, failure) and the
// promotions rung by rung.
#pragma once

#include <string>

#include "launcher/sweep/sweep_ledger.h"

namespace gtrain {

// `best_toml`: the best trial's job (sweep_command's best_trial_toml; "" = none yet).
std::string render_sweep_html(const SweepLedger& l, const std::string& dir, const std::string& best_toml);
std::string render_sweep_markdown(const SweepLedger& l, const std::string& dir, const std::string& best_toml);

}  // namespace gtrain
