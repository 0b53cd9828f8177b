// plan_layouts.cpp: a candidate layout's short name and JSON (plan_layouts.h).
#include "launcher/commands/plan_layouts.h"

#include "runtime/core/config/parallel_config.h"

namespace gtrain {

using nlohmann::json;

std::string short_layout(const Plan& p) {
  if (p.micro_batch <= 0) {
    return "dp" + std::to_string(p.dp) + " tp" + std::to_string(p.tp) + " pp" + std::to_string(p.pp);
  }
  // Uneven replica shares: "mb6~" (the largest micro-batch; some hold one sample less); recompute
  // "rc", optimizer offload "offload", a teacher sharded over dp "ts"; fewer ranks than granted: "(uses 6)".
  return "dp" + std::to_string(p.dp) + " tp" + std::to_string(p.tp) + " pp" + std::to_string(p.pp) + " z" +
         std::to_string(p.zero) + " mb" + std::to_string(p.micro_batch) + (p.even() ? "" : "~") + "x" +
         std::to_string(p.grad_accum) + (p.recompute ? " rc" : "") + (p.offload ? " offload" : "") +
         (p.shard_teacher ? " ts" : "") + (p.idle_ranks() > 0 ? " (uses " + std::to_string(p.world) + ")" : "");
}

json memory_json(const MemoryEstimate& m) {
  return {{"total", m.total()},
          {"params", m.params},
          {"grads", m.grads},
          {"grad_accumulators", m.grad_accumulators},
          {"gathered", m.gathered},
          {"flat_accumulators", m.flat_accumulators},
          {"live", m.live()},
          {"build", m.build},
          {"optimizer", m.optimizer},
          {"frozen", m.frozen},
          {"teacher", m.teacher},
          {"teacher_activations", m.teacher_activations},
          {"activations", m.activations},
          {"workspace", m.workspace},
          {"host", m.host},
          {"activation_per_sample", m.activation_per_sample},
          {"activation_per_sample_no_recompute", m.activation_per_sample_no_recompute},
          {"activation_per_sample_recompute", m.activation_per_sample_recompute},
          {"in_flight_micro_batches", m.in_flight}};
}

json time_json(const TimeEstimate& t) {
  return {{"total", t.total()},
          {"compute", t.compute},
          {"overhead", t.overhead},
          {"tp_comm", t.tp_comm},
          {"pp_comm", t.pp_comm},
          {"bubble", t.bubble},
          {"bubble_fraction", t.bubble_fraction},
          {"dp_comm", t.dp_comm},
          {"zero_comm", t.zero_comm},
          {"optimizer", t.optimizer},
          {"reproducible", t.reproducible},
          {"off_total", t.off_total}};
}

json candidate_json(const RankedPlan& r) {
  const Plan& p = r.plan;
  json j = {{"rank", r.rank}, {"feasible", r.feasible},   {"dp", p.dp},  {"tp", p.tp}, {"pp", p.pp},
            {"zero", p.zero}, {"recompute", p.recompute}, {"why", r.why}};
  j["offload"] = name_of(p.offload ? Offload::optimizer : Offload::none);
  j["tight"] = r.tight;
  j["shard_teacher"] = p.shard_teacher;
  j["world"] = p.world;
  j["idle_ranks"] = p.idle_ranks();
  if (p.micro_batch > 0) {
    j["micro_batch"] = p.micro_batch;
    j["grad_accum"] = p.grad_accum;
    j["global_batch"] = p.global_batch();
    j["replica_shares"] = p.shares();
    j["imbalance"] = r.time.imbalance;
    j["memory_bytes"] = r.memory.total();
    j["step_seconds"] = r.time.total();
    j["memory"] = memory_json(r.memory);
    j["time"] = time_json(r.time);
  }
  if (r.missing_bytes > 0) j["missing_bytes"] = r.missing_bytes;
  return j;
}

}  // namespace gtrain
