// data_parallel.h: data parallelism with gradient buckets all-reduced while backward runs, ZeRO
// stage 1 (optimizer state sharded over dp ranks), stage 2 (+ gradients reduce-scattered), stage 3
// (+ parameters sharded, gathered one block at a time), and the optimizer offloaded to the host.
//
// Protocol per optimizer step:
//  1. zero_grad(); for each micro-batch: begin_micro_batch(last), forward, backward.
//  2. Earlier micro-batches accumulate into flat per-bucket accumulators (param.grad is a view). On
//     the last one, param.grad starts empty, so autograd hands over the fresh gradient without
//     adding it anywhere, and a hook after each parameter's gradient accumulation writes it (plus
//     the accumulator, if earlier micro-batches ran) into its bucket and drops it: one pass over
//     the gradients when there is one micro-batch. A full bucket starts, in bucket order, a
//     non-blocking all-reduce (stage 0/1) or
//     reduce-scatter (stage 2) that proceeds while backward goes on (later hooks drive MPI's
//     progress; NCCL runs on its own stream). No thread spins on a CPU core meanwhile.
//  3. end_backward() waits for every bucket. Each rank then updates the part it owns (everything
//     for stage 0; its 1/dp chunk of every bucket for stages 1 and 2) and, for stages 1 and 2,
//     all-gathers the updated chunks so every rank holds the full parameters again.
// ZeRO-3 (data_parallel_zero3.cpp) replaces steps 1 and 3: a bucket is one block's parameters (one
// "unit"; the parameters outside the blocks form one more, gathered for the whole micro-batch), and
// between uses only this rank's 1/dp chunk of it exists. The engine drives the model through its
// block interface (Model::pipeline_embed / pipeline_block / pipeline_head_loss_sum): block i's
// parameters are all-gathered before its forward (block i+1's gather is started meanwhile), freed
// after it, gathered again when backward reaches the block's output (block i-1's prefetched), and
// freed once every gradient of the block has arrived, when the block's gradients are
// reduce-scattered. Gradients are reduce-scattered after every micro-batch and summed into the
// owned chunk, so no rank ever holds a whole model's gradients (DeepSpeed's choice; FSDP's no_sync
// would keep them whole across micro-batches): each micro-batch costs one gather in forward, one in
// backward and one reduce-scatter per block. The step updates the owned chunk only; the next
// forward's gathers deliver it. Freed parameters keep their shape with an empty storage (FSDP's
// resize_(0)), so the tensors autograd saved in forward see the gathered values again in backward.
// Offload (any stage): the fp32 master chunk and the optimizer state live in host memory (pinned
// with CUDA), gradients are copied there, the step runs on the CPU (ATen's threads), and the updated
// chunk is copied back to the device. On CPU ranks the same copies run between host tensors.
// Parameters live in per-bucket flat buffers (each parameter is a view), padded to a multiple of
// dp so chunks are equal; the optimizer (AdamW or SGD, same arithmetic as torch::optim) runs on
// flat chunks. Buffers live on the parameters' device. On CUDA the step is device-only (the norm,
// the clipping coefficient and the update never wait on the host), and AdamW is one fused kernel
// per weight-decay class (at::_fused_adamw_ over the owned parameter ranges) where LibTorch has it.
#pragma once

#include <map>
#include <memory>
#include <set>

#include "runtime/comm/communicator.h"
#include "runtime/core/config/optimizer_config.h"
#include "runtime/models/model.h"
#include "runtime/train/parallel_engine.h"
#include "strategies/reproducible.h"

