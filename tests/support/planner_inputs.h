// planner_inputs.h: the planner tests' inputs: a GPT of a given shape on GPUs of a table type, and
// the one-line error a plan gives (empty when one fits).
#pragma once

#include <cstdint>
#include <string>

#include "runtime/core/errors.h"
#include "strategies/planner/planner.h"

namespace gtrain::test {

inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// GPT-2's vocabulary, bf16, 1000 steps, nodes of 8 `gpu`s (a gpu_profile_table name); `mem_gib` > 0
// replaces the card's memory.
inline PlannerInput gpt_input(int64_t layers, int64_t heads, int64_t hidden, int64_t seq, int64_t batch, int64_t world,
                              const std::string& gpu, double mem_gib = 0) {
  PlannerInput in;
  in.model = gpt_stats(layers, heads, hidden, seq, 50257, true);
  in.model_name = "gpt";
  in.train.global_batch = batch;
  in.train.steps = 1000;
  in.precision.dtype = "bf16";
  in.world = world;
  in.gpus_per_node = 8;
  in.profile = *find_gpu_profile(gpu);
  if (mem_gib > 0) in.profile.memory_bytes = mem_gib * kGiB;
  return in;
}

// plan_job's ConfigError text ("" when a layout fits).
inline std::string plan_error(const PlannerInput& in) {
  try {
    plan_job(in);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace gtrain::test
