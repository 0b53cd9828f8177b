// cost_model.h: memory per device and time per global batch of one parallel layout, from the
// model's sizes, the optimizer, the precision, the hardware profile and the node topology.
//
// Memory per device (the most loaded pipeline stage):
//   params     fp32 master weights of this stage / tp (+ a 16-bit autocast copy in bf16/fp16)
//   grads      fp32 gradient buckets, / dp under ZeRO-2
//   grad_accumulators  autograd's per-parameter fp32 gradients (4 B/param) before the engine
//              copies them into the buckets, and with more than one micro-batch a step the flat
//              accumulators they are summed into
//   optimizer  AdamW 8 B/param, SGD momentum 4 B/param, / dp under ZeRO-1, 2 and 3
//   ZeRO-3     params: 4 B/param / dp (the owned chunk), plus autocast's 16-bit copies of every
//              block's weights held for backward (of the gathered blocks only, with recompute);
//              grads: 4 B/param / dp (the owned chunk, filled as units finish); gathered: the
//              whole outer unit (embedding, final norm, head) and one block, gathered when
//              backward starts, the step's peak (measured: tests/test_memory_components.cpp)
//   offload    the optimizer state, the fp32 master chunk and a gradient copy (8 B/param / dp) live
//              in host memory: `host` on a GPU; on a CPU the same memory, counted in `optimizer`
//   activations  per sample x micro_batch x micro-batches in flight (1F1B: stage 0 holds
//              min(pp, grad_accum)); transformers use the per-block formula split by tp
//   workspace  the profile's reserve + fragmentation x what each step allocates and frees
//              (activations and accumulators; the flat buffers are allocated once, at build)
//   build      CPU, while a tp or pp rank builds: the whole model in fp32 before it keeps its
//              part (returned once split); the total is the larger of this and the training sum
// Time per global batch (seconds), on the replica with the largest share of the batch (uneven
// shares: the slowest replica sets the step, the others wait at the gradient reduction):
//   (grad_accum + pp - 1) x per-micro-batch stage time (compute + kernel overhead + TP allreduces
//   + PP sends), so the pipeline bubble is (pp-1)/(grad_accum+pp-1) of it; plus the DP gradient
//   allreduce not hidden behind the last backward (ZeRO-2 reduce-scatters every micro-batch),
//   ZeRO's parameter all-gather, and the optimizer step (memory bound). ZeRO-3 gathers every block
//   twice per micro-batch (forward, backward) and reduce-scatters its gradients once, prefetched
//   behind the forward and backward compute; offload adds the gradient and parameter copies over
//   the host link and steps at the host's memory rate.
//
// LoRA (CostModelInput::adapter): the base's weights are frozen (`frozen`: 4 or 2 B/param of the
// stage / tp, / dp under ZeRO-3 with the gathered outer unit and block in that dtype as above; an
// fp32 base under bf16/fp16 autocast adds its 16-bit copies, 2 B/param, held for the input
// gradients), with no gradients, gradient accumulators or optimizer state. The adapters are fp32
// and train as every parameter does above (params, grads, accumulators, optimizer, ZeRO sharding
// and offload over the adapters only); tensor parallel splits B of a column-split projection and A
// of a row-split one, the other matrix is whole on every rank. Activations: as full training (each adapter's input x is
// kept anyway for its A's gradient), plus per block and token the rank-wide products A x of each
// target (rank x targets), and with adapter dropout the dropped inputs (the targets' input widths);
// the fused output layer makes no weight gradient for the frozen head.
// Time: the forward of full training plus the adapters' (2 FLOPs a parameter a token); backward
// without the frozen weights' weight-gradient matmuls, one third of the matmul FLOPs (2 of the
// 6 x params a token; attention's score matmuls keep both of theirs), plus the adapters' 4; the
// optimizer step and the gradient path over the adapters only; the dp gradient reduction over the
// adapters' 4 B/param (ZeRO-3 still gathers the frozen base: base bytes + 4 B/param of adapters).
// A per-thread calibrated CPU scales its block timing by the same ratio of FLOPs.
// Teacher (CostModelInput::teacher, distillation): its frozen weights in its dtype on the last
// pipeline stage (the only one computing the loss) / tp (/ dp under ZeRO-3 when
// ParallelLayout::shard_teacher, plus a gathered block and its outer unit while it runs); one
// micro-batch of its forward at a time (no backward): one block's working set and the residual
// stream in its dtype and its gathered units, counted where they exceed what the student's step
// holds at its peak (the teacher runs before the student's forward), plus its fp32 logits [T, V]
// kept for the loss (under tp gathered whole, beside the student's gathered logits); time: its
// forward FLOPs (a third of its training FLOPs: 2 x params a token plus attention; with pp all of
// them on the last stage, which then sets the pace) and, sharded under ZeRO-3, gathering its units
// each micro-batch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/model_stats.h"
#include "runtime/core/parallel_layout.h"
#include "strategies/planner/hardware_profile.h"

