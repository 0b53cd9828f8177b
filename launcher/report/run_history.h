// run_history.h: what a run directory says happened, for `gtrain report` (torch-free): its stages
// (stages.jsonl, and the attempts only metrics.jsonl shows), the train / eval / checkpoint records,
// in-job restarts, the chain's queue times, and where each stage's allocated time went (Google's
// goodput buckets), with the work lost to a failure or a kill detected from the steps trained again.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/core/run_dir/plan_record.h"
#include "runtime/core/run_dir/run_records.h"

namespace gtrain {

// One train record of metrics.jsonl (-1: the record has no such figure).
struct TrainPoint {
  int64_t step = 0;
  double time = 0;  // unix time the step ended
  double loss = 0, lr = 0;
  double step_time_s = 0, data_wait_s = 0;
  double samples_per_s = 0, tokens_per_s = -1;
  double mfu = -1, est_step_s = -1;
  double cpu_util = -1, gpu_util = -1, gpu_mem_used_mb = -1, peak_mem_mb = -1;
  int attempt = 0;   // the process start (RunHistory::attempts) that trained it
  int64_t span = 1;  // the steps it stands for (log.metrics_interval: the steps since the previous record)
};

struct EvalPoint {
  int64_t step = 0;
  double time = 0, loss = 0, accuracy = 0, eval_s = 0;  // time 0: written by a gtrain that did not record it
};

struct SavePoint {
  int64_t step = 0;
  double time = 0, stall_s = 0;
};

// One start of the ranks: a stage's first, or one after an in-job restart; its train records.
struct Attempt {
  double start = 0;        // unix time its trainer started (first record's time less elapsed_s)
  double first_step = 0;   // unix time its first recorded step began
  double end = 0;          // its last record's time
  int64_t step_from = 0;   // the step it started from
  int64_t step_to = 0;     // its last recorded step
  int64_t lost_steps = 0;  // steps a later attempt trained again (it resumed from an earlier checkpoint)
  double lost_s = 0;       // the step time of those steps
  double step_s = 0;       // the step time of all its steps
  double data_wait_s = 0;  // the data wait of the steps not lost
  int stage = -1;          // index into RunHistory::stages
};

// Wall-clock seconds of one stage (or the run), by where they went. The buckets of the allocated
// time add up to the stage's wall time; `queue` is before the allocation.
struct TimeBuckets {
  double queue = 0;      // idle in the queue (submitted, or the previous stage's end, to the start)
  double prepare = 0;    // text data tokenized (or its cache checked) before the ranks started
  double startup = 0;    // from the start to the first step, less the data preparation and checkpoint load
  double load = 0;       // loading the checkpoint
  double training = 0;   // training steps, less data wait and lost work
  double data_wait = 0;  // steps waiting for data
  double save = 0;       // training stalled for saves
  double eval = 0;       // evaluations
  double lost = 0;       // steps trained again later (a failure or kill after the last save)
  double recovery = 0;   // in-job restarts: from the failed attempt's last step to the next one's first
  double other = 0;      // the rest: shutdown, logging, what no record accounts for
  double allocated() const {
    return prepare + startup + load + training + data_wait + save + eval + lost + recovery + other;
  }
  TimeBuckets& operator+=(const TimeBuckets& o);
  TimeBuckets scaled(double units) const;  // x units: GPU-seconds
};

struct StageReport {
  int index = 1;
  double submitted = 0;  // unix time (0 = not known)
  double start = 0, end = 0;
  int world = 1;      // ranks it trained with
  int units = 1;      // GPUs allocated (CPU runs: ranks)
  bool gpus = false;  // units are GPUs
  std::string scheduler, job, plan, exit;
  int64_t step_from = 0, step_to = 0;
  int restarts = 0;
  nlohmann::json data;   // chat / prompt_completion data: the ledger's counts (text::data_counts_json; null = none)
  bool recorded = true;  // stages.jsonl has its line (false: only metrics.jsonl shows it)
  bool queued = false;   // submitted, not started
  std::vector<double> save_times;
  TimeBuckets t;  // wall seconds
  // Utilisation over its train records (-1 = not recorded): the cores each CPU rank kept busy, the
  // GPU's utilisation (NVML, %), the memory in use per rank (MiB).
  double cpu_util = -1, gpu_util = -1, mem_mb = -1;
  double unit_hours() const { return (end - start) * units / 3600.0; }
};

struct RunHistory {
  std::string run_dir;
  std::vector<StageReport> stages;  // in time order; queued chain stages last
  std::vector<Attempt> attempts;
  std::vector<TrainPoint> train;      // one per step: the latest attempt's (what the model kept)
  std::vector<TrainPoint> retrained;  // records a later attempt trained again (the lost work)
  std::vector<EvalPoint> eval;
  std::vector<SavePoint> saves;
  std::vector<RestartRecord> restarts;  // restarts.jsonl's restart records
  std::optional<PlanRecord> plan;       // plan.json
  int64_t total_steps = 0, done = 0, global_batch = 0, tokens_per_sample = 0;
  std::string precision, model;
  bool complete = false, running = false;
  std::string state;  // complete | running | queued | stopped (resumable) | failed
  std::string chain_state;
  double eta_s = -1;  // -1 = unknown
  TimeBuckets total;  // GPU-seconds (wall x units, summed)
  double unit_hours = 0, goodput = 0;
  bool gpus = false;  // any stage's units are GPUs
};

// Reads `run_dir`. ConfigError (exit 2), one line naming what is missing, for a directory that is
// not a run, a run of an older layout (train records without times), or a run with no train record.
// `now` is the time the report is made (queued and running stages end there).
RunHistory read_run_history(const std::string& run_dir, double now);

// A stage's median measured seconds per step and the planner's estimate for it, over its train
// records (steps = 0: it recorded none; est_s = 0: no estimate recorded).
struct StepSpeed {
  double step_s = 0, est_s = 0;
  size_t steps = 0;
};
StepSpeed stage_step_speed(const RunHistory& h, const StageReport& s);

// Stages with a job id and no submission time (submitted by hand, or by an older gtrain) get the
// one `lookup` finds (the scheduler's record); the queue waits and totals follow.
void add_submit_times(RunHistory& h, const std::function<std::optional<double>(const StageReport&)>& lookup);

}  // namespace gtrain