namespace gtrain {

struct DataParallelOptions {
  int64_t zero_stage = 0;          // 0, 1, 2 or 3
  bool offload_optimizer = false;  // master weights, optimizer state and the step on the host
  // ZeRO-3: the parameter names of each block, in forward order (Model::blocks()); parameters in
  // none of them form the outer unit. Empty: the whole model is one unit.
  std::vector<std::vector<std::string>> units;
  int64_t bucket_bytes = 25 << 20;  // gradient bucket size
  OptimizerConfig optimizer;
  // With tensor / pipeline parallel (the engine then runs over one replica's dp group):
  std::map<std::string, TensorPlacement> placements;  // parameters that are slices of a larger tensor
  std::set<std::string> mirrored;            // held and counted by another rank of the replica too (tp replicas,
                                             // the tied embedding on the last stage): left out of the norm, not written
  std::shared_ptr<Communicator> model_comm;  // the replica's tp x pp ranks: norm and overflow are summed over it
  bool reports_loss = true;                  // see ParallelEngine::reports_loss
  // The step CUDA parameters take (device-side norm and clipping divisor, fused AdamW where LibTorch
  // has the kernel for the device) on CPU parameters too; CPU runs otherwise keep the host-side
  // arithmetic of ParallelEngine::clip_and_step. Tests use it to run the CUDA step's logic on CPU.
  bool device_step = false;
  // train.reproducible = "bitwise" (data_parallel_bitwise.cpp): each micro-batch is one chunk of the
  // step; its gradients go, a slice to each rank (all-to-all), into a canonical tree over the
  // step's chunks (strategies/reproducible.h) instead of being summed by MPI's or NCCL's algorithm.
  bool bitwise = false;
};

class DataParallelEngine : public ParallelEngine {
 public:
  // `params` in registration order with their names. Broadcasts rank 0's values to every rank.
  DataParallelEngine(std::shared_ptr<Communicator> dp_comm, std::vector<std::pair<std::string, torch::Tensor>> params,
                     DataParallelOptions options);
  ~DataParallelEngine() override;

  void zero_grad() override;
  void begin_micro_batch(bool last) override;
  void end_backward() override;
  bool unscale_gradients(double inv_scale) override;
  double grad_norm() override;
  void step(double lr, double grad_coef) override;
  torch::Tensor clip_and_step(double lr, double clip) override;
  std::vector<TensorShard> state_shards() override;
  void load_state(const GlobalTensorReader& read) override;
  std::vector<std::pair<std::string, std::vector<int64_t>>> frozen_parameters() const override;
  void load_frozen(const GlobalTensorReader& read) override;
  std::string describe() const override;
  int64_t dp_rank() const override { return comm_->rank(); }
  // ZeRO-3: the micro-batches and evaluation forwards run block by block, gathering parameters.
  torch::Tensor run_micro_batches(const MicroBatchWork& work) override;
  torch::Tensor forward_only(Model& model, const torch::Tensor& input) override;
  bool collective_forward() const override { return opt_.zero_stage == 3 && comm_->size() > 1; }
  bool reports_loss() const override { return opt_.reports_loss; }
  bool supports_bitwise() const override { return opt_.bitwise; }
  void prepare_step(const MicroBatchWork& work) override;
  void end_micro_batch() override;

  // Bitwise mode, for the pipeline's tied weight. The gradient of parameter `name` in the micro-batch
  // whose backward just ran (a view: changes go into the chunk's sum).
  torch::Tensor chunk_grad(const std::string& name);
  // After end_backward: the step's reduced gradient of `name`, whole (a collective over the dp ranks
  // when ZeRO shards it), and the reverse: sets this rank's part of it from the whole.
  torch::Tensor reduced_grad(const std::string& name);
  void set_reduced_grad(const std::string& name, const torch::Tensor& whole);

  int64_t num_buckets() const { return static_cast<int64_t>(buckets_.size()); }
  // Whether steps use the fused AdamW kernel (optimizer adamw and optimizer.fused, and CUDA
  // parameters with LibTorch >= 2.1, or device_step on CPU with LibTorch >= 2.4).
  bool fused_adamw() const { return fused_; }
  // Elements of optimizer state this rank holds per moment (shrinks with ZeRO).
  int64_t owned_elements() const;
  StateBytes state_bytes() const override;

