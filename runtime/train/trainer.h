// trainer.h: the training loop run by every rank: micro-batches with gradient accumulation to the
// exact global batch, gradient averaging over data-parallel ranks, clipping, LR schedule, optimizer
// step, periodic evaluation, metrics and checkpoints.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <future>
#include <memory>
#include <string>

#include "runtime/comm/communicator.h"
#include "runtime/core/checkpoint_manifest.h"
#include "runtime/core/config/job_config.h"
#include "runtime/core/plan.h"
#include "runtime/core/stop_policy.h"
#include "runtime/core/train_steps.h"
#include "runtime/data/dataset.h"
#include "runtime/data/prefetcher.h"
#include "runtime/data/sampler.h"
#include "runtime/metrics/device_metrics.h"
#include "runtime/metrics/metrics_log.h"
#include "runtime/metrics/progress.h"
#include "runtime/metrics/tensor_meter.h"
#include "runtime/models/model.h"
#include "runtime/precision/precision.h"
#include "runtime/train/parallel_engine.h"

namespace gtrain {

struct StepResult {
  int64_t step = 0;        // steps completed after this one
  double loss = NAN;       // mean per-sample loss over the global batch
  double grad_norm = NAN;  // global L2 norm before clipping
  double lr = 0;
  double seconds = 0;
  double data_wait_s = 0;   // time this step waited for batches
  bool skipped = false;     // fp16 overflow: no update
  bool values_read = true;  // false: loss and grad_norm stayed on the GPU (not logged this step)
  // CPU ranks, logged steps: the highest bytes of tensors the step allocated and had not yet freed
  // (activations, transient gradients, gathered parameters; TensorMeter). -1 = not measured.
  double tensor_peak_bytes = -1;
};

struct EvalResult {
  double loss = NAN;
  double accuracy = NAN;
  int64_t samples = 0;
  std::string stopped;  // evaluate(last_step_s >= 0): the stop the ranks agreed on mid-way ("" = none)
};

struct TrainSummary {
  int64_t steps = 0;        // steps done in the run (the step it ended at)
  int64_t stage_steps = 0;  // steps this stage ran
  double final_loss = NAN;
  EvalResult eval;
  double seconds = 0;
  double samples_per_s = 0;
  double data_wait_s = 0;
  double mfu = 0;                 // model FLOPs utilisation over the stage's steps (0: not known)
  bool stopped_early = false;     // a stage ended (signal or deadline) after saving: resumable
  bool already_complete = false;  // resumed at the last step: nothing ran, nothing was written
  std::string stop_reason;
  std::string stop_detail;  // a deadline's stop (rank 0): the time left and the lead it keeps
};

struct TrainerPaths {
  std::string metrics;          // metrics.jsonl ("" = none)
  std::string checkpoints;      // checkpoint directory ("" = no checkpoints)
  bool append_metrics = false;  // a resumed run appends to metrics.jsonl
};

// What one stage knows about its surroundings (set by the launcher before run()).
struct StageOptions {
  std::string ledger;           // stages.jsonl ("" = none)
  double deadline_unix = 0;     // stop early enough to save before this (0 = none)
  std::string deadline_source;  // "slurm end time", "--time-limit", "quota window"
  nlohmann::json allocation;    // scheduler, job id, world size: recorded in the ledger
  std::string save_token;       // same on every rank: names temporary checkpoint directories
  double load_seconds = 0;      // time spent resuming, recorded in the ledger
  double prepare_seconds = 0;   // text data found or prepared before the stage, recorded in the ledger
  nlohmann::json data_counts;   // conversations: what the rows kept and left out, recorded in the ledger
  std::string stop_file;        // the launcher writes it on a stop signal; rank 0 checks it each step
  int restarts = 0;             // times the launching gtrain restarted this stage's ranks so far
};

class Trainer {
 public:
  // `engine` synchronises gradients and steps the optimizer (data parallel, ZeRO, ...). The model
  // and engine already live on `device` (assemble_job puts them there); batches are moved to it.
  Trainer(const JobConfig& config, const Plan& plan, std::shared_ptr<Communicator> comm, std::shared_ptr<Model> model,
          DataSplits data, std::unique_ptr<ParallelEngine> engine, TrainerPaths paths,
          torch::Device device = torch::kCPU);
  ~Trainer();

