// plan_record.h: plan.json, the plan a run's latest start chose, as a typed record (torch-free).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/core/plan.h"

namespace gtrain {

struct PlanRecord {
  int64_t world = 1, dp = 1, tp = 1, pp = 1, zero = 0;
  std::string offload = "none";  // "optimizer" | "none"
  int64_t micro_batch = 1, grad_accum = 1;
  bool recompute = false;
  bool shard_teacher = false;  // distillation: the teacher sharded over dp under ZeRO-3
  int64_t chunk = 0;           // bitwise mode: the samples of every micro-batch (0 = off)
  std::string precision = "fp32";
  double est_memory_bytes = 0, est_tensor_bytes = 0, est_step_seconds = 0;
  double flops_per_step = 0, peak_flops = 0;
  int64_t global_batch = 0;
  int64_t requested_global_batch = 0;  // train.global_batch as the config asked for it
  std::string profile;                 // the hardware profile the estimates assume ("cpu": CPU ranks)
  std::string reason;                  // why the planner chose it
  std::string summary;                 // Plan::summary()

  static PlanRecord from_plan(const Plan& plan, int64_t requested_global_batch);
  nlohmann::json to_json() const;
  static PlanRecord from_json(const nlohmann::json& j);  // missing or mistyped fields keep their defaults
  bool on_gpus() const { return !profile.empty() && profile != "cpu"; }
};

// RUN_DIR/plan.json (nullopt: none, or not a JSON object).
std::optional<PlanRecord> read_plan_record(const std::string& run_dir);
// Writes RUN_DIR/plan.json (through a rename); Error naming the file when it cannot.
void write_plan_record(const std::string& run_dir, const PlanRecord& p);

}  // namespace gtrain
