// parallel_engine.h: what the trainer needs from a parallel strategy (implemented in strategies/):
// gradients synchronised while backward runs, the global gradient norm, the (possibly sharded)
// optimizer step, and the optimizer state for checkpoints, keyed by parameter name.
#pragma once

#include <torch/torch.h>

#include "runtime/checkpoint/tensor_shard.h"
#include "runtime/models/keyed_dropout.h"
#include "runtime/models/token_layout.h"

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace gtrain {

class Model;
class Precision;

// A micro-batch on the device: ids and targets, and where packed rows' documents start and which
// targets count (undefined for plain rows); engines run its forward inside a TokenLayoutScope.
struct DeviceBatch {
  torch::Tensor input, target;
  TokenLayout layout;
};

// One optimizer step's micro-batches, as the trainer hands them to the engine.
struct MicroBatchWork {
  Model* model = nullptr;
  Precision* precision = nullptr;  // autocast scope for forward
  int64_t count = 1;               // micro-batches this step on this rank
  double inv_batch = 1.0;          // each micro-batch's loss_sum is multiplied by this (Trainer::loss_multiplier)
  double loss_scale = 1.0;         // fp16: backward runs on loss * loss_scale
  // The next micro-batch on the device. Every rank of a data-parallel replica (its tensor- and
  // pipeline-parallel ranks) gets the same samples.
  std::function<DeviceBatch()> next;
  // Dropout masks (runtime/models/keyed_dropout.h): micro-batch i holds global samples
  // first_samples[i], first_samples[i] + 1, ...; empty = the models' plain dropout.
  std::vector<int64_t> first_samples;
  uint64_t dropout_seed = 0;
  DropoutRows rows(int64_t i) const {
    if (i >= static_cast<int64_t>(first_samples.size())) return {};
    return DropoutRows{true, dropout_seed, first_samples[static_cast<size_t>(i)]};
  }
  // Bitwise mode (train.reproducible): the step's chunk count and the global chunk index of each of
  // this rank's micro-batches (count of them). Off: total_chunks = 0.
  int64_t total_chunks = 0;
  std::vector<int64_t> chunks;
  bool bitwise() const { return total_chunks > 0; }
  // Adds micro-batch i's loss to `acc`: a [1] sum, or in bitwise mode a [total_chunks] vector
  // holding each chunk's loss at its index (the trainer sums it in chunk order).
  void add_loss(torch::Tensor& acc, int64_t i, const torch::Tensor& loss) const;
};

// Bytes of training state one rank holds now, by kind (measured from the tensors, not estimated):
// on the parameters' device, and in host memory with optimizer offload.
struct StateBytes {
  double params = 0;     // parameters resident (ZeRO-3 between uses: the owned chunks)
  double grads = 0;      // flat gradient buffers, shards and accumulators
  double optimizer = 0;  // optimizer moments / momentum
  double host = 0;       // offload: master chunk, gradient copy and optimizer state in host memory
};

class ParallelEngine {
 public:
  virtual ~ParallelEngine() = default;

  // Forward and backward of one step's micro-batches (calls zero_grad is the caller's job; this
  // calls begin_micro_batch and end_backward). Returns this rank's share of the step's loss as a
  // [1] double tensor: the sum over every rank of the job is the loss of the global batch (ranks
  // whose loss another rank reports return zero). Default: the micro-batches one after another.
  virtual torch::Tensor run_micro_batches(const MicroBatchWork& work);
  // Evaluation forward of a batch: the model's output, or an undefined tensor on ranks that hold
  // no output (pipeline stages before the last). Default: model.forward(input).
  virtual torch::Tensor forward_only(Model& model, const torch::Tensor& input);
  // Whether this rank's output and loss count in sums over ranks (false on all but one rank of a
  // tensor-parallel group, and on pipeline stages before the last).
  virtual bool reports_loss() const { return true; }
  // Whether this rank computes the training loss: every rank but a pipeline's earlier stages.
  virtual bool computes_loss() const { return true; }
  // Whether forward_only is a collective over the data-parallel ranks (ZeRO-3 gathers parameters):
  // then every replica calls it equally often, with an empty share if need be.
  virtual bool collective_forward() const { return false; }
  // Index of this rank's data-parallel replica (which slice of the global batch it reads).
  virtual int64_t dp_rank() const = 0;

  // Whether the engine implements bitwise mode (MicroBatchWork::total_chunks > 0).
  virtual bool supports_bitwise() const { return false; }
  // At the start of run_micro_batches: the step's work (bitwise mode's chunks). Default: nothing.
  virtual void prepare_step(const MicroBatchWork&) {}
  // After each micro-batch's backward (bitwise mode: its gradients join the canonical sum).
  virtual void end_micro_batch() {}

  // Before the first micro-batch of a step.
  virtual void zero_grad() = 0;
  // Before each micro-batch's backward; `last` enables communication (none on earlier ones).
  virtual void begin_micro_batch(bool last) = 0;
  // After the last micro-batch's backward: waits for communication; gradients are final.
  virtual void end_backward() = 0;
  // fp16: multiplies gradients by `inv_scale`; false (and no change) if any is inf/nan on any rank.
  virtual bool unscale_gradients(double inv_scale) = 0;
  // Global L2 norm of the gradients.
  virtual double grad_norm() = 0;
  // Scales gradients by `grad_coef` (clipping) and applies the optimizer with learning rate `lr`.
  virtual void step(double lr, double grad_coef) = 0;
  // Global norm, clipping to `clip` (0 = none: coefficient min(1, clip / (norm + 1e-6))) and the
  // step. Returns the norm before clipping as a [1] double tensor on the engine's device; engines on
  // CUDA keep it there, so the host does not wait for the GPU until someone reads it. Default:
  // grad_norm(), then step().
  virtual torch::Tensor clip_and_step(double lr, double clip);

  // This rank's pieces of the parameters and optimizer state (names: parameter names, and
  // "<param>.exp_avg", "<param>.exp_avg_sq", "<param>.momentum_buffer", "optimizer.step"). Not a
  // collective: each rank writes its own pieces, nothing is gathered.
  virtual std::vector<TensorShard> state_shards() = 0;
  // Sets parameters and optimizer state from global tensors, each rank taking the part it holds
  // in the current layout (any dp / ZeRO stage / tp / pp the checkpoint was written with).
  virtual void load_state(const GlobalTensorReader& read) = 0;

  // The frozen parameters this rank holds (LoRA's base: no gradient, no optimizer state, not in
  // state_shards, so checkpoints hold what trains): names and global shapes. Default: none.
  virtual std::vector<std::pair<std::string, std::vector<int64_t>>> frozen_parameters() const { return {}; }
  // Sets them from global tensors (checkpoint.init_from), each rank taking its part. Default: nothing.
  virtual void load_frozen(const GlobalTensorReader&) {}

  virtual std::string describe() const = 0;
  // What the engine holds now (metrics.jsonl's param_mb, grad_mb, opt_state_mb, host_state_mb).
  virtual StateBytes state_bytes() const { return {}; }
};

}  // namespace gtrain