  int64_t total_steps() const { return total_steps_; }
  int64_t steps_done() const { return step_; }
  StepResult train_step();
  // The held-out loss and accuracy. With `last_step_s` >= 0 (an evaluation between steps) the
  // ranks check for a stop signal or deadline after every round of batches and, when one is agreed,
  // stop there (EvalResult::stopped) so that a long evaluation never delays a stop.
  EvalResult evaluate(double last_step_s = -1);
  TrainSummary run();

  void set_stage(StageOptions stage) { stage_ = std::move(stage); }
  // Resident memory before the job was built; metrics then report the job's own peak on top of it.
  void set_memory_baseline(double bytes) { device_metrics_.set_memory_baseline(bytes); }
  // [adapter] kind = "lora": the frozen base's identity (CheckpointMeta::base_model), recorded in every
  // checkpoint and compared at resume.
  void set_base_model(nlohmann::json base) { base_model_ = std::move(base); }
  // [distill]: the teacher's identity (CheckpointMeta::teacher), recorded and checked like the base's.
  void set_teacher(nlohmann::json teacher) { teacher_ = std::move(teacher); }
  // Loads parameters, optimizer state and the step from a checkpoint written by any layout, and
  // checks the probe loss. Throws CheckpointError (changed model, global batch, probe mismatch).
  void resume(const std::string& checkpoint_path);
  // Saves a checkpoint now (asynchronously when configured); returns the training stall. When
  // `next_step_follows` (an interval save inside the training loop) an asynchronous save takes its
  // probe loss from the next step's own forward and writes the live tensors until that step's
  // optimizer update: the step pays neither a probe forward nor a copy of the state.
  double save_checkpoint_now(bool next_step_follows = false);
  // Waits for the save in flight.
  void finish_saves();
  // Loss of a fixed probe batch (eval mode, no dropout): the same model gives the same value on
  // any layout; recorded at save and checked after loading. The batch is the training windows
  // `indices`, by default probe_indices(): the first samples of the training order.
  double probe_loss(const std::vector<int64_t>& indices);
  // train.threads = 0 on a CPU rank: the stage's first steps try 1, 2, 4, ... up to `most` intra-op
  // threads and keep the fastest (runtime/train/thread_choice.h).
  void set_thread_tuning(int most, int local_ranks);
  std::vector<int64_t> probe_indices() const;
  // The dataset indices of the global batch of the step after `step` (0-based step `step`).
  std::vector<int64_t> step_batch_indices(int64_t step) const;
  // What each micro-batch's loss_sum is multiplied by in step `step` (0-based): 1 / the global batch
  // for data whose samples weigh alike; else the data's tokens per row (model.seq_len, by which the
  // models divide) over the summed weight of the step's samples (its trained targets), so the step's
  // loss is the mean over those targets on any layout. A pure function of (seed, step).
  double loss_multiplier(int64_t step) const;
  // The training loss of the step after `step` on the samples `indices` (its global batch), by
  // forward passes alone in training mode with the step's dropout masks: what a next-step probe
  // (CheckpointMeta::probe_step) recorded, computed again after loading. A collective.
  double next_step_probe_loss(const std::vector<int64_t>& indices, int64_t step);

  Model& model() { return *model_; }
  ParallelEngine& engine() { return *engine_; }
  const ParallelLayout& layout() const { return layout_; }