namespace gtrain {

struct Topology {
  int64_t world = 1;
  int64_t gpus_per_node = 1;  // devices per node (tp groups stay within one)
  int64_t nodes = 1;
};

// LoRA: the base model frozen, low-rank adapters trained (adapter_shapes.h counts them).
struct AdapterCost {
  int64_t params = 0;            // adapter parameters of the model (0: no adapters, every parameter trains)
  int64_t params_per_block = 0;  // of them in one block (adapters sit in the blocks only)
  double base_bytes = 4.0;       // bytes of one frozen base weight: 4 (fp32) or 2 (bf16)
  double rank_elements = 0;      // per block and token: the products A x kept for backward (rank x targets)
  double dropout_elements = 0;   // per block and token: dropped adapter inputs kept (0 without adapter dropout)
  // Of params_per_block, those every tensor-parallel rank holds whole: A of a column-split
  // projection (its input is whole) and B of a row-split one (its output is); the rest splits by tp.
  double tp_whole_per_block = 0;
  bool enabled() const { return params > 0; }
};

// A frozen teacher model (distillation) running on the same ranks before the student.
struct TeacherCost {
  ModelStats model;    // its sizes at the student's sequence length (params = 0: no teacher)
  double bytes = 4.0;  // bytes of one teacher weight and activation element (its dtype)
  // Under ZeRO-3 (dp >= 2): "auto" = the planner holds it whole where that fits and shards it over
  // dp where only that fits (ParallelLayout::shard_teacher), "zero3" = always sharded, "whole" = never.
  std::string sharding = "auto";
  bool enabled() const { return model.params > 0; }
};

struct CostModelInput {
  ModelStats model;  // the (base) model; its params all train unless `adapter` is set
  AdapterCost adapter;
  TeacherCost teacher;
  std::string optimizer = "adamw";  // adamw | sgd
  double momentum = 0.9;            // sgd: state only when > 0
  std::string precision = "fp32";   // fp32 | bf16 | fp16
  HardwareProfile profile;
  Topology topology;
  bool fused_loss = false;  // output layer + loss in row blocks (tp = 1): no whole logits
  // CPU ranks: torch threads each rank runs (train.threads; 0 = the cores of a host shared by the
  // ranks on it). Only a per-thread calibrated profile (HardwareProfile::per_thread) uses it.
  int64_t threads_per_rank = 0;
  // [pp] = blocks on the most loaded of pp pipeline stages, filled once by cache_stage_blocks() for
  // a planner run's thousands of estimates (empty: each estimate splits the stages itself).
  std::vector<int64_t> stage_blocks;
};

// Fills in->stage_blocks for every pp from 0 to the model's blocks.
void cache_stage_blocks(CostModelInput* in);

struct MemoryEstimate {
  double params = 0, grads = 0, grad_accumulators = 0, optimizer = 0, activations = 0, workspace = 0;
  double frozen = 0;               // LoRA: the frozen base's weights (params, grads, optimizer: the adapters')
  double teacher = 0;              // distillation: the frozen teacher's weights held between steps
  double teacher_activations = 0;  // its fp32 logits for the loss, and what its forward adds to the peak
  // ZeRO-3: whole blocks at the step's peak (gathered parameters; with recompute also the previous
  // block's gradients, still being reduce-scattered).
  double gathered = 0;
  double flat_accumulators = 0;      // fp32 buckets micro-batches are summed into (grad_accum > 1, ZeRO 0-2)
  double host = 0;                   // optimizer offload on a GPU: pinned host memory per rank
  double build = 0;                  // peak while building (0: the model is not split)
  double activation_per_sample = 0;  // this layout (recompute as chosen), one micro-batch sample
  double activation_per_sample_no_recompute = 0;  // the same without recompute
  double activation_per_sample_recompute = 0;     // and with recompute
  int64_t in_flight = 1;                          // micro-batches a stage holds at once
  // What the framework's allocator holds at most (torch.cuda.max_memory_allocated on a GPU): the
  // training figure less the device reserve and fragmentation.
  double tensors() const {
    return params + frozen + grads + gathered + grad_accumulators + optimizer + activations + teacher +
           teacher_activations;
  }
  // The tensors live at the step's peak (a CPU allocator hook counts these: metrics.jsonl's
  // param_mb + grad_mb + opt_state_mb + host_state_mb + step_tensor_peak_mb), without what a heap
  // or caching allocator keeps of freed blocks (grad_accumulators, workspace).
  double live() const {
    return params + frozen + grads + gathered + flat_accumulators + optimizer + activations + teacher +
           teacher_activations;
  }
  double training() const { return tensors() + workspace; }
  double total() const { return training() > build ? training() : build; }
};

struct TimeEstimate {
  double compute = 0;    // FLOPs / achievable rate (recompute adds a forward)
  double overhead = 0;   // fixed per-kernel costs
  double tp_comm = 0;    // tensor-parallel allreduces (on the critical path)
  double pp_comm = 0;    // stage-to-stage sends
  double bubble = 0;     // pipeline idle time
  double dp_comm = 0;    // exposed data-parallel gradient communication
  double zero_comm = 0;  // ZeRO parameter all-gather after the step
  double optimizer = 0;  // optimizer step
  double bubble_fraction = 0;
  double imbalance = 0;  // uneven replica shares: the largest share over the mean, less one (in compute)
  // Bitwise mode (ParallelLayout::chunk): the chunks' all-to-all exchanges in place of the gradient
  // reduction, the canonical tree's additions and the exact norm; and the same layout's total with
  // train.reproducible = "off", to show what the mode costs (0 when off).
  double reproducible = 0;
  double off_total = 0;
  double total() const {
    return compute + overhead + tp_comm + pp_comm + bubble + dp_comm + zero_comm + optimizer + reproducible;
  }
};

// Parameters held by one device of the most loaded stage (before ZeRO sharding).
double params_per_device(const ModelStats& m, int64_t tp, int64_t pp);

// One transformer block's shape, for pricing it on a per-thread calibrated CPU.
struct BlockShape {
  double seq = 0, width = 0, heads = 0, head_dim = 0, kv_heads = 0, mlp = 0;  // T, C, H, D, KV, I
  bool gated = false;                                                         // SwiGLU
  double tp = 1;                                                              // tensor-parallel split
  // A gpt block: C / H wide heads, as many key/value heads, a 4C GELU MLP.
  static BlockShape gpt(double seq, double width, double heads) {
    return {seq, width, heads, width / heads, heads, 4.0 * width, false, 1};
  }
};
// Seconds of the block's forward + backward over `samples` sequences on a HardwareProfile::per_thread
// CPU: its linear layers at the rate a matmul of their size reaches on `threads` threads,
// attention's batched matmuls, the memory-bound layers (norms, activation, softmax), the residual
// adds and head reshapes at the elementwise bandwidth, and (`with_remainder`) the profile's measured
// remainder per token and width (what `gtrain plan --calibrate` timed on a real block beyond these).
double cpu_block_seconds(const HardwareProfile& hw, const BlockShape& b, double samples, double threads,
                         bool with_remainder = true);

// Forward + backward FLOPs of one sample as the layout trains it: the model's flops_per_sample, or
// with LoRA, recompute (`recompute`) or a teacher what the header says they change.
double training_flops_per_sample(const CostModelInput& in, bool recompute);

MemoryEstimate estimate_memory(const CostModelInput& in, const ParallelLayout& l);
TimeEstimate estimate_time(const CostModelInput& in, const ParallelLayout& l);

}  // namespace gtrain
