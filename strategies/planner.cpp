// planner.cpp: data-parallel planning with micro-batch / accumulation to fit memory.
#include "strategies/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "runtime/common/errors.h"

namespace gtrain {
namespace {

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

}  // namespace

double estimate_memory_bytes(const PlannerInput& in, int64_t dp, int64_t micro_batch, bool recompute) {
  const double p = static_cast<double>(in.model.params);
  const double opt_state = in.optimizer.name == "adamw" ? 8.0 : (in.optimizer.momentum > 0 ? 4.0 : 0.0);
  const double weights = 4.0 * p, grads = 4.0 * p, state = opt_state * p;
  const double per_sample = recompute ? in.model.recompute_bytes_per_sample : in.model.activation_bytes_per_sample;
  const double act_scale = in.precision.dtype == "fp32" ? 1.0 : 0.6;  // autocast keeps some fp32 copies
  const double acts = per_sample * act_scale * static_cast<double>(micro_batch);
  constexpr double kWorkspace = 64.0 * 1024 * 1024;
  (void)dp;
  return weights + grads + state + acts + kWorkspace;
}

std::vector<int64_t> nearest_valid_global_batches(int64_t b, int64_t dp) {
  std::vector<int64_t> out;
  const int64_t lo = (b / dp) * dp, hi = lo + dp;
  if (lo > 0) out.push_back(lo);
  out.push_back(hi);
  return out;
}

Plan plan_job(const PlannerInput& in) {
  const int64_t B = in.train.global_batch;
  const auto& pc = in.parallel;
  Plan plan;
  plan.world = in.world;
  plan.precision = in.precision.dtype;
  if (pc.mode == "explicit") {
    plan.tp = pc.tp;
    plan.pp = pc.pp;
    plan.zero = pc.zero;
    plan.recompute = pc.recompute;
    plan.dp = pc.dp > 0 ? pc.dp : in.world / (pc.tp * pc.pp);
    if (plan.dp * plan.tp * plan.pp != in.world) {
      throw ConfigError("parallel: dp=" + std::to_string(pc.dp) + " tp=" + std::to_string(pc.tp) + " pp=" +
                        std::to_string(pc.pp) + " do not multiply to the " + std::to_string(in.world) +
                        " granted ranks (dp*tp*pp must equal the world size)");
    }
  } else {
    plan.dp = in.world;
  }
  if (B % plan.dp != 0) {
    auto near = nearest_valid_global_batches(B, plan.dp);
    std::string list;
    for (auto v : near) list += (list.empty() ? "" : " or ") + std::to_string(v);
    throw ConfigError("train.global_batch = " + std::to_string(B) + " cannot be split evenly over dp = " +
                      std::to_string(plan.dp) + " data-parallel ranks; nearest valid global batches: " + list);
  }
  const int64_t per_rank = B / plan.dp;
  std::vector<int64_t> candidates;
  if (pc.micro_batch > 0) {
    if (per_rank % pc.micro_batch != 0) {
      throw ConfigError("parallel.micro_batch = " + std::to_string(pc.micro_batch) + " must divide the per-rank batch " +
                        std::to_string(per_rank) + " (train.global_batch " + std::to_string(B) + " / dp " +
                        std::to_string(plan.dp) + ")");
    }
    candidates.push_back(pc.micro_batch);
  } else {
    for (int64_t m = per_rank; m >= 1; --m) {
      if (per_rank % m == 0) candidates.push_back(m);
    }
  }
  const double budget = in.memory_bytes > 0 ? in.memory_bytes : INFINITY;
  plan.micro_batch = 0;
  for (int64_t m : candidates) {
    const double mem = estimate_memory_bytes(in, plan.dp, m, plan.recompute);
    if (mem <= budget || pc.micro_batch > 0) {
      plan.micro_batch = m;
      plan.grad_accum = per_rank / m;
      plan.est_memory_bytes = mem;
      plan.reason = m == per_rank ? "largest micro-batch fits" : "micro-batch reduced to fit memory";
      if (mem > budget) plan.reason = "micro-batch as configured (exceeds the memory estimate)";
      break;
    }
  }
  if (plan.micro_batch < 1 || (plan.grad_accum < 1)) {
    const double need = estimate_memory_bytes(in, plan.dp, 1, plan.recompute);
    throw ConfigError("no layout fits: micro-batch 1 needs about " + gib(need) + " per rank, " + gib(budget) +
                      " usable (parallel.memory_gb); use fewer parameters or more ranks");
  }
  plan.grad_accum = per_rank / plan.micro_batch;
  plan.validate(in.world, B);
  return plan;
}

}  // namespace gtrain
