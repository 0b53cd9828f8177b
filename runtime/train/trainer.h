// trainer.h: the training loop run by every rank: micro-batches with gradient accumulation to the
// exact global batch, gradient averaging over data-parallel ranks, clipping, LR schedule, optimizer
// step, periodic evaluation, metrics and checkpoints.
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <string>

#include "runtime/comm/communicator.h"
#include "runtime/config/job_config.h"
#include "runtime/data/dataset.h"
#include "runtime/data/prefetcher.h"
#include "runtime/data/sampler.h"
#include "runtime/metrics/metrics_log.h"
#include "runtime/metrics/progress.h"
#include "runtime/models/model.h"
#include "runtime/precision/precision.h"
#include "runtime/train/parallel_engine.h"
#include "strategies/plan.h"

namespace gtrain {

struct StepResult {
  int64_t step = 0;          // steps completed after this one
  double loss = NAN;         // mean per-sample loss over the global batch
  double grad_norm = NAN;    // global L2 norm before clipping
  double lr = 0;
  double seconds = 0;
  double data_wait_s = 0;    // time this step waited for batches
  bool skipped = false;      // fp16 overflow: no update
};

struct EvalResult {
  double loss = NAN;
  double accuracy = NAN;
  int64_t samples = 0;
};

struct TrainSummary {
  int64_t steps = 0;
  double final_loss = NAN;
  EvalResult eval;
  double seconds = 0;
  double samples_per_s = 0;
  double data_wait_s = 0;
};

struct TrainerPaths {
  std::string metrics;      // metrics.jsonl ("" = none)
  std::string checkpoints;  // checkpoint directory ("" = no checkpoints)
};

class Trainer {
 public:
  // `engine` synchronises gradients and steps the optimizer (data parallel, ZeRO, ...).
  Trainer(const JobConfig& config, const Plan& plan, std::shared_ptr<Communicator> comm,
          std::shared_ptr<Model> model, DataSplits data, std::unique_ptr<ParallelEngine> engine, TrainerPaths paths);
  ~Trainer();

  int64_t total_steps() const { return total_steps_; }
  int64_t steps_done() const { return step_; }
  StepResult train_step();
  EvalResult evaluate();
  TrainSummary run();

  Model& model() { return *model_; }
  ParallelEngine& engine() { return *engine_; }
  const BatchLayout& layout() const { return layout_; }

 private:
  void start_prefetch();
  void log_step(const StepResult& r);
  void maybe_checkpoint(bool final);

  JobConfig config_;
  Plan plan_;
  std::shared_ptr<Communicator> comm_;
  std::shared_ptr<Model> model_;
  DataSplits data_;
  TrainerPaths paths_;
  torch::Device device_{torch::kCPU};
  std::unique_ptr<ParallelEngine> engine_;
  std::unique_ptr<Precision> precision_;
  BatchLayout layout_;
  std::unique_ptr<SampleOrder> order_;
  std::unique_ptr<Prefetcher> prefetch_;
  std::unique_ptr<MetricsLog> metrics_;
  std::unique_ptr<Progress> progress_;
  int64_t total_steps_ = 0;
  int64_t step_ = 0;
  int64_t tokens_per_sample_ = 0;
  double data_wait_total_ = 0;
  std::chrono::steady_clock::time_point start_;
};

// Optimizer steps a config asks for (train.steps, or epochs / tokens rounded up).
int64_t compute_total_steps(const TrainConfig& t, int64_t train_size, int64_t tokens_per_sample);

}  // namespace gtrain
