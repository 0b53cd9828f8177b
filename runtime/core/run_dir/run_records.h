// run_records.h: the records of metrics.jsonl and restarts.jsonl as typed structs (torch-free):
// the kinds in one name table, each record with to_json / from_json, and one tolerant reader a
// file. The only place their keys are spelled.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gtrain {

// Every kind of record, by the file that holds it: metrics.jsonl (rank 0's trainer) then
// restarts.jsonl (the launching gtrain).
#define GTRAIN_RECORD_KINDS(X) \
  X(train)                     \
  X(eval)                      \
  X(eval_stopped)              \
  X(estimate)                  \
  X(stage_end)                 \
  X(threads)                   \
  X(final)                     \
  X(checkpoint)                \
  X(resume)                    \
  X(restart)                   \
  X(recovered)

enum class RecordKind {
#define GTRAIN_RECORD_KIND(name) name,
  GTRAIN_RECORD_KINDS(GTRAIN_RECORD_KIND)
#undef GTRAIN_RECORD_KIND
};

// The one name table: the "kind" value of each record ("train", "eval", ...).
const char* record_kind_name(RecordKind k);
std::optional<RecordKind> record_kind_from_name(const std::string& name);
// The kind of a record as read (nullopt: not an object, no "kind", or one this gtrain does not know).
std::optional<RecordKind> record_kind(const nlohmann::json& j);
// The step of any record (nullopt: none), its unix time (0: none), and whether `key` is one of these
// two (TensorBoard's axes, not scalars).
std::optional<int64_t> record_step(const nlohmann::json& j);
double record_time(const nlohmann::json& j);
bool is_record_axis(const std::string& key);
// Every kind, in the table's order.
std::vector<RecordKind> all_record_kinds();

// A train record: one recorded step (log.metrics_interval).
struct TrainRecord {
  static constexpr RecordKind kKind = RecordKind::train;
  int64_t step = 0;
  double loss = 0, lr = 0;
  std::optional<double> grad_norm;  // null when not finite
  double samples_per_s = 0, step_time_s = 0, data_wait_s = 0;
  int64_t consumed_samples = 0;
  double elapsed_s = 0;  // since the stage's trainer started (goes back at each stage or restart)
  double time = 0;       // unix time the step ended (0: an older gtrain did not record it)
  std::optional<double> tokens_per_s, est_step_s, mfu;
  bool skipped = false;  // fp16: the step was skipped for an overflow
  double param_mb = 0, grad_mb = 0, opt_state_mb = 0;
  std::optional<double> host_state_mb, step_tensor_peak_mb, loss_scale;
  // Device figures (runtime/metrics/device_metrics.h): those the report reads, and the rest as measured.
  std::optional<double> cpu_util, gpu_util, gpu_mem_used_mb, peak_mem_mb;
  nlohmann::json device = nlohmann::json::object();
  template <class V>
  void fields(V& v);
};

struct EvalRecord {
  static constexpr RecordKind kKind = RecordKind::eval;
  int64_t step = 0;
  double loss = 0, accuracy = 0;
  int64_t samples = 0;
  double eval_s = 0, time = 0;  // time 0: an older gtrain did not record it
  template <class V>
  void fields(V& v);
};

struct EvalStoppedRecord {  // an interval evaluation a stop request ended
  static constexpr RecordKind kKind = RecordKind::eval_stopped;
  int64_t step = 0;
  std::string reason;
  template <class V>
  void fields(V& v);
};

struct EstimateRecord {  // the measured step time is off the planner's estimate
  static constexpr RecordKind kKind = RecordKind::estimate;
  int64_t step = 0;
  double est_step_s = 0, measured_step_s = 0, error = 0;
  std::string profile;
  template <class V>
  void fields(V& v);
};

struct StageEndRecord {  // a stage that stopped early, after its saves committed
  static constexpr RecordKind kKind = RecordKind::stage_end;
  int64_t step = 0;
  std::string reason, detail;  // detail "" = none
  template <class V>
  void fields(V& v);
};

struct ThreadsRecord {  // train.threads = 0: the thread count measured fastest
  static constexpr RecordKind kKind = RecordKind::threads;
  int64_t step = 0;
  int threads = 1;
  std::string measured;
  template <class V>
  void fields(V& v);
};

struct FinalRecord {  // the run completed (after its final evaluation)
  static constexpr RecordKind kKind = RecordKind::final;
  int64_t step = 0;
  double train_loss = 0;
  std::optional<double> eval_loss, eval_accuracy;  // null without an eval set
  double seconds = 0, samples_per_s = 0, data_wait_s = 0, save_stall_s = 0;
  template <class V>
  void fields(V& v);
};

struct CheckpointRecord {  // a save (asynchronous: its write goes on after the record)
  static constexpr RecordKind kKind = RecordKind::checkpoint;
  int64_t step = 0;
  double stall_s = 0;
  bool async = true;
  double time = 0;
  std::optional<double> previous_write_s;  // the write this save waited for (or made, synchronous)
  template <class V>
  void fields(V& v);
};

struct ResumeRecord {  // a stage resumed from a checkpoint
  static constexpr RecordKind kKind = RecordKind::resume;
  int64_t step = 0;
  std::string path;
  double probe_loss = 0, probe_loss_saved = 0;
  std::string plan;
  template <class V>
  void fields(V& v);
};

struct RestartRecord {  // restarts.jsonl: the ranks restarted in the job after a failed or hung rank
  static constexpr RecordKind kKind = RecordKind::restart;
  int restart = 1;  // 1-based, within the stage
  double unix = 0, detected_unix = 0;
  std::string cause;
  int64_t step_reached = 0, resume_step = 0, steps_lost = 0;
  bool step_gained = false;
  nlohmann::json allocation = nlohmann::json::object();
  std::string host, left_out;    // the failed rank's host; the host left out ("" = none)
  std::optional<int64_t> ranks;  // with left_out: the ranks on the other hosts
  std::string plan;              // with left_out: their plan's summary
  template <class V>
  void fields(V& v);
};

struct RecoveredRecord {  // restarts.jsonl: the first step after a restart
  static constexpr RecordKind kKind = RecordKind::recovered;
  int restart = 1;
  std::optional<int64_t> step;
  std::optional<double> seconds;  // from the attempt's start to its first step
  template <class V>
  void fields(V& v);
};

// to_json writes "kind" and every field; from_json reads what it finds (a missing or mistyped
// field keeps its default), so records of an older gtrain read back.
template <class R>
nlohmann::json record_to_json(const R& r);
template <class R>
R record_from_json(const nlohmann::json& j);

// One record of a JSON-lines file with its kind; as<R>() reads it typed.
struct RunRecord {
  RecordKind kind;
  nlohmann::json json;
  template <class R>
  R as() const {
    return record_from_json<R>(json);
  }
  template <class R>
  bool is() const {
    return kind == R::kKind;
  }
};

// The records of metrics.jsonl or restarts.jsonl at `path`, in order; lines that do not parse and
// kinds this gtrain does not know are skipped, a missing file has none.
std::vector<RunRecord> read_run_records(const std::string& path);
// The records of kind R only, typed.
template <class R>
std::vector<R> read_records_of(const std::string& path) {
  std::vector<R> out;
  for (const auto& r : read_run_records(path))
    if (r.is<R>()) out.push_back(r.as<R>());
  return out;
}

// Whether metrics.jsonl at `path` holds the "final" record of step `step` (a run that completed
// there). A line that does not parse, or a missing file, holds none.
bool has_final_record(const std::string& path, int64_t step);

}  // namespace gtrain
