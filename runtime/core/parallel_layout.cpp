// parallel_layout.cpp: ParallelLayout validation, with every factor in the message, and the
// arithmetic of uneven replica shares.
#include "runtime/core/parallel_layout.h"

#include <algorithm>
#include <cstdio>

#include "runtime/core/errors.h"

namespace gtrain {

void ParallelLayout::split_batch(int64_t global_batch_value, int64_t accum) {
  batch = global_batch_value;
  grad_accum = accum;
  micro_batch = largest_part((global_batch_value + dp - 1) / dp, accum);
}

void ParallelLayout::split_chunks(int64_t global_batch_value, int64_t chunk_samples) {
  batch = global_batch_value;
  chunk = chunk_samples;
  micro_batch = chunk_samples;
  grad_accum = (chunks() + dp - 1) / dp;
}

int64_t ParallelLayout::replica_batch(int64_t dp_rank) const {
  if (chunk > 0) return replica_chunks(dp_rank) * chunk;
  const int64_t B = global_batch();
  return B / dp + (dp_rank < B % dp ? 1 : 0);
}

int64_t ParallelLayout::micro_batch_size(int64_t dp_rank, int64_t micro_step) const {
  if (chunk > 0) return micro_step * dp + dp_rank < chunks() ? chunk : 0;
  const int64_t n = replica_batch(dp_rank);
  return n / grad_accum + (micro_step < n % grad_accum ? 1 : 0);
}

int64_t ParallelLayout::micro_batch_offset(int64_t dp_rank, int64_t micro_step) const {
  if (chunk > 0) return (micro_step * dp + dp_rank) * chunk;
  const int64_t B = global_batch(), small = B / dp, extra = B % dp;  // `extra` replicas hold small + 1
  // Samples in the first `i` micro-batches of a replica holding `n`.
  auto before = [&](int64_t n, int64_t i) { return i * (n / grad_accum) + std::min(i, n % grad_accum); };
  const int64_t earlier_steps = (dp - extra) * before(small, micro_step) + extra * before(small + 1, micro_step);
  auto size = [&](int64_t n) { return n / grad_accum + (micro_step < n % grad_accum ? 1 : 0); };
  const int64_t large_before = std::min(dp_rank, extra), small_before = dp_rank - large_before;
  return earlier_steps + large_before * size(small + 1) + small_before * size(small);
}

std::string ParallelLayout::shares() const {
  const int64_t B = global_batch();
  const int64_t small = min_replica_batch(), extra = chunk > 0 ? chunks() % dp : B % dp;
  auto run = [&](int64_t n, int64_t count) {
    std::string s;
    if (count <= 0) return s;
    if (count > 4) return std::to_string(n) + " x " + std::to_string(count);
    for (int64_t i = 0; i < count; ++i) s += (i ? ", " : "") + std::to_string(n);
    return s;
  };
  const std::string a = run(small + (chunk > 0 ? chunk : 1), extra), b = run(small, dp - extra);
  return a.empty() ? b : b.empty() ? a : a + ", " + b;
}

std::string ParallelLayout::factors(int64_t world, int64_t global_batch_expected) const {
  char buf[320];
  std::snprintf(buf, sizeof(buf),
                "dp=%lld tp=%lld pp=%lld (dp*tp*pp=%lld), world=%lld; micro_batch=%lld grad_accum=%lld "
                "(replica shares %s), global_batch=%lld",
                (long long)dp, (long long)tp, (long long)pp, (long long)ranks(), (long long)world,
                (long long)micro_batch, (long long)grad_accum, dp >= 1 ? shares().c_str() : "-",
                (long long)global_batch_expected);
  std::string out = buf;
  if (chunk > 0) out += "; chunk=" + std::to_string(chunk) + " (bitwise)";
  return out;
}

void ParallelLayout::validate(int64_t world, int64_t global_batch_expected) const {
  if (dp < 1 || tp < 1 || pp < 1 || micro_batch < 1 || grad_accum < 1 || batch < 0) {
    throw ConfigError("invalid plan: every factor must be >= 1: " + factors(world, global_batch_expected));
  }
  if (ranks() != world) {
    throw ConfigError("invalid plan: dp*tp*pp must equal the world size: " + factors(world, global_batch_expected));
  }
  if (global_batch() != global_batch_expected) {
    throw ConfigError("invalid plan: the layout's global batch " + std::to_string(global_batch()) +
                      " must equal train.global_batch: " + factors(world, global_batch_expected));
  }
  if (chunk > 0) {
    if (global_batch() % chunk != 0 || chunks() < dp) {
      throw ConfigError(
          "invalid plan: in bitwise mode the chunk " + std::to_string(chunk) +
          " must divide the global batch into at least dp chunks: " + factors(world, global_batch_expected));
    }
    if (micro_batch != chunk || grad_accum != (chunks() + dp - 1) / dp) {
      throw ConfigError(
          "invalid plan: in bitwise mode micro_batch must be the chunk and grad_accum the most chunks a "
          "replica runs: " +
          factors(world, global_batch_expected));
    }
    if (tp > 1) {
      throw ConfigError("invalid plan: tp = " + std::to_string(tp) +
                        " in bitwise mode (tensor parallelism changes the forward's arithmetic): " +
                        factors(world, global_batch_expected));
    }
  } else if (grad_accum > min_replica_batch()) {
    throw ConfigError("invalid plan: grad_accum must not exceed the smallest replica share " +
                      std::to_string(min_replica_batch()) +
                      " (a micro-batch would be empty): " + factors(world, global_batch_expected));
  }
  if (chunk == 0 && micro_batch != largest_part(max_replica_batch(), grad_accum)) {
    throw ConfigError("invalid plan: micro_batch must be the largest micro-batch of the split, " +
                      std::to_string(largest_part(max_replica_batch(), grad_accum)) + ": " +
                      factors(world, global_batch_expected));
  }
  if (zero < 0 || zero > 3)
    throw ConfigError("invalid plan: zero must be 0, 1, 2 or 3 (got " + std::to_string(zero) + ")");
  if (zero == 3 && pp > 1)
    throw ConfigError("invalid plan: zero = 3 with pp = " + std::to_string(pp) +
                      ": ZeRO-3 does not run with pipeline parallel (use zero <= 2 with pp, or pp = 1)");
  if (shard_teacher && (zero != 3 || dp < 2))
    throw ConfigError("invalid plan: a sharded teacher needs zero = 3 and dp >= 2 (got zero = " + std::to_string(zero) +
                      ", dp = " + std::to_string(dp) + ")");
}

}  // namespace gtrain
