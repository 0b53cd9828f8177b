// parallel_layout.h: ParallelLayout, the one set of parallel factors of a job (dp x tp x pp ranks,
// ZeRO stage, micro-batch, gradient accumulation, recompute, pipeline schedule), validated in one
// place with an error naming every factor, and the rank arithmetic over it.
//
// Rank order (Megatron): tp varies fastest, so a tensor-parallel group is adjacent ranks;
//   rank = (dp_index * pp + pp_index) * tp + tp_index.
//
// Uneven shards: dp need not divide the global batch B. Replica r takes B/dp samples, one more on
// the first B%dp replicas (32 over 3: 11, 11, 10); every replica splits its share into grad_accum
// micro-batches that differ by at most one sample (11 in 3: 4, 4, 3), so every rank runs the same
// number of micro-batches (and collectives) per step. micro_batch is then the largest of them.
//
// Chunks (train.reproducible = "bitwise"): every micro-batch is exactly `chunk` samples, chunk c of
// the global batch (samples [c * chunk, (c + 1) * chunk)) runs on replica c % dp as its micro-step
// c / dp. When dp does not divide the chunk count N, the first N % dp replicas run one more
// micro-batch than the others (grad_accum is the most); nothing else in a chunk's arithmetic
// depends on the layout.
#pragma once

#include <cstdint>
#include <string>

namespace gtrain {

struct ParallelLayout {
  int64_t dp = 1;              // data-parallel replicas
  int64_t tp = 1;              // tensor-parallel ranks per replica
  int64_t pp = 1;              // pipeline stages per replica
  int64_t zero = 0;            // ZeRO stage on the dp dimension (0, 1, 2, 3)
  bool offload = false;        // optimizer offload: master weights, optimizer state and step on the host
  int64_t micro_batch = 1;     // samples per rank per forward/backward (uneven: the largest)
  int64_t grad_accum = 1;      // micro-batches per optimizer step, the same on every rank
  int64_t batch = 0;           // global batch (0 = dp * micro_batch * grad_accum, an even split)
  bool recompute = false;      // activation recompute per block
  bool gpipe = false;          // pipeline schedule: GPipe (every micro-batch in flight) instead of 1F1B
  int64_t chunk = 0;           // bitwise mode: samples of every micro-batch, a fixed chunk of the batch (0 = off)
  bool shard_teacher = false;  // distillation under ZeRO-3: the teacher's weights sharded over dp too

  int64_t ranks() const { return dp * tp * pp; }
  int64_t global_batch() const { return batch > 0 ? batch : dp * micro_batch * grad_accum; }
  // Whether every replica runs grad_accum micro-batches of exactly micro_batch samples.
  bool even() const { return global_batch() == dp * micro_batch * grad_accum; }

  // Sets batch = global_batch and grad_accum = accum, and micro_batch to the largest micro-batch
  // that split makes (ceil(ceil(B/dp) / accum)). dp must be set first.
  void split_batch(int64_t global_batch, int64_t accum);

  // Chunk mode: batch = global_batch, chunk = micro_batch = `chunk`, grad_accum = the most chunks
  // a replica runs (ceil(N / dp)). dp must be set first.
  void split_chunks(int64_t global_batch, int64_t chunk_samples);
  // Chunk mode: chunks per step (N), and the micro-batches replica `dp_rank` runs.
  int64_t chunks() const { return chunk > 0 ? global_batch() / chunk : 0; }
  int64_t replica_chunks(int64_t dp_rank) const { return (chunks() - dp_rank + dp - 1) / dp; }
  // Micro-batches replica `dp_rank` runs per step: grad_accum, or its chunks in chunk mode.
  int64_t micro_batches(int64_t dp_rank) const { return chunk > 0 ? replica_chunks(dp_rank) : grad_accum; }

  // Samples replica `dp_rank` takes per step: B/dp, plus one on the first B%dp replicas (chunk mode:
  // its chunks' samples).
  int64_t replica_batch(int64_t dp_rank) const;
  // The smallest and largest replica share (equal when dp divides the batch).
  int64_t min_replica_batch() const { return chunk > 0 ? chunks() / dp * chunk : global_batch() / dp; }
  int64_t max_replica_batch() const {
    return chunk > 0 ? (chunks() + dp - 1) / dp * chunk : (global_batch() + dp - 1) / dp;
  }
  // Samples of replica `dp_rank`'s micro-batch `micro_step` (its share split into grad_accum parts
  // differing by at most one, the larger first).
  int64_t micro_batch_size(int64_t dp_rank, int64_t micro_step) const;
  // Position of that micro-batch's first sample in the global batch. Micro-step i of every replica
  // comes before micro-step i+1 of any; within one, replicas in order. For an even layout this is
  // (micro_step * dp + dp_rank) * micro_batch.
  int64_t micro_batch_offset(int64_t dp_rank, int64_t micro_step) const;
  // "11, 11, 10" (replica shares, run-length folded past four: "11 x 2, 10").
  std::string shares() const;

  // Throws ConfigError listing every factor when a factor is < 1, dp*tp*pp != `world`, the global
  // batch is not `global_batch`, a replica would run an empty micro-batch (grad_accum > B/dp), or
  // micro_batch is not the largest micro-batch of the split, zero is not 0 to 3, or zero 3 meets pp > 1.
  void validate(int64_t world, int64_t global_batch) const;
  // "dp=2 tp=1 pp=1 (dp*tp*pp=2), world=2; micro_batch=16 grad_accum=2 (...=64), global_batch=64"
  std::string factors(int64_t world, int64_t global_batch) const;

  int64_t dp_index(int64_t rank) const { return rank / (tp * pp); }
  int64_t pp_index(int64_t rank) const { return (rank / tp) % pp; }
  int64_t tp_index(int64_t rank) const { return rank % tp; }
  int64_t rank_of(int64_t dp_idx, int64_t pp_idx, int64_t tp_idx) const { return (dp_idx * pp + pp_idx) * tp + tp_idx; }
};

// The largest micro-batch when `share` samples are split into `accum` parts: ceil(share / accum).
inline int64_t largest_part(int64_t share, int64_t accum) {
  return (share + accum - 1) / accum;
}

}  // namespace gtrain
