// stage_ledger.h: the rank side of stages.jsonl (torch-free). Rank 0's trainer appends one record
// when its stage ends, however it ends, and copies the records so far into each checkpoint.
// (launcher/chain/stage_ledger.h reads the ledger, and adds the records of stages whose trainer did not.)
#pragma once

#include <cstdint>
#include <optional>
#include <string>

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
  std::string exit;              // stage_exit()
  std::string stop_detail;       // a deadline's stop: the time left and the lead it keeps ("" = none)
  std::optional<int> threads;    // train.threads = 0: the measured choice
  std::string threads_measured;  // and its measurements
  nlohmann::json config_changes = nlohmann::json::object();  // "section.key": [was, now] since the checkpoint
  std::string reported_by;  // "" = the stage's own trainer; else who recorded it from metrics.jsonl
  int restarts = 0;         // times the launching gtrain restarted the ranks in this stage (restarts.jsonl)
  nlohmann::json to_json() const;
};

// A stage's exit as the ledger records it: "completed", "resumable: <reason>" (stopped early after
// saving) or the failure as it is ("failed: <what>").
std::string stage_exit(const std::string& stop_reason, bool stopped_early);

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

}  // namespace gtrain
