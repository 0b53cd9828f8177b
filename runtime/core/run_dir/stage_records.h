// stage_records.h: stages.jsonl, one record per stage (torch-free). Rank 0's trainer appends its
// stage's record when the stage ends, however it ends, and copies the records so far into each
// checkpoint; the launching gtrain adds the record of a stage whose ranks could not, and a start
// adds those of stages metrics.jsonl shows but nobody recorded (their launcher was killed).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gtrain {

// One stage, as its line in stages.jsonl.
struct StageRecord {
  double start = 0;           // unix time the stage's trainer was built
  double end = 0;             // unix time it ended
  nlohmann::json allocation;  // scheduler, job id, world size
  int world = 1;
  std::string plan;  // the plan's summary ("" = not known: a stage recorded by another process)
  int64_t step_from = 0;
  int64_t step_to = 0;
  int64_t total_steps = 0;
  int64_t samples = 0;           // (step_to - step_from) x global batch
  double productive_s = 0;       // seconds spent in training steps
  double save_s = 0;             // seconds training stalled for saves
  double load_s = 0;             // seconds spent resuming
  double prepare_s = 0;          // seconds finding or preparing text data's shards before the stage (text/jsonl)
  std::string exit;              // stage_exit()
  std::string stop_detail;       // a deadline's stop: the time left and the lead it keeps ("" = none)
  std::optional<int> threads;    // train.threads = 0: the measured choice
  std::string threads_measured;  // and its measurements
  nlohmann::json config_changes = nlohmann::json::object();  // "section.key": [was, now] since the checkpoint
  std::string reported_by;  // "" = the stage's own trainer; else who recorded it from metrics.jsonl
  int restarts = 0;         // times the launching gtrain restarted the ranks in this stage (restarts.jsonl)
  nlohmann::json data;      // chat / prompt_completion data: what its rows kept and left out (null = none)
  nlohmann::json to_json() const;
  // A record as read: "" and the record, or why the line is not one (a required key missing or of
  // the wrong type: start, end, world, step_from, step_to, total_steps, exit, allocation).
  static std::pair<std::string, StageRecord> from_json(const nlohmann::json& j);
  // The allocation's fields as recorded ("" / 0 when absent).
  std::string scheduler() const;
  std::string job_id() const;
  int gpus() const;
  bool completed() const { return exit == "completed"; }
  bool resumable() const { return exit.rfind("resumable", 0) == 0; }
};

// A stage's exit as the ledger records it: "completed", "resumable: <reason>" (stopped early after
// saving) or the failure as it is ("failed: <what>").
std::string stage_exit(const std::string& stop_reason, bool stopped_early);

// stages.jsonl's records, in order. A line that is not a stage record is skipped, and with `warn`
// said on stderr ("FILE:LINE: ...; line skipped"); a missing file has none.
std::vector<StageRecord> read_stage_records(const std::string& run_dir, bool warn = false);
// The end of the ledger's last record (0 without one), of RUN_DIR/stages.jsonl or of records already read.
double ledger_end(const std::string& run_dir);
double ledger_end(const std::vector<StageRecord>& records);

class StageLedger {
 public:
  explicit StageLedger(std::string path = "") : path_(std::move(path)) {}  // "" = none
  bool enabled() const { return !path_.empty(); }
  // Appends `record` as one line (nothing when not enabled).
  void append(const StageRecord& record) const;
  // The records so far, one an element (a line that does not parse stays a discarded value).
  nlohmann::json records() const;

 private:
  std::string path_;
};

// A stage as its train records in metrics.jsonl show it.
struct MetricsStage {
  double start = 0, end = 0;           // unix time: its first record's time less elapsed_s; its last record's time
  int64_t step_from = 0, step_to = 0;  // the step it started from, its last recorded step
  int64_t samples = 0;                 // samples of the steps it trained
  double productive_s = 0;             // the time it spent in training steps (step_time_s over its steps)
  double steps_per_s = 0;              // wall-clock steps per second between its first and last record
  int records = 0;
};

// The stages of the train records written after `since_unix` (0 = all), in order; a stage starts
// where elapsed_s goes back (each stage counts from its own start) and after a "resume" record.
std::vector<MetricsStage> metrics_stages(const std::string& metrics_path, double since_unix);

// The ledger record of a stage nobody else reported, from its train records: from `step_from` to
// `s`'s last step, the time `s` trained; no save or load time is known. `reported_by` names the writer.
StageRecord unreported_stage_record(double start, double end, const nlohmann::json& allocation, int64_t world,
                                    int64_t step_from, const MetricsStage& s, int64_t total_steps,
                                    const std::string& exit, const std::string& reported_by);

// For a start that holds the run directory's lock: a ledger record for each stage metrics.jsonl shows
// after the ledger's last record (its launcher was killed before it, or anyone, wrote one), naming
// `holder_pid` (the pid the lock file held before this start). Returns the records written.
std::vector<StageRecord> record_lost_stages(const std::string& run_dir, int64_t holder_pid, int64_t total_steps);

}  // namespace gtrain