 private:
  void start_prefetch();
  // Whether step `step` (1-based, just done) logs or prints its values (and the first step): on CUDA
  // the loss and norm are read from the device only then, so other steps never wait for the GPU.
  bool values_needed(int64_t step) const;
  // Whether metrics.jsonl gets a train record for step `step` (1-based): the first, every
  // log.metrics_interval-th and the last.
  bool recorded_step(int64_t step) const;
  void log_step(const StepResult& r);
  // After a few settled steps: the median step against the planner's estimate, said once (and
  // recorded as an "estimate" record) when more than 25% apart.
  void check_estimate(const StepResult& r);
  std::vector<double> settled_steps_;  // step seconds after warm-up, until the check ran
  bool estimate_checked_ = false;
  void maybe_checkpoint(bool final);
  // Once, after the first step: the async writer maps its staging memory in the background.
  void prepare_saves();
  // "" = go on. Before the first step (before_first_step) only a deadline already past counts.
  std::string stop_check(double last_step_seconds, bool before_first_step = false);
  void write_ledger(const TrainSummary& s, int64_t first_step, double productive_s);
  // Whether metrics.jsonl holds the "final" record of this step (rank 0 reads, every rank learns).
  bool final_recorded();
  TrainSummary run_stage();  // run()'s loop; run() adds a ledger record when it throws
  // The evaluation every train.eval_interval steps, its record and line; returns the stop the ranks
  // agreed on mid-way ("" = none; else its eval_stopped record is written).
  std::string interval_evaluation(double last_step_s);
  // The final evaluation into `s.eval`, and its record.
  void final_evaluation(TrainSummary& s);
  double productive_s_ = 0;  // seconds of this stage spent in training steps
  std::string stop_detail_;  // why the deadline stops the stage now (rank 0; stop_check)
  // The keys whose values differ from the resumed checkpoint's ("section.key": [was, now]); the
  // trajectory's are named on the console, all go in the stage's ledger line.
  nlohmann::json config_changes_ = nlohmann::json::object();
  nlohmann::json base_model_;  // null unless LoRA
  nlohmann::json teacher_;     // null unless [distill]
  CheckpointMeta checkpoint_meta();

  JobConfig config_;
  Plan plan_;
  std::shared_ptr<Communicator> comm_;
  std::shared_ptr<Model> model_;
  DataSplits data_;
  TrainerPaths paths_;
  torch::Device device_{torch::kCPU};
  std::unique_ptr<ParallelEngine> engine_;
  std::unique_ptr<Precision> precision_;
  ParallelLayout layout_;  // the plan's factors the sampler and the loop use
  std::unique_ptr<SampleOrder> order_;
  std::unique_ptr<Prefetcher> prefetch_;
  std::unique_ptr<MetricsLog> metrics_;
  std::unique_ptr<Progress> progress_;
  std::unique_ptr<class StepProfiler> profiler_;  // log.profile_start: a few steps under the profiler
  int64_t total_steps_ = 0;
  int64_t step_ = 0;
  int64_t tokens_per_sample_ = 0;
  double data_wait_total_ = 0;
  std::chrono::steady_clock::time_point start_;
  StageOptions stage_;
  std::unique_ptr<class CheckpointWriter> writer_;
  double save_stall_total_ = 0, max_save_seconds_ = 0;
  bool saves_prepared_ = false;   // prepare_saves() ran
  int64_t last_saved_step_ = -1;  // the step of this stage's latest save (-1: none yet)
  // An asynchronous save's probe loss, awaited by its manifest: the next step's training loss, or
  // computed by finish_saves() when no step follows.
  std::unique_ptr<std::promise<double>> pending_probe_;
  void settle_pending_probe();
  nlohmann::json pending_resume_record_;  // the "resume" record, written when the stage starts
  double stage_start_unix_ = 0;
  DeviceMetrics device_metrics_;  // the memory and utilisation figures of train records
  TensorMeter tensor_meter_;      // CPU ranks: a logged step's transient tensors
  int64_t last_read_step_ = -1;   // CUDA: the last step whose values were read, and when
  std::chrono::steady_clock::time_point last_read_time_;
  std::unique_ptr<class ThreadTuner> thread_tuner_;  // set_thread_tuning; done once it has chosen
};

// Every rank's stop decision agreed on (the strongest reason wins; a collective over `comm`): ""
// = go on, else this rank's reason or the other ranks'. The trainer's check between steps and the
// start-up checks share it.
std::string agree_on_stop(const StopPolicy& policy, const StopPolicy::Decision& mine, Communicator& comm);

}  // namespace gtrain
