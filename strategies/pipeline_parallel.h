// pipeline_parallel.h: pipeline parallelism: the model's blocks split into contiguous stages
// (balanced by cost), micro-batches run through the stages with the 1F1B or GPipe schedule,
// activations and their gradients passed with send/recv over the pipeline communicator.
//
// Protocol per optimizer step (run_micro_batches), on stage s of pp with m micro-batches:
//  1. Every stage reads the same m micro-batches (its replica's slice): stage 0 embeds the inputs,
//     the last stage uses the targets; each micro-batch's activation shape follows from its input
//     (with uneven replica shares the micro-batches of a step can differ by one sample).
//  2. 1F1B: min(pp - s - 1, m) warm-up forwards, then alternate one forward and one backward
//     (exchanging with the neighbour through send_recv, so no pair of stages can deadlock), then
//     the remaining backwards. GPipe: all m forwards, then all m backwards.
//  3. Gradients accumulate in the parameters; after the last backward a weight tied between the
//     first and last stage (the token embedding) has its gradient summed over those two stages,
//     then the data-parallel engine of the stage's parameters reduces over dp (ZeRO-1/2 apply).
//  4. The loss is computed on the last stage and reported by its tensor-parallel rank 0.
#pragma once

#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/config/parallel_config.h"
#include "strategies/data_parallel.h"
#include "strategies/planner/stage_split.h"
#include "strategies/process_groups.h"

namespace gtrain {

struct PipelineOptions {
  PpSchedule schedule = PpSchedule::one_f_one_b;  // parallel.pp_schedule
};

// Predicted idle fraction of a pipeline step: (pp - 1) / (m + pp - 1).
double pipeline_bubble_fraction(int64_t pp, int64_t micro_batches);

class PipelineEngine : public ParallelEngine {
 public:
  // Keeps this stage's parameters of `model` (others are released); `stage_bounds` from balance_stages.
  PipelineEngine(const ProcessGroups& groups, std::shared_ptr<Model> model, std::vector<int64_t> stage_bounds,
                 DataParallelOptions dp_options, PipelineOptions options);

  torch::Tensor run_micro_batches(const MicroBatchWork& work) override;
  torch::Tensor forward_only(Model& model, const torch::Tensor& input) override;
  bool reports_loss() const override { return last_ && groups_.tp_rank == 0; }
  bool computes_loss() const override { return last_; }
  int64_t dp_rank() const override { return groups_.dp_rank; }

  bool supports_bitwise() const override { return dp_->supports_bitwise(); }
  void zero_grad() override { dp_->zero_grad(); }
  void begin_micro_batch(bool) override { dp_->begin_micro_batch(false); }
  void end_backward() override;
  bool unscale_gradients(double inv_scale) override { return dp_->unscale_gradients(inv_scale); }
  double grad_norm() override { return dp_->grad_norm(); }
  void step(double lr, double grad_coef) override { dp_->step(lr, grad_coef); }
  std::vector<TensorShard> state_shards() override { return dp_->state_shards(); }
  void load_state(const GlobalTensorReader& read) override { dp_->load_state(read); }
  std::vector<std::pair<std::string, std::vector<int64_t>>> frozen_parameters() const override {
    return dp_->frozen_parameters();
  }
  void load_frozen(const GlobalTensorReader& read) override { dp_->load_frozen(read); }
  StateBytes state_bytes() const override { return dp_->state_bytes(); }
  std::string describe() const override;

  int64_t first_block() const { return begin_; }
  int64_t end_block() const { return end_; }
  // Seconds this rank spent waiting in send/recv during the last run_micro_batches, and in all.
  double last_comm_wait_s() const { return comm_wait_s_; }
  double last_step_s() const { return step_s_; }

 private:
  torch::Tensor stage_forward(const torch::Tensor& input, const torch::Tensor& received);
  // Receives a tensor of `shape` from pipeline rank `peer` (an activation from the stage before,
  // or a gradient from the stage after), counting the wait.
  torch::Tensor recv_from(const std::vector<int64_t>& shape, int64_t peer);
  // Backward of the oldest of the `pending` micro-batches (stage input, stage output), which it
  // leaves; `grad` is its output's gradient from the next stage (undefined on the last). Returns
  // the gradient for the previous stage (undefined on the first).
  torch::Tensor backward_oldest(std::deque<std::pair<torch::Tensor, torch::Tensor>>& pending,
                                const torch::Tensor& grad);

  ProcessGroups groups_;
  std::shared_ptr<Model> model_;
  int64_t begin_ = 0, end_ = 0;
  bool first_ = false, last_ = false;
  PipelineOptions opt_;
  std::unique_ptr<DataParallelEngine> dp_;
  std::vector<torch::Tensor> tied_;      // parameters held by the first and the last stage
  std::vector<std::string> tied_names_;  // their names
  // Bitwise mode: each chunk's tied gradient is the first stage's part plus the last stage's, added
  // on the first stage before the chunk joins the canonical sum (the last stage's part is sent as
  // soon as its backward ends: the first stage's backward of the chunk comes later); after the step
  // the first stage sends the reduced gradient back to the last.
  void exchange_tied_chunk();
  void finish_tied_bitwise();
  std::vector<std::shared_ptr<Work>> tied_sends_;
  bool bitwise_ = false;                                                         // this step runs in bitwise mode
  std::shared_ptr<Communicator> tied_comm_;                                      // {first, last} stage of this pipeline
  torch::TensorOptions act_opts_ = torch::TensorOptions().dtype(torch::kFloat);  // float on the stage's device
  double comm_wait_s_ = 0, step_s_ = 0;
};

}  // namespace gtrain