 private:
  struct Segment {
    int64_t param;   // index into params_
    int64_t offset;  // within the bucket
    int64_t numel;
  };
  struct Bucket {
    std::vector<Segment> segments;
    int64_t numel = 0, padded = 0, chunk = 0;  // chunk = padded / owners
    torch::Tensor param;                       // [padded] flat parameters (each parameter is a view)
    torch::Tensor grad;                        // [padded] reduced gradients (stage 2: only while in flight)
    // [numel] what autograd accumulates each parameter's gradient into before the last
    // micro-batch (param.grad is a view): allocated once, at the first step that has more than one
    // micro-batch, so backward does not leave per-parameter tensors between its activations.
    torch::Tensor accum;
    torch::Tensor grad_shard;  // stage 2: [chunk] this rank's reduced gradients
    // Ranges [begin, end) of the owned chunk: elements with weight decay (matrices), and elements
    // left out of the gradient norm (mirrored). Ranges, not [chunk] masks: no memory per element.
    std::vector<std::pair<int64_t, int64_t>> decayed, mirrored;
    torch::Tensor exp_avg, exp_avg_sq, momentum;  // [chunk] optimizer state (host memory with offload)
    // Offload: the fp32 master chunk and the owned gradients on the host ([chunk] each).
    torch::Tensor host_param, host_grad;
    // ZeRO-3: this rank's [chunk] of the unit's parameters (the master copy without offload); `param`
    // holds the whole unit only while gathered (an empty storage otherwise).
    torch::Tensor shard;
    int64_t unit = -1;                  // ZeRO-3: the block it holds, -1 the outer unit
    bool gathered = true;               // ZeRO-3: `param` holds the unit's values
    std::shared_ptr<Work> gather_work;  // ZeRO-3: the all-gather in flight
    torch::Tensor reduced;              // ZeRO-3: [chunk] this micro-batch's reduce-scatter output
    // Bitwise mode: [padded] this chunk's all-to-all output (row r: rank r's chunk, this rank's
    // slice), and the canonical sum of this rank's slice over the step's chunks.
    torch::Tensor rows;
    ChunkTree tree;
    int64_t ready = 0;           // parameters whose gradient arrived this step
    std::shared_ptr<Work> work;  // the collective in flight this step
    // Fused AdamW: owned element ranges [begin, begin + length) of the chunk with weight decay
    // (index 1) and without (index 0).
    std::vector<std::pair<int64_t, int64_t>> ranges[2];
  };

  // ZeRO-3 with a frozen base (LoRA): a unit's frozen parameters of one dtype in a flat buffer,
  // sharded and gathered with the unit's bucket, never reduced or stepped.
  struct FrozenUnit {
    int64_t unit = -1;  // the block, -1 the outer unit
    std::vector<Segment> segments;
    int64_t numel = 0, padded = 0, chunk = 0;
    torch::Tensor param;  // [padded] the unit's values while gathered (each parameter a view)
    torch::Tensor shard;  // [chunk] this rank's part
    bool gathered = true;
    std::shared_ptr<Work> gather_work;
  };

