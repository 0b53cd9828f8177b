// plan_record.cpp: plan.json's fields (see plan_record.h).
#include "runtime/core/run_dir/plan_record.h"

#include "runtime/core/config/parallel_config.h"
#include "runtime/core/run_dir/run_files.h"

namespace gtrain {

PlanRecord PlanRecord::from_plan(const Plan& plan, int64_t requested_global_batch) {
  PlanRecord p;
  p.world = plan.world, p.dp = plan.dp, p.tp = plan.tp, p.pp = plan.pp, p.zero = plan.zero;
  p.offload = name_of(plan.offload ? Offload::optimizer : Offload::none);
  p.micro_batch = plan.micro_batch, p.grad_accum = plan.grad_accum, p.recompute = plan.recompute;
  p.chunk = plan.chunk, p.shard_teacher = plan.shard_teacher;
  p.precision = plan.precision;
  p.est_memory_bytes = plan.est_memory_bytes, p.est_tensor_bytes = plan.est_tensor_bytes;
  p.est_step_seconds = plan.est_step_seconds;
  p.flops_per_step = plan.flops_per_step, p.peak_flops = plan.peak_flops;
  p.global_batch = plan.global_batch();
  p.requested_global_batch = requested_global_batch;
  p.profile = plan.profile;
  p.reason = plan.reason;
  p.summary = plan.summary();
  return p;
}

nlohmann::json PlanRecord::to_json() const {
  return {{"world", world},
          {"dp", dp},
          {"tp", tp},
          {"pp", pp},
          {"zero", zero},
          {"offload", offload},
          {"micro_batch", micro_batch},
          {"grad_accum", grad_accum},
          {"recompute", recompute},
          {"chunk", chunk},
          {"shard_teacher", shard_teacher},
          {"precision", precision},
          {"est_memory_bytes", est_memory_bytes},
          {"est_tensor_bytes", est_tensor_bytes},
          {"est_step_seconds", est_step_seconds},
          {"flops_per_step", flops_per_step},
          {"peak_flops", peak_flops},
          {"global_batch", global_batch},
          {"requested_global_batch", requested_global_batch},
          {"profile", profile},
          {"reason", reason},
          {"summary", summary}};
}

PlanRecord PlanRecord::from_json(const nlohmann::json& j) {
  PlanRecord p;
  if (!j.is_object()) return p;
  const auto integer = [&](const char* key, int64_t& v) {
    if (j.contains(key) && j[key].is_number_integer()) v = j[key].get<int64_t>();
  };
  const auto number = [&](const char* key, double& v) {
    if (j.contains(key) && j[key].is_number()) v = j[key].get<double>();
  };
  const auto text = [&](const char* key, std::string& v) {
    if (j.contains(key) && j[key].is_string()) v = j[key].get<std::string>();
  };
  integer("world", p.world), integer("dp", p.dp), integer("tp", p.tp), integer("pp", p.pp);
  integer("zero", p.zero), text("offload", p.offload), integer("micro_batch", p.micro_batch);
  integer("grad_accum", p.grad_accum), integer("chunk", p.chunk);
  if (j.contains("recompute") && j["recompute"].is_boolean()) p.recompute = j["recompute"].get<bool>();
  if (j.contains("shard_teacher") && j["shard_teacher"].is_boolean()) p.shard_teacher = j["shard_teacher"].get<bool>();
  text("precision", p.precision);
  number("est_memory_bytes", p.est_memory_bytes), number("est_tensor_bytes", p.est_tensor_bytes);
  number("est_step_seconds", p.est_step_seconds), number("flops_per_step", p.flops_per_step);
  number("peak_flops", p.peak_flops), integer("global_batch", p.global_batch);
  integer("requested_global_batch", p.requested_global_batch);
  text("profile", p.profile), text("reason", p.reason), text("summary", p.summary);
  return p;
}

std::optional<PlanRecord> read_plan_record(const std::string& run_dir) {
  const auto j = read_json_file(RunDir(run_dir).plan());
  if (!j.is_object()) return std::nullopt;
  return PlanRecord::from_json(j);
}

void write_plan_record(const std::string& run_dir, const PlanRecord& p) {
  write_json_file(RunDir(run_dir).plan(), p.to_json());
}

}  // namespace gtrain
