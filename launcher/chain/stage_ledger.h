// stage_ledger.h: what metrics.jsonl says about stages stages.jsonl has no record of: the stage
// running now (for `gtrain status`), or one whose launcher was killed (kill -9) before anyone wrote
// its record (the next start adds it), and the time a stage trained, from its train records (for
// the records the launcher writes when the ranks could not).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gtrain {

// A stage as its train records in metrics.jsonl show it.
struct MetricsStage {
  double start = 0, end = 0;           // unix time: its first record's time less elapsed_s; its last record's time
  int64_t step_from = 0, step_to = 0;  // the step it started from, its last recorded step
  int64_t samples = 0;                 // samples of the steps it trained
  double productive_s = 0;             // the time it spent in training steps (step_time_s over its steps)
  double steps_per_s = 0;              // wall-clock steps per second between its first and last record
  int records = 0;
};

// The ledger record of a stage nobody else reported, from its train records: from `step_from` to
// `s`'s last step, the time `s` trained; no save or load time is known. `reported_by` names the writer.
nlohmann::json unreported_stage_record(double start, double end, const nlohmann::json& allocation, int64_t world,
                                       int64_t step_from, const MetricsStage& s, int64_t total_steps,
                                       const std::string& exit, const std::string& reported_by);

// The stages of the train records written after `since_unix` (0 = all), in order; a stage starts
// where elapsed_s goes back (each stage counts from its own start) and after a "resume" record.
std::vector<MetricsStage> metrics_stages(const std::string& metrics_path, double since_unix);

// The end of the ledger's last record (0 without one).
double ledger_end(const std::string& run_dir);

// For a start that holds the run directory's lock: a ledger record for each stage metrics.jsonl shows
// after the ledger's last record (its launcher was killed before it, or anyone, wrote one), naming
// `holder_pid` (the pid the lock file held before this start). Returns the records written.
std::vector<nlohmann::json> record_lost_stages(const std::string& run_dir, int64_t holder_pid, int64_t total_steps);

}  // namespace gtrain