  // After autograd accumulated parameter i's gradient (a post hook on its AccumulateGrad node).
  void on_gradient(int64_t param_index);
  void launch_ready_buckets();  // in bucket order
  void progress();              // lets in-flight collectives advance
  torch::Tensor owned_grad(Bucket& b);
  // Bitwise mode (data_parallel_bitwise.cpp).
  bool bitwise() const { return opt_.bitwise && total_chunks_ > 0; }
  void begin_chunk();                               // fresh gradient buffers for the next chunk
  void exchange_round(bool have_chunk);             // ZeRO 0-2: the round's all-to-all, rows into the trees
  std::shared_ptr<Work> start_exchange(Bucket& b);  // b.grad -> b.rows
  void push_rows(Bucket& b);                        // this round's chunks of b.rows into b.tree
  void finish_bitwise();                            // the trees' sums become the step's gradients
  int64_t param_index(const std::string& name) const;
  torch::Tensor grad_norm_tensor();  // [1] double on the device, summed over ranks
  // CUDA: divisor undefined = 1; with `norm` defined, gtrain's AdamW kernel derives it from norm and clip.
  void step_on_device(double lr, const torch::Tensor& grad_divisor, const torch::Tensor& norm = {}, double clip = 0);
  // Zeroes the accumulators and points every parameter's .grad at its slice of them.
  void attach_accumulators();
  // Parameter i's segment of its bucket's `grad` and `accum`.
  const Segment& segment(int64_t i) const;
  // Appends segment s's part of this rank's chunk (chunk coordinates) to `ranges`, merging neighbours.
  void add_owned_range(const Bucket& b, std::vector<std::pair<int64_t, int64_t>>& ranges, const Segment& s) const;
  // The chunk the optimizer updates: the host master with offload, the shard with ZeRO-3, else the
  // owned part of the flat parameters.
  torch::Tensor owned_param(Bucket& b) {
    if (b.host_param.defined()) return b.host_param;
    if (b.shard.defined()) return b.shard;
    return b.param.narrow(0, owner_rank_ * b.chunk, b.chunk);
  }
  // This rank's chunk of the parameters on their device.
  torch::Tensor owned_param_on_device(Bucket& b) {
    return b.shard.defined() ? b.shard : b.param.narrow(0, owner_rank_ * b.chunk, b.chunk);
  }
  // After the update of owned_param(b): the device copy (offload) and every rank's full parameters
  // (stages 1, 2: all-gather; stage 3 gathers before the next use).
  void publish(Bucket& b);
  // ZeRO-3 (data_parallel_zero3.cpp).
  void build_units();  // buckets from opt_.units, and the unit map
  // The frozen units of a unit map (unit_of[i]: parameter i's unit), their values flattened and sharded.
  void build_frozen_units(const std::vector<int64_t>& unit_of);
  void frozen_gather(int64_t unit, bool wait);  // starts (and with `wait` finishes) unit's frozen gathers
  void frozen_release(int64_t unit);
  void start_gather(int64_t bucket);   // allocates the unit's storage and starts its all-gather
  void wait_gathered(int64_t bucket);  // start_gather if needed, then waits
  // Frees the unit's gathered storage; with `frozen`, its frozen parameters' too (not when its
  // gradients are in: backward may still read frozen weights for the input's gradient).
  void release(int64_t bucket, bool frozen = true);
  void finish_reductions(bool all);    // folds completed reduce-scatters into grad_shard
  void finish_micro_batch(bool last);  // zero gradients for unused parameters, waits, releases
  // The model's loss_sum of (input, target) (target null: its output, evaluation), block by block.
  torch::Tensor forward_units(Model& model, const torch::Tensor& input, const torch::Tensor* target);
  int64_t bucket_of_unit(int64_t unit) const { return unit_bucket_.at(static_cast<size_t>(unit + 1)); }
  int64_t num_units() const { return static_cast<int64_t>(unit_bucket_.size()) - 1; }  // blocks
  // Shards of elements [begin, begin + data.numel()) of parameter i's local flattening.
  void add_shards(std::vector<TensorShard>& out, int64_t i, const std::string& name, int64_t begin,
                  const torch::Tensor& data, bool write) const;
  // Parameter i's local part of a global tensor.
  torch::Tensor local_part(int64_t i, const torch::Tensor& global) const;

  std::shared_ptr<Communicator> comm_;
  std::vector<std::pair<std::string, torch::Tensor>> params_;
  std::vector<int64_t> bucket_of_;  // param index -> bucket
  std::vector<bool> got_grad_;
  std::vector<Bucket> buckets_;
  std::vector<FrozenUnit> frozen_;  // ZeRO-3 with frozen parameters
  DataParallelOptions opt_;
  int64_t owners_ = 1, owner_rank_ = 0;  // ranks that share optimizer state, and ours
  int64_t step_count_ = 0;
  bool sync_ = false;
  // A micro-batch before the last one ran this step: the accumulators hold its gradients (the last
  // micro-batch runs with .grad detached from them).
  bool accumulated_ = false;
  // AccumulateGrad nodes of the parameters with the key of the hook on each: held so that the
  // hooks outlive each graph, and removed with the engine.
  using NodePtr = decltype(torch::autograd::impl::grad_accumulator(std::declval<const torch::Tensor&>()));
  std::vector<std::pair<NodePtr, uintptr_t>> accumulators_;
  int64_t next_launch_ = 0;
  torch::TensorOptions fopts_ = torch::TensorOptions().dtype(torch::kFloat);  // float on the parameters' device
  bool fused_ = false;
  torch::Tensor fused_step_;          // fused AdamW: the step count as a float scalar on the device
  std::vector<int64_t> unit_bucket_;  // ZeRO-3: [0] the outer unit's bucket, [1 + i] block i's
  bool first_reduction_ = true;       // ZeRO-3: no micro-batch of this step reduced yet
  torch::TensorOptions hopts_;        // offload: float on the host (pinned with CUDA)
  // Bitwise mode: the step's chunks, exchange rounds (the most chunks a rank runs), rounds done, and
  // whether a chunk's gradients are being collected.
  int64_t total_chunks_ = 0, rounds_ = 0, round_ = 0;
  bool chunk_open_ = false;
};

}  // namespace gtrain
