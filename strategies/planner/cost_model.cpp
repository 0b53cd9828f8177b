// cost_model.cpp: the memory and time formulas described in cost_model.h.
#include "strategies/planner/cost_model.h"

#include <algorithm>
#include <cmath>

#include "strategies/planner/stage_split.h"

namespace gtrain {
namespace {

bool half(const std::string& precision) {
  return precision == "bf16" || precision == "fp16";
}

// Bytes per activation element kept for backward: fp32 4; under autocast most saved tensors are
// 16-bit but norms, softmax and the loss keep fp32 copies (about 60% of fp32 overall).
double activation_element_bytes(const std::string& precision) {
  return half(precision) ? 2.4 : 4.0;
}

// The size a CPU matmul of rows x inner . inner x outer runs at, for HardwareProfile::matmul_rate:
// the harmonic mean of its three dimensions (the smallest one limits it most).
double matmul_size(double rows, double inner, double outer) {
  return 3.0 / (1.0 / rows + 1.0 / inner + 1.0 / std::max(1.0, outer));
}

// Bytes per element sent between ranks (activations and their gradients).
double wire_bytes(const std::string& precision) {
  return half(precision) ? 2.0 : 4.0;
}

double optimizer_state_bytes(const CostModelInput& in) {
  if (in.optimizer == "adamw") return 8.0;  // two fp32 moments
  return in.momentum > 0 ? 4.0 : 0.0;       // SGD momentum buffer
}

// Bytes read and written per parameter by one optimizer step (param, grad, state).
double optimizer_step_bytes(const CostModelInput& in) {
  if (in.optimizer == "adamw") return 28.0;
  return in.momentum > 0 ? 20.0 : 12.0;
}

// The blocks of the most loaded pipeline stage, as the engine splits them (pipeline_stage_bounds):
// pp need not divide the blocks.
int64_t stage_blocks(const ModelStats& m, int64_t pp) {
  if (pp <= 1 || m.blocks <= 0) return std::max<int64_t>(m.blocks, 0);
  if (pp > m.blocks) return 1;
  return max_stage_blocks(pipeline_stage_bounds(m, m.blocks, pp));
}

// The same from the table cache_stage_blocks() filled, when it covers pp.
int64_t stage_blocks(const CostModelInput& in, int64_t pp) {
  if (pp >= 0 && pp < static_cast<int64_t>(in.stage_blocks.size())) return in.stage_blocks[static_cast<size_t>(pp)];
  return stage_blocks(in.model, pp);
}

// Parameters of the most loaded stage's device, given its blocks.
double stage_params(const ModelStats& m, int64_t tp, int64_t pp, int64_t blocks_on_stage) {
  double stage = static_cast<double>(m.params);
  if (pp > 1 && m.blocks > 0) {
    if (m.params_per_block > 0) {
      const double outside = std::max(0.0, static_cast<double>(m.params - m.blocks * m.params_per_block));
      // The most loaded stage: its blocks plus everything outside the blocks (embeddings sit on
      // the first stage and, tied, again on the last).
      stage = static_cast<double>(blocks_on_stage) * static_cast<double>(m.params_per_block) + outside;
    } else {
      stage = static_cast<double>(m.params) / static_cast<double>(pp);
    }
  }
  return stage / static_cast<double>(std::max<int64_t>(1, tp));
}

double ring_allreduce_s(double bytes, int64_t n, double bw, double latency) {
  if (n <= 1 || bytes <= 0) return 0;
  return 2.0 * static_cast<double>(n - 1) / static_cast<double>(n) * bytes / bw + latency;
}

// LoRA: the activation elements one sample's block keeps beyond full training's: the rank-wide
// products A x of every target and, with adapter dropout, the dropped inputs (0 without LoRA).
double adapter_block_elements(const CostModelInput& in) {
  if (!in.adapter.enabled()) return 0.0;
  return static_cast<double>(in.model.seq_len) * (in.adapter.rank_elements + in.adapter.dropout_elements);
}

// The activations a step keeps for backward on the most loaded stage's device, with backward's
// working set (and the fused loss's blocks), into e.in_flight, e.activation_per_sample* and
// e.activations.
void estimate_activations(const CostModelInput& in, const ParallelLayout& l, MemoryEstimate& e) {
  const ModelStats& m = in.model;
  e.in_flight = l.pp > 1 ? (l.gpipe ? l.grad_accum : std::min(l.pp, l.grad_accum)) : 1;
  const double mb = static_cast<double>(l.micro_batch);
  if (m.is_transformer() && m.blocks > 0) {
    const double eb = activation_element_bytes(in.precision);
    const double layers = static_cast<double>(stage_blocks(in, l.pp));
    const double block = transformer_block_activation_elements(m, l.tp) + adapter_block_elements(in);
    // Fused output layer + loss (tp = 1): the [T, V] logits and their gradient never exist whole;
    // what it holds instead is counted in `fused` below.
    const bool fused = in.fused_loss && l.tp == 1;
    const double T_ = static_cast<double>(m.seq_len), V_ = static_cast<double>(m.vocab);
    const double outer = transformer_outer_activation_elements(m, l.tp) - (fused ? 2.0 * T_ * V_ : 0.0);
    const double tc = static_cast<double>(m.seq_len) * static_cast<double>(m.hidden);
    const double stage_full = layers * block;
    const double stage_recompute = layers * tc + block;
    e.activation_per_sample_no_recompute = (stage_full + outer) * eb;
    e.activation_per_sample_recompute = (stage_recompute + outer) * eb;
    const double stage = (l.recompute ? stage_recompute : stage_full) * eb;
    e.activation_per_sample = stage + outer * eb;
    // 1F1B: the first stage holds `in_flight` micro-batches; the last one holds one plus the logits.
    // GPipe: every stage holds all of them, the last one with each micro-batch's logits too.
    const double first = stage * static_cast<double>(e.in_flight) + (l.pp == 1 ? outer * eb : 0.0);
    const double last = (stage + outer * eb) * (l.gpipe ? static_cast<double>(e.in_flight) : 1.0);
    // Backward's working set on top of what forward kept: one block's MLP-sized gradient (TI) and
    // the logits' gradient (2TV), per micro-batch sample. Measured tensor by tensor on CPU
    // (tests/test_memory_components.cpp); the heap's overhead is the profile's fragmentation.
    const double T = static_cast<double>(m.seq_len), C = static_cast<double>(m.hidden);
    const double t = static_cast<double>(std::max<int64_t>(1, l.tp));
    const double I = m.intermediate > 0 ? static_cast<double>(m.intermediate) : 4.0 * C;
    const double backward_ws = (T * I / t + (fused ? 0.0 : 2.0 * T * static_cast<double>(m.vocab) / t)) * eb;
    e.activations = (std::max(first, last) + backward_ws) * mb;
    if (fused) {
      // A block of rows at a time (fused_loss_block_rows()). CPU: two fp32 blocks, the logits and
      // their log-softmax, live together at the block's peak. GPU: one block of logits in the
      // product dtype, which the CUDA kernel turns into their gradient in place (softmax_xent.cu),
      // and the weight gradient's product in that dtype before it is added up. Both: the input's
      // gradient (fp32) and product-dtype copy, and the fp32 weight gradient.
      const bool gpu = in.profile.kind == DeviceKind::gpu;
      const double rows = static_cast<double>(fused_loss_block_rows(m.seq_len * l.micro_batch, m.vocab, gpu));
      const double pb = half(in.precision) ? 2.0 : 4.0;  // the product dtype's bytes
      if (in.adapter.enabled()) {
        // LoRA: the output layer is frozen, so no weight gradient (nor its product) is made.
        e.activations += (gpu ? pb * V_ * rows : 2.0 * 4.0 * V_ * rows) + (4.0 + 2.0) * T * C * mb;
      } else {
        const double blocks = gpu ? pb * V_ * rows + pb * V_ * C : 2.0 * 4.0 * V_ * rows;
        e.activations += blocks + (4.0 + 2.0) * T * C * mb + 4.0 * V_ * C;
      }
    }
  } else {
    const double scale = half(in.precision) ? 0.6 : 1.0;
    const double stages = static_cast<double>(std::max<int64_t>(1, l.pp));
    e.activation_per_sample_no_recompute = m.activation_bytes_per_sample * scale / stages;
    e.activation_per_sample_recompute = m.recompute_bytes_per_sample * scale / stages;
    e.activation_per_sample = l.recompute ? e.activation_per_sample_recompute : e.activation_per_sample_no_recompute;
    e.activations = e.activation_per_sample * mb * static_cast<double>(e.in_flight);
  }
}

// The bitwise mode's buffers and the optimizer state over the `trainable` parameters of the device
// (all of them, or LoRA's adapters), into e.grad_accumulators, e.optimizer and (offload on a GPU) e.host.
void optimizer_memory(const CostModelInput& in, const ParallelLayout& l, double trainable, MemoryEstimate& e) {
  const double P = trainable;
  const double dp = static_cast<double>(std::max<int64_t>(1, l.dp));
  if (l.chunk > 0) {
    // Bitwise mode: a chunk's whole gradients and its all-to-all output, and the tree's nodes (at
    // most log2(N) + 1 slices of 1/dp each) over the step.
    const double levels = std::floor(std::log2(static_cast<double>(std::max<int64_t>(1, l.chunks())))) + 1.0;
    e.grad_accumulators += 4.0 * P * (1.0 + levels / dp);
  }
  e.optimizer = optimizer_state_bytes(in) * P / (l.zero >= 1 ? dp : 1.0);
  if (l.offload) {
    // The state, the fp32 master chunk and a gradient copy in host memory (ZeRO >= 1: the owned chunk).
    const double offloaded = e.optimizer + 8.0 * P / (l.zero >= 1 ? dp : 1.0);
    if (in.profile.kind == DeviceKind::gpu) {
      e.host = offloaded;
      e.optimizer = 0;
    } else {
      e.optimizer = offloaded;
    }
  }
}

// Every parameter trains: the weights, their gradients and the optimizer state of the stage's `P`.
void full_training_memory(const CostModelInput& in, const ParallelLayout& l, double P, MemoryEstimate& e) {
  const ModelStats& m = in.model;
  const double dp = static_cast<double>(std::max<int64_t>(1, l.dp));
  e.params = P * (4.0 + (half(in.precision) ? 2.0 : 0.0));
  e.grads = 4.0 * P / (l.zero >= 2 ? dp : 1.0);
  // ZeRO-3: what is gathered at once, the outer unit (parameters outside the blocks, held for the
  // step) and two blocks; without blocks the whole model is one unit.
  const double blockP =
      m.blocks > 0 && l.pp <= 1 ? static_cast<double>(m.params_per_block) / std::max<int64_t>(1, l.tp) : 0.0;
  const double outerP = blockP > 0 ? std::max(0.0, P - static_cast<double>(m.blocks) * blockP) : P;
  const double gatheredP = std::min(P, outerP + 2.0 * blockP);
  if (l.zero >= 3) {
    const double casts = half(in.precision) ? 2.0 * (l.recompute ? gatheredP : P) : 0.0;
    e.params = 4.0 * P / dp + casts;
    e.grads = 4.0 * P / dp;
    e.gathered = 4.0 * std::min(P, outerP + blockP);
    // With recompute the activations at backward's start are small, and the previous block's whole
    // gradients are still being reduce-scattered while the next one is recomputed.
    if (l.recompute) e.gathered += 4.0 * std::min(P, blockP);
  }
  // Several micro-batches a step: ZeRO 0-2 sum them in flat fp32 buckets kept between steps;
  // ZeRO-2 and 3 also hold each micro-batch's reduced chunk until it is added to the shard.
  if (l.grad_accum > 1 && l.zero <= 2) e.flat_accumulators = 4.0 * P;
  if (l.grad_accum > 1 && l.zero >= 2) e.grads += 4.0 * P / dp;
  // Autograd computes each parameter's incoming gradient, the engine copies it into the bucket and
  // frees it. A CPU heap keeps every freed block (4P at its high-water mark); a GPU's caching
  // allocator reuses them, so there only the largest parameter's counts (a transformer's embedding
  // or MLP matrix), plus the flat accumulators (4P) when a step has more than one micro-batch.
  e.grad_accumulators = 4.0 * P;
  if (l.zero >= 3) {
    // Each unit's incoming gradients are copied out and freed as the unit finishes: the outer
    // unit's and a block's at most.
    e.grad_accumulators = 4.0 * std::min(P, outerP + blockP);
  } else if (in.profile.kind == DeviceKind::gpu && m.is_transformer()) {
    const double C = static_cast<double>(m.hidden), t = static_cast<double>(std::max<int64_t>(1, l.tp));
    const double I = m.intermediate > 0 ? static_cast<double>(m.intermediate) : 4.0 * C;
    e.grad_accumulators = std::min(e.grad_accumulators, 4.0 * std::max(static_cast<double>(m.vocab) * C, I * C) / t);
    if (l.grad_accum > 1) e.grad_accumulators += 4.0 * P;
  }
  optimizer_memory(in, l, P, e);
}

// The adapters of one block on one tensor-parallel rank: the split part / tp, the whole part.
double block_adapters(const CostModelInput& in, const ParallelLayout& l) {
  const AdapterCost& a = in.adapter;
  const double whole = a.tp_whole_per_block;
  return (static_cast<double>(a.params_per_block) - whole) / static_cast<double>(std::max<int64_t>(1, l.tp)) + whole;
}

// The adapters of the stage's device (adapters sit in the blocks only).
double stage_adapters(const CostModelInput& in, const ParallelLayout& l) {
  return static_cast<double>(stage_blocks(in, l.pp)) * block_adapters(in, l);
}

// LoRA: the stage's `P` base weights frozen (no gradients, accumulators or optimizer state), its
// adapters trained in fp32 as full training trains every parameter.
void lora_memory(const CostModelInput& in, const ParallelLayout& l, double P, MemoryEstimate& e) {
  const ModelStats& m = in.model;
  const AdapterCost& a = in.adapter;
  const double dp = static_cast<double>(std::max<int64_t>(1, l.dp));
  const double t = static_cast<double>(std::max<int64_t>(1, l.tp));
  const double A = stage_adapters(in, l);
  const double blockA = block_adapters(in, l);
  const double blockP = m.blocks > 0 && l.pp <= 1 ? static_cast<double>(m.params_per_block) / t : 0.0;
  const double outerP = blockP > 0 ? std::max(0.0, P - static_cast<double>(m.blocks) * blockP) : P;
  // An fp32 base under autocast: the 16-bit copies of its weights, kept for the input gradients.
  const bool casts = half(in.precision) && a.base_bytes > 2.0;
  e.frozen = a.base_bytes * P + (casts ? 2.0 * P : 0.0);
  e.params = 4.0 * A;
  e.grads = 4.0 * A / (l.zero >= 2 ? dp : 1.0);
  if (l.zero >= 3) {
    const double gatheredP = std::min(P, outerP + 2.0 * blockP);
    e.frozen = a.base_bytes * P / dp + (casts ? 2.0 * (l.recompute ? gatheredP : P) : 0.0);
    e.params = 4.0 * A / dp;
    e.grads = 4.0 * A / dp;
    e.gathered = a.base_bytes * std::min(P, outerP + blockP) + 4.0 * std::min(A, blockA);
    if (l.recompute) e.gathered += 4.0 * std::min(A, blockA);  // the previous block's adapter gradients
  }
  if (l.grad_accum > 1 && l.zero <= 2) e.flat_accumulators = 4.0 * A;
  if (l.grad_accum > 1 && l.zero >= 2) e.grads += 4.0 * A / dp;
  e.grad_accumulators = l.zero >= 3 ? 4.0 * std::min(A, blockA) : 4.0 * A;
  if (l.zero < 3 && l.grad_accum > 1 && in.profile.kind == DeviceKind::gpu) e.grad_accumulators += 4.0 * A;
  optimizer_memory(in, l, A, e);
}

// Distillation: the teacher's weights on the stage's device (e.teacher), its logits kept for the
// loss and what its forward adds beyond the student's peak (e.teacher_activations).
void teacher_memory(const CostModelInput& in, const ParallelLayout& l, MemoryEstimate& e) {
  const ModelStats& t = in.teacher.model;
  const double bytes = in.teacher.bytes;
  const double dp = static_cast<double>(std::max<int64_t>(1, l.dp));
  const double tp = static_cast<double>(std::max<int64_t>(1, l.tp));
  // Whole on the pipeline's last stage (the only one computing the loss), split by tp.
  const int64_t blocks = std::max<int64_t>(0, t.blocks);
  const double P = stage_params(t, l.tp, 1, blocks);
  const double blockP = t.blocks > 0 ? static_cast<double>(t.params_per_block) / tp : 0.0;
  const double outerP = blockP > 0 ? std::max(0.0, P - static_cast<double>(blocks) * blockP) : P;
  const bool sharded = l.zero >= 3 && l.shard_teacher;
  e.teacher = bytes * (sharded ? P / dp : P);
  // Its forward, one micro-batch and one block at a time: the residual stream, a block's working
  // set, and under ZeRO-3 its gathered outer unit and block; freed before the student's forward.
  const double mb = static_cast<double>(l.micro_batch);
  const double T = static_cast<double>(t.seq_len), C = static_cast<double>(t.hidden);
  double transient = 0;
  if (t.is_transformer()) transient = mb * bytes * (T * C + transformer_block_activation_elements(t, l.tp));
  if (sharded) transient += bytes * std::min(P, outerP + blockP);
  const double student_peak = e.activations + e.gathered;
  // Its fp32 logits for the loss: whole on every rank (under tp gathered over the group, and the
  // student's gathered beside them).
  const double logits = t.is_transformer() ? 4.0 * mb * T * static_cast<double>(t.vocab) * (tp > 1 ? 2.0 : 1.0) : 0.0;
  e.teacher_activations = logits + std::max(0.0, transient - student_peak);
}

}  // namespace

double params_per_device(const ModelStats& m, int64_t tp, int64_t pp) {
  return stage_params(m, tp, pp, stage_blocks(m, pp));
}

void cache_stage_blocks(CostModelInput* in) {
  in->stage_blocks.clear();
  const ModelStats& m = in->model;
  const int64_t top = std::max<int64_t>(m.blocks, 1);
  // Every pp's split from one dynamic program: one at a time, a 96-block model's took most of a
  // 4096-GPU plan's time (0.8 s of gtrain plan, what-if table included).
  const auto each = m.blocks > 1 ? pipeline_stage_bounds_each_pp(m, m.blocks) : std::vector<std::vector<int64_t>>{};
  for (int64_t pp = 0; pp <= top; ++pp)
    in->stage_blocks.push_back(pp <= 1 ? std::max<int64_t>(m.blocks, 0) : max_stage_blocks(each[pp - 1]));
}

MemoryEstimate estimate_memory(const CostModelInput& in, const ParallelLayout& l) {
  const ModelStats& m = in.model;
  MemoryEstimate e;
  const double P = stage_params(m, l.tp, l.pp, stage_blocks(in, l.pp));
  if (in.adapter.enabled()) {
    lora_memory(in, l, P, e);
  } else {
    full_training_memory(in, l, P, e);
  }
  estimate_activations(in, l, e);
  if (in.teacher.enabled()) teacher_memory(in, l, e);
  // A 1F1B stage frees one micro-batch's activations while the next one's forward allocates, so
  // freed blocks are split and reused less: on CPU its heap outgrew the live tensors by ~1.5x what
  // a sequential or GPipe step's did (pp=2 and tp2 x pp2 read 1.16-1.17 at the base fraction, GPipe
  // 0.88-0.95; tests/test_multiproc.cpp MultiRankMemory, LibTorch 1.13 and 2.6).
  const double interleaved = l.pp > 1 && !l.gpipe ? 1.5 : 1.0;
  e.workspace = in.profile.workspace_bytes +
                interleaved * in.profile.fragmentation * (e.grad_accumulators + e.activations + e.teacher_activations);
  // Every rank builds the whole model from the same seed and keeps its part. On a CPU that is the
  // memory the plan is for; a GPU would receive only the part (the build is in host memory).
  if ((l.tp > 1 || l.pp > 1) && in.profile.kind == DeviceKind::cpu) {
    e.build = 4.0 * static_cast<double>(m.params) + in.profile.workspace_bytes;
  }
  return e;
}

namespace {

// CPU ranks of a per-thread calibrated host: the torch threads each rank runs, and the share of
// them the host's cores give when its ranks together ask for more threads than it has.
struct CpuThreads {
  double threads = 1, share = 1;
};
CpuThreads cpu_threads(const CostModelInput& in, const ParallelLayout& l) {
  const double world = static_cast<double>(l.dp * l.tp * l.pp);
  const double gpn = static_cast<double>(std::max<int64_t>(1, in.topology.gpus_per_node));
  const double ranks_here = std::max(1.0, std::min(world, gpn));
  const double cores = static_cast<double>(in.profile.cores);
  CpuThreads t;
  t.threads = in.threads_per_rank > 0 ? static_cast<double>(in.threads_per_rank)
                                      : std::max(1.0, std::floor(cores / ranks_here));
  t.share = std::min(1.0, cores / (ranks_here * t.threads));
  return t;
}

// One micro-batch's compute on one such rank: its blocks (one more forward each with recompute)
// and the output layer (its matmul and log-softmax over T x V). Models that are not transformers:
// their FLOPs at the rate of a matmul as wide as the micro-batch.
double cpu_compute_seconds(const CostModelInput& in, const ParallelLayout& l, double flops) {
  const ModelStats& m = in.model;
  const HardwareProfile& hw = in.profile;
  const CpuThreads th = cpu_threads(in, l);
  const double mb = static_cast<double>(l.micro_batch);
  const double precision_rate = half(in.precision) ? std::max(hw.bf16_flops, 1.0) / hw.fp32_flops : 1.0;
  auto matmul_rate = [&](double n) { return hw.matmul_rate(n, th.threads) * th.share * precision_rate; };
  if (!m.is_transformer() || m.blocks <= 0) return flops / matmul_rate(std::min(1024.0, std::max(1.0, mb)));
  BlockShape b;
  b.seq = static_cast<double>(m.seq_len);
  b.width = static_cast<double>(m.hidden);
  b.heads = static_cast<double>(m.heads);
  b.head_dim = m.head_dim > 0 ? static_cast<double>(m.head_dim) : b.width / b.heads;
  b.kv_heads = m.kv_heads > 0 ? static_cast<double>(m.kv_heads) : b.heads;
  b.mlp = m.intermediate > 0 ? static_cast<double>(m.intermediate) : 4.0 * b.width;
  b.gated = m.gated_mlp;
  b.tp = static_cast<double>(std::max<int64_t>(1, l.tp));
  const double layers = static_cast<double>(stage_blocks(in, l.pp));
  const double recompute = l.recompute ? 4.0 / 3.0 : 1.0;  // one more forward of every block
  const double blocks = recompute * layers * cpu_block_seconds(hw, b, mb, th.threads) / th.share;
  // The output layer: its matmul (2 C V a token forward, 3x with backward) and the log-softmax.
  const double V = static_cast<double>(m.vocab) / b.tp, rows = mb * b.seq;
  const double head = 6.0 * rows * b.width * V / matmul_rate(matmul_size(rows, b.width, V)) +
                      rows * V * hw.softmax_s / (hw.memory_bound_rate(th.threads) * th.share);
  return blocks / precision_rate + head;
}

// The bandwidth a data-parallel group's collectives get: within a node, or a node's share across.
double dp_bandwidth(const CostModelInput& in, const ParallelLayout& l) {
  const HardwareProfile& hw = in.profile;
  const double gpn = static_cast<double>(std::max<int64_t>(1, in.topology.gpus_per_node));
  const bool one_node = in.topology.nodes <= 1 || static_cast<double>(l.dp * l.tp * l.pp) <= gpn;
  const double groups_per_node = std::min(static_cast<double>(l.tp * l.pp), gpn);
  return one_node ? hw.intra_node_bw : std::min(hw.intra_node_bw, hw.inter_node_bw / groups_per_node);
}

// The data-parallel traffic of a step over the stage's `P` trained parameters, less what
// backward's compute of a micro-batch (`compute_mb`) hides: the gradients' allreduce (ZeRO-0), or
// their reduce-scatter and the parameters' all-gather (ZeRO 1-3), into t.dp_comm and t.zero_comm.
// LoRA under ZeRO-3 also gathers the frozen base's `frozen_bytes`.
void estimate_dp_comm(const CostModelInput& in, const ParallelLayout& l, double P, double compute_mb, TimeEstimate& t,
                      double frozen_bytes = 0) {
  if (l.dp <= 1) return;
  const ModelStats& m = in.model;
  const HardwareProfile& hw = in.profile;
  const double accum = static_cast<double>(l.grad_accum);
  const double grad_bytes = 4.0 * P;
  const double bw = dp_bandwidth(in, l);
  const double buckets = std::ceil(grad_bytes / (25.0 * 1024 * 1024));
  const double ring = ring_allreduce_s(grad_bytes, l.dp, bw, hw.latency_s * buckets);
  const double window = 0.8 * (2.0 / 3.0) * compute_mb;  // backward of one micro-batch hides comm
  if (l.zero == 0) {
    t.dp_comm = std::max(0.0, ring - window);
  } else if (l.zero >= 3) {
    // Per micro-batch and unit: a gather before forward and one before backward, and a
    // reduce-scatter of the unit's gradients, with their copies (12 B/param). A GPU prefetches the
    // gathers behind the previous block's compute (NCCL runs on its own stream); MPI on CPU ranks
    // moves a started gather only when the engine next calls into it, so there they are exposed,
    // and only the reduce-scatters overlap backward, as ZeRO-2's do.
    const double half_ring = ring / 2.0;
    double gather = half_ring, copies = 12.0 * P;
    if (frozen_bytes > 0) {  // LoRA: gathers of the frozen weights and the adapters, their copies
      const double gathered = frozen_bytes + grad_bytes;
      gather = ring_allreduce_s(gathered, l.dp, bw, hw.latency_s * std::ceil(gathered / (25.0 * 1024 * 1024))) / 2.0;
      copies = 2.0 * gathered + grad_bytes;
    }
    const double units = m.blocks > 0 ? static_cast<double>(m.blocks) + 1.0 : 1.0;
    const double lat = units * hw.latency_s;
    const bool gpu = hw.kind == DeviceKind::gpu;
    const double fwd_window = gpu ? 0.8 * (1.0 / 3.0) * compute_mb : 0.0;
    const double gathers = gpu ? std::max(0.0, gather - fwd_window) + std::max(0.0, gather - window) : 2.0 * gather;
    t.zero_comm = accum * (gathers + 2.0 * lat + copies / hw.memory_bw);
    const double rs_window = gpu ? std::max(0.0, window - gather) : window;
    t.dp_comm = accum * (std::max(0.0, half_ring - rs_window) + lat);
  } else {
    // Reduce-scatter gradients (half a ring) behind backward: once per step for ZeRO-1, every
    // micro-batch for ZeRO-2 (it keeps no full gradient to accumulate into); then all-gather the
    // updated parameters (the other half) in the open, plus copying into flat shards.
    const double rs = std::max(0.0, ring / 2.0 - window);
    t.dp_comm = l.zero >= 2 ? accum * rs : rs;
    t.zero_comm = ring / 2.0 + 2.0 * grad_bytes / hw.memory_bw;
  }
}

// Bitwise mode (l.chunk > 0) over the stage's `P` parameters: what the reproducible reduction adds,
// into t.reproducible, and t.off_total, the same step without it.
void estimate_reproducible(const CostModelInput& in, const ParallelLayout& l, double P, TimeEstimate& t) {
  const HardwareProfile& hw = in.profile;
  const double accum = static_cast<double>(l.grad_accum);
  const double gpn = static_cast<double>(std::max<int64_t>(1, in.topology.gpus_per_node));
  ParallelLayout off = l;
  off.chunk = 0;
  t.off_total = estimate_time(in, off).total();
  // Every chunk: fresh gradient buffers, its all-to-all (each rank keeps 1/dp of it) without
  // overlap, and the tree's clone-or-add of the owned slice (about 20 B a parameter over the
  // rank's gradients). ZeRO-3's exchange replaces its reduce-scatter (priced above); ZeRO 0-2's
  // replaces the allreduce, and ZeRO-0 all-gathers the summed slices. The exact norm reads the
  // owned gradients in double four times (about 200 B a parameter).
  const double dp = static_cast<double>(l.dp);
  const double grad_bytes = 4.0 * P;
  const double rate =
      hw.per_thread() ? hw.elementwise_bw * hw.memory_bound_rate(cpu_threads(in, l).threads) : hw.memory_bw;
  double exchange = 0;
  if (l.dp > 1 && l.zero < 3) {
    const bool one_node = in.topology.nodes <= 1 || static_cast<double>(l.dp * l.tp * l.pp) <= gpn;
    const double bw = one_node ? hw.intra_node_bw : hw.inter_node_bw / std::min(gpn, dp);
    const double buckets = std::ceil(grad_bytes / (25.0 * 1024 * 1024));
    exchange = accum * (grad_bytes * (dp - 1.0) / dp / bw + buckets * hw.latency_s);
    if (l.zero == 0) exchange += ring_allreduce_s(grad_bytes, l.dp, bw, hw.latency_s * buckets) / 2.0;
    t.dp_comm = 0;
  }
  const double owned = P / (l.zero >= 1 ? dp : 1.0);
  t.reproducible = exchange + accum * 20.0 * P / rate + 200.0 * owned / rate;
}

// Distillation under ZeRO-3: every micro-batch gathers the teacher's units for its forward, on a
// GPU behind the teacher's own compute (its share of `flops`, the micro-batch's `compute_mb`).
void teacher_zero3_comm(const CostModelInput& in, const ParallelLayout& l, double flops, double compute_mb,
                        TimeEstimate& t) {
  if (l.zero < 3 || l.dp <= 1 || !l.shard_teacher) return;
  const ModelStats& tm = in.teacher.model;
  const HardwareProfile& hw = in.profile;
  const double stage = stage_params(tm, l.tp, l.pp, tm.blocks > 0 ? (tm.blocks + l.pp - 1) / l.pp : 0);
  const double bytes = in.teacher.bytes * stage;
  const double units = tm.blocks > 0 ? static_cast<double>(tm.blocks) + 1.0 : 1.0;
  const double gather = ring_allreduce_s(bytes, l.dp, dp_bandwidth(in, l), units * hw.latency_s) / 2.0;
  const double world = static_cast<double>(l.dp * l.tp * l.pp);
  const double share = static_cast<double>(l.max_replica_batch()) * static_cast<double>(l.dp);
  const double teacher_mb = flops > 0 ? compute_mb * share * tm.flops_per_sample / 3.0 / world / flops : 0.0;
  const double window = hw.kind == DeviceKind::gpu ? 0.8 * teacher_mb : 0.0;
  t.zero_comm += static_cast<double>(l.grad_accum) * (std::max(0.0, gather - window) + 2.0 * bytes / hw.memory_bw);
}

}  // namespace

double training_flops_per_sample(const CostModelInput& in, bool recompute) {
  const ModelStats& m = in.model;
  if (!in.adapter.enabled() && !in.teacher.enabled()) return m.flops_per_sample * (recompute ? 4.0 / 3.0 : 1.0);
  double forward = m.flops_per_sample / 3.0, total = m.flops_per_sample;
  if (in.adapter.enabled() && m.is_transformer()) {
    // The forward's attention score matmuls (4 T^2 H D a sample and block) have no weights; the rest
    // of the forward is matmuls with weights, whose weight-gradient matmuls (as many FLOPs again)
    // a frozen base skips.
    const double T = static_cast<double>(m.seq_len), H = static_cast<double>(m.heads);
    const double HD = m.head_dim > 0 ? H * static_cast<double>(m.head_dim) : static_cast<double>(m.hidden);
    const double attention = static_cast<double>(m.blocks) * 4.0 * T * T * HD;
    const double adapters = 2.0 * T * static_cast<double>(in.adapter.params);  // their forward
    total += -(forward - attention) + 3.0 * adapters;
    forward += adapters;
  }
  if (recompute) total += forward;
  if (in.teacher.enabled()) total += in.teacher.model.flops_per_sample / 3.0;
  return total;
}

double cpu_block_seconds(const HardwareProfile& hw, const BlockShape& b, double samples, double threads,
                         bool with_remainder) {
  const double T = b.seq, C = b.width, H = b.heads, D = b.head_dim, I = b.mlp, tp = std::max(1.0, b.tp);
  const double tokens = samples * T;
  // On one thread. Linear layers: q, o (C x HD each), k, v (C x KV D each), the MLP (2 or 3 of
  // C x I); 2 FLOPs a multiply-add, 3x with backward; sized as rows x C . C x C / tp.
  const double linear =
      6.0 * tokens * (2.0 * C * H * D + 2.0 * C * b.kv_heads * D + (b.gated ? 3.0 : 2.0) * C * I) / tp;
  const double n = matmul_size(tokens, C, C / tp);
  // Attention: scores and their use, 4 T^2 HD a sample forward, 3x with backward.
  const double attention = 12.0 * samples * T * T * H * D / tp;
  double seconds = linear / hw.matmul_rate(n, 1.0) + attention / hw.attention_flops_1thread;
  // Two norms over T x C, the MLP's activation over T x I (SwiGLU: SiLU and a product, about 1.5
  // GELUs), the softmax over H T^2 scores; residual adds (3 TC each way, twice) and the heads'
  // reshapes (8 TC each way) at the elementwise bandwidth (fp32).
  const double memory = 2.0 * T * C * hw.norm_s + (b.gated ? 1.5 : 1.0) * T * I / tp * hw.activation_s +
                        H / tp * T * T * hw.softmax_s + (12.0 * T * C + 16.0 * T * C / tp) * 4.0 / hw.elementwise_bw +
                        (with_remainder ? T * C * hw.block_remainder_s : 0.0);
  seconds += samples * memory;
  // On `threads` threads: the speed-up a real block measured on every core, in proportion.
  return seconds / hw.block_rate(threads);
}

TimeEstimate estimate_time(const CostModelInput& in, const ParallelLayout& l) {
  const ModelStats& m = in.model;
  const HardwareProfile& hw = in.profile;
  TimeEstimate t;
  const double world = static_cast<double>(l.dp * l.tp * l.pp);
  const double accum = static_cast<double>(l.grad_accum);
  const double gpn = static_cast<double>(std::max<int64_t>(1, in.topology.gpus_per_node));
  // The largest replica share: with uneven shares the slowest replica sets the step.
  const double share = static_cast<double>(l.max_replica_batch());
  t.imbalance = share * static_cast<double>(l.dp) / static_cast<double>(l.global_batch()) - 1.0;

  // One micro-batch through one stage on one device.
  const double batch = share * static_cast<double>(l.dp);  // what dp replicas of that share would take
  const bool lora_or_teacher = in.adapter.enabled() || in.teacher.enabled();
  const double flops = lora_or_teacher ? batch * training_flops_per_sample(in, l.recompute) / world
                                       : batch * m.flops_per_sample * (l.recompute ? 4.0 / 3.0 : 1.0) / world;
  double compute_mb =
      hw.per_thread() ? cpu_compute_seconds(in, l, flops / accum) : flops / hw.achievable_flops(in.precision) / accum;
  if (lora_or_teacher && hw.per_thread() && m.is_transformer() && m.blocks > 0) {
    // The calibrated block timing is for full training: scaled by the FLOPs LoRA or the teacher change.
    compute_mb *= training_flops_per_sample(in, l.recompute) / (m.flops_per_sample * (l.recompute ? 4.0 / 3.0 : 1.0));
  }
  if (in.teacher.enabled() && l.pp > 1) {
    // The teacher runs whole on the pipeline's last stage, which then sets the pace: its forward
    // there, beyond the 1/pp share `flops` spread over every stage.
    const double share = in.teacher.model.flops_per_sample / 3.0 / training_flops_per_sample(in, l.recompute);
    compute_mb *= 1.0 + share * static_cast<double>(l.pp - 1);
  }
  const double layers = m.blocks > 0 ? static_cast<double>(stage_blocks(in, l.pp)) : 1.0;
  // About 12 kernels per block forward, 3 passes (forward, two for backward), plus loss/embedding.
  const double overhead_mb = 3.0 * (12.0 * layers + 4.0) * hw.launch_overhead_s;
  const double mb = static_cast<double>(l.micro_batch);
  double boundary_bytes = 0;  // activations crossing a tensor- or pipeline-parallel boundary
  if (m.is_transformer()) {
    boundary_bytes = mb * static_cast<double>(m.seq_len) * static_cast<double>(m.hidden) * wire_bytes(in.precision);
  } else if (m.blocks > 0) {
    boundary_bytes = mb * m.activation_bytes_per_sample / static_cast<double>(m.blocks);
  }
  double tp_mb = 0, pp_mb = 0;
  if (l.tp > 1) {
    // Megatron layout: 2 allreduces forward and 2 backward per block (+2 when recomputing).
    const double n = layers * (4.0 + (l.recompute ? 2.0 : 0.0));
    tp_mb = n * ring_allreduce_s(boundary_bytes, l.tp, hw.intra_node_bw, hw.latency_s);
  }
  if (l.pp > 1) {
    const bool within_node = static_cast<double>(l.tp * l.pp) <= gpn;
    const double bw = within_node ? hw.intra_node_bw : hw.inter_node_bw / gpn;
    pp_mb = 2.0 * (boundary_bytes / bw + hw.latency_s);  // activations forward, gradients back
  }
  const double t_mb = compute_mb + overhead_mb + tp_mb + pp_mb;
  t.compute = accum * compute_mb;
  t.overhead = accum * overhead_mb;
  t.tp_comm = accum * tp_mb;
  t.pp_comm = accum * pp_mb;
  t.bubble = static_cast<double>(l.pp - 1) * t_mb;
  t.bubble_fraction = static_cast<double>(l.pp - 1) / (accum + static_cast<double>(l.pp - 1));

  const double base = stage_params(m, l.tp, l.pp, stage_blocks(in, l.pp));
  const double P = in.adapter.enabled() ? stage_adapters(in, l) : base;  // the trained parameters
  estimate_dp_comm(in, l, P, compute_mb, t, in.adapter.enabled() ? in.adapter.base_bytes * base : 0.0);
  if (in.teacher.enabled()) teacher_zero3_comm(in, l, flops, compute_mb, t);
  const double updated = P / (l.zero >= 1 ? static_cast<double>(std::max<int64_t>(1, l.dp)) : 1.0);
  t.optimizer = optimizer_step_bytes(in) * updated / hw.memory_bw;
  if (hw.per_thread()) {
    // The measured AdamW step per parameter (SGD moves 12-20 of AdamW's 28 bytes a parameter).
    const CpuThreads th = cpu_threads(in, l);
    // And the gradient path over the rank's parameters: zeroing, the copy into the flat buckets
    // (each micro-batch), the norm and the clipping, about 12 + 12 a micro-batch bytes a parameter.
    const double speed = hw.memory_bound_rate(th.threads) * th.share;
    t.optimizer = hw.optimizer_s * optimizer_step_bytes(in) / 28.0 * updated / speed +
                  (12.0 + 12.0 * accum) * P / hw.elementwise_bw / speed;
  }
  if (l.offload) {
    // On the host: the step at its memory rate, gradients down and parameters up over the link.
    t.optimizer = optimizer_step_bytes(in) * updated / hw.host_memory_rate() + 8.0 * updated / hw.host_link_rate();
  }
  if (l.chunk > 0) estimate_reproducible(in, l, P, t);
  return t;
}

}  // namespace gtrain
