// planner.cpp: candidate enumeration, constraints, ranking and the errors that say what is missing.
#include "strategies/planner/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "runtime/core/errors.h"
#include "runtime/core/format.h"

namespace gtrain {
namespace {

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> lo, hi;
  for (int64_t d = 1; d * d <= n; ++d) {
    if (n % d == 0) {
      lo.push_back(d);
      if (d != n / d) hi.push_back(n / d);
    }
  }
  lo.insert(lo.end(), hi.rbegin(), hi.rend());
  return lo;
}

std::string num(int64_t v) {
  return std::to_string(v);
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.4g s", s);
  return buf;
}

std::string join(const std::vector<int64_t>& v, const char* sep) {
  std::string out;
  for (auto x : v) out += (out.empty() ? "" : sep) + num(x);
  return out;
}

struct Context {
  const PlannerInput& in;
  CostModelInput cost;
  double usable;
  int64_t gpn;
  std::string unit;  // "GPU" or "rank"
};

// The global batch dp ranks will use: exact, or the nearest multiple of dp within the tolerance;
// -1 when neither.
int64_t batch_for(const PlannerInput& in, int64_t dp) {
  const int64_t B = in.train.global_batch;
  if (B % dp == 0) return B;
  int64_t best = -1;
  for (int64_t b : nearest_valid_global_batches(B, dp)) {
    const double off = std::fabs(static_cast<double>(b - B)) / static_cast<double>(B);
    if (off <= in.parallel.batch_tolerance + 1e-12 && (best < 0 || std::llabs(b - B) < std::llabs(best - B))) best = b;
  }
  return best;
}

// Why (tp, pp) cannot be used at all, or "" when it can.
std::string structural_reason(const Context& c, int64_t tp, int64_t pp) {
  const ModelStats& m = c.in.model;
  const std::string model = c.in.model_name.empty() ? std::string("this model") : "model " + c.in.model_name;
  if (tp > 1) {
    if (!c.in.caps.tensor_parallel) return "tensor parallel cannot run yet (gtrain run executes tp = 1 only)";
    if (!m.supports_tp || m.heads <= 0) return model + " does not support tensor parallel";
    if (m.heads % tp != 0) return "tp=" + num(tp) + " does not divide the " + num(m.heads) + " attention heads";
    if (tp > c.gpn || c.gpn % tp != 0) {
      return "tp=" + num(tp) + " does not fit within a node of " + num(c.gpn) + " " + c.unit + "s";
    }
  }
  if (pp > 1) {
    if (!c.in.caps.pipeline_parallel) return "pipeline parallel cannot run yet (gtrain run executes pp = 1 only)";
    if (!m.supports_pp || m.blocks <= 0) return model + " cannot be split into pipeline stages";
    if (pp > m.blocks) return "pp=" + num(pp) + " exceeds the " + num(m.blocks) + " blocks (a stage needs one)";
  }
  return "";
}

RankedPlan make_candidate(const Context& c, const ParallelLayout& l, int64_t requested_batch) {
  RankedPlan r;
  Plan& p = r.plan;
  p.world = c.in.world;
  static_cast<ParallelLayout&>(p) = l;
  p.precision = c.in.precision.dtype;
  p.gpus_per_node = c.gpn;
  p.nodes = (c.in.world + c.gpn - 1) / c.gpn;
  p.profile = c.in.profile.name;
  if (requested_batch != p.global_batch()) p.requested_global_batch = requested_batch;
  r.memory = estimate_memory(c.cost, l);
  r.time = estimate_time(c.cost, l);
  p.est_memory_bytes = r.memory.total();
  p.est_tensor_bytes = r.memory.tensors();
  p.est_step_seconds = r.time.total();
  return r;
}

RankedPlan structural_candidate(const Context& c, int64_t tp, int64_t pp, const std::string& why) {
  RankedPlan r;
  r.plan.world = c.in.world;
  r.plan.tp = tp, r.plan.pp = pp, r.plan.dp = c.in.world / (tp * pp);
  r.plan.micro_batch = 0, r.plan.grad_accum = 0;
  r.plan.precision = c.in.precision.dtype;
  r.plan.gpus_per_node = c.gpn;
  r.plan.nodes = (c.in.world + c.gpn - 1) / c.gpn;
  r.plan.profile = c.in.profile.name;
  r.structural = true;
  r.why = why;
  return r;
}

// For one (dp, tp, pp, zero, recompute): the fastest micro-batch that fits, or the smallest one
// marked over memory.
RankedPlan best_micro_batch(const Context& c, ParallelLayout l, int64_t batch, bool explicit_layout) {
  const int64_t per_rank = batch / l.dp;
  std::vector<int64_t> ms;
  const int64_t fixed = c.in.parallel.micro_batch;
  if (fixed > 0) {
    if (per_rank % fixed != 0) {
      ParallelLayout bad = l;
      bad.micro_batch = fixed, bad.grad_accum = std::max<int64_t>(1, per_rank / fixed);
      RankedPlan r = make_candidate(c, bad, c.in.train.global_batch);
      r.structural = true;
      r.why = "parallel.micro_batch = " + num(fixed) + " does not divide the per-rank batch " + num(per_rank) +
              " (global batch " + num(batch) + " / dp " + num(l.dp) + ")";
      return r;
    }
    ms.push_back(fixed);
  } else {
    ms = divisors(per_rank);
  }
  RankedPlan best;
  bool have = false;
  for (int64_t m : ms) {
    l.micro_batch = m;
    l.grad_accum = per_rank / m;
    const MemoryEstimate mem = estimate_memory(c.cost, l);
    if (mem.total() > c.usable) continue;
    RankedPlan r = make_candidate(c, l, c.in.train.global_batch);
    r.feasible = true;
    if (!have || r.time.total() < best.time.total() - 1e-12 ||
        (std::fabs(r.time.total() - best.time.total()) <= 1e-12 && r.memory.total() < best.memory.total())) {
      best = r;
      have = true;
    }
  }
  if (have) return best;
  // Nothing fits: report the smallest micro-batch's need (or, explicit, accept it with a warning).
  l.micro_batch = ms.front();
  l.grad_accum = per_rank / l.micro_batch;
  RankedPlan r = make_candidate(c, l, c.in.train.global_batch);
  r.missing_bytes = r.memory.total() - c.usable;
  r.why = "over memory by " + format_size(r.missing_bytes) + " (needs " + format_size(r.memory.total()) + " per " +
          c.unit + ", " + format_size(c.usable) + " usable) even at micro_batch " + num(l.micro_batch);
  if (explicit_layout) {
    r.feasible = true;
    r.why = "explicit layout; exceeds the memory estimate by " + format_size(r.missing_bytes) +
            " (the estimate errs on the safe side)";
  }
  return r;
}

// The largest component by which `a` is slower than `b`.
std::string slower_because(const TimeEstimate& a, const TimeEstimate& b) {
  const std::pair<const char*, double> parts[] = {
      {"compute", a.compute - b.compute},
      {"per-micro-batch overhead", a.overhead - b.overhead},
      {"tensor-parallel communication", a.tp_comm - b.tp_comm},
      {"pipeline sends", a.pp_comm - b.pp_comm},
      {"pipeline bubble", a.bubble - b.bubble},
      {"data-parallel communication", a.dp_comm - b.dp_comm},
      {"ZeRO all-gather", a.zero_comm - b.zero_comm},
      {"optimizer step", a.optimizer - b.optimizer},
  };
  const auto* worst = &parts[0];
  for (const auto& p : parts) {
    if (p.second > worst->second) worst = &p;
  }
  return std::string(worst->first) + " +" + seconds(worst->second);
}

void explain_ranking(std::vector<RankedPlan>* all, const Context& c) {
  std::stable_sort(all->begin(), all->end(), [](const RankedPlan& a, const RankedPlan& b) {
    if (a.feasible != b.feasible) return a.feasible;
    if (a.feasible) {
      const double ta = a.time.total(), tb = b.time.total();
      if (std::fabs(ta - tb) > 1e-12 * std::max(ta, tb)) return ta < tb;
      return a.memory.total() < b.memory.total();
    }
    if (a.structural != b.structural) return !a.structural;  // memory misses first: closest to fitting
    return a.missing_bytes < b.missing_bytes;
  });
  int64_t feasible = 0;
  for (const auto& r : *all) feasible += r.feasible;
  int64_t rank = 0;
  for (auto& r : *all) {
    if (!r.feasible) continue;
    r.rank = ++rank;
    if (rank == 1) {
      std::string why =
          "least time per global batch of " + num(feasible) + " feasible layout" + (feasible == 1 ? "" : "s");
      if (!r.why.empty()) why += "; " + r.why;
      r.why = why;
      continue;
    }
    const RankedPlan& best = all->front();
    const double tb = best.time.total(), ta = r.time.total();
    char buf[160];
    if (ta > tb * (1 + 1e-9)) {
      std::snprintf(buf, sizeof(buf), "slower: %s/step vs %s (+%.1f%%), mostly ", seconds(ta).c_str(),
                    seconds(tb).c_str(), 100.0 * (ta / tb - 1.0));
      r.why = buf + slower_because(r.time, best.time) + (r.why.empty() ? "" : "; " + r.why);
    } else {
      r.why = "as fast, " + format_size(r.memory.total() - best.memory.total()) + " more memory per " + c.unit +
              (r.why.empty() ? "" : "; " + r.why);
    }
  }
}

Context make_context(const PlannerInput& in) {
  if (in.world < 1) throw ConfigError("planner: the world size must be >= 1 (got " + num(in.world) + ")");
  if (in.train.global_batch < 1) throw ConfigError("train.global_batch must be >= 1");
  Context c{in,
            {},
            usable_memory_bytes(in),
            in.gpus_per_node > 0 ? std::min(in.gpus_per_node, in.world) : in.world,
            in.profile.kind == "gpu" ? "GPU" : "rank"};
  c.cost.model = in.model;
  // What attention keeps of its [H, T, T] scores depends on the ranks' device and this LibTorch.
  c.cost.model.attention_score_tensors = attention_score_tensors(in.model.dropout);
  c.cost.optimizer = in.optimizer.name;
  c.cost.momentum = in.optimizer.momentum;
  c.cost.precision = in.precision.dtype;
  c.cost.profile = in.profile;
  c.cost.topology = {in.world, c.gpn, (in.world + c.gpn - 1) / c.gpn};
  // gpt's fused output layer + loss (train.fused_loss; "auto" = on for GPU ranks).
  c.cost.fused_loss = in.model.is_transformer() && fused_loss_enabled(in.train.fused_loss, in.profile.kind == "gpu");
  return c;
}

std::string batch_reason(const PlannerInput& in, int64_t dp) {
  return "global_batch " + num(in.train.global_batch) + " is not divisible by dp=" + num(dp) +
         " (nearest valid: " + join(nearest_valid_global_batches(in.train.global_batch, dp), ", ") + ")";
}

// Explicit mode: one layout, every wrong factor named in one error.
std::vector<RankedPlan> explicit_candidates(const Context& c) {
  const PlannerInput& in = c.in;
  const ParallelConfig& pc = in.parallel;
  const ModelStats& m = in.model;
  const int64_t tp = pc.tp, pp = pc.pp;
  const int64_t dp = pc.dp > 0 ? pc.dp : (in.world % (tp * pp) == 0 ? in.world / (tp * pp) : 0);
  std::vector<std::string> problems;
  if (pc.dp == 0 && dp == 0) {
    problems.push_back("tp*pp = " + num(tp * pp) + " must divide the " + num(in.world) +
                       " granted ranks (dp = 0 takes the rest)");
  } else if (dp * tp * pp != in.world) {
    problems.push_back("dp*tp*pp = " + num(dp * tp * pp) + " must equal the " + num(in.world) + " granted ranks");
  }
  if (tp > 1) {
    if (!in.caps.tensor_parallel)
      problems.push_back("tp = " + num(tp) + ": tensor parallel cannot run yet (tp = 1 only)");
    if (!m.supports_tp || m.heads <= 0)
      problems.push_back("tp = " + num(tp) + ": this model does not support tensor parallel");
    else if (m.heads % tp != 0)
      problems.push_back("tp = " + num(tp) + " must divide the " + num(m.heads) + " attention heads");
    if (tp > c.gpn || c.gpn % tp != 0)
      problems.push_back("tp = " + num(tp) + " must fit within a node of " + num(c.gpn) + " " + c.unit + "s");
  }
  if (pp > 1) {
    if (!in.caps.pipeline_parallel)
      problems.push_back("pp = " + num(pp) + ": pipeline parallel cannot run yet (pp = 1 only)");
    if (!m.supports_pp || m.blocks <= 0)
      problems.push_back("pp = " + num(pp) + ": this model cannot be split into stages");
    else if (pp > m.blocks)
      problems.push_back("pp = " + num(pp) + " must not exceed the " + num(m.blocks) + " blocks (a stage needs one)");
  }
  if (pc.zero > in.caps.max_zero) {
    problems.push_back("zero = " + num(pc.zero) + ": ZeRO above stage " + num(in.caps.max_zero) + " cannot run yet");
  }
  if (pc.recompute && !in.caps.recompute) problems.push_back("recompute = true: activation recompute cannot run yet");
  if (pc.recompute && m.blocks <= 0) problems.push_back("recompute = true: this model has no blocks to recompute");
  int64_t batch = -1;
  if (dp >= 1) {
    batch = batch_for(in, dp);
    if (batch < 0 && in.parallel.batch_from_checkpoint) {
      problems.push_back("train.global_batch = " + num(in.train.global_batch) +
                         " (the batch of the checkpoint this run resumes) must be divisible by dp = " + num(dp) +
                         ": choose a dp that divides it, or start over with --no-resume");
    } else if (batch < 0) {
      problems.push_back(
          "train.global_batch = " + num(in.train.global_batch) + " must be divisible by dp = " + num(dp) +
          " (nearest valid: " + join(nearest_valid_global_batches(in.train.global_batch, dp), ", ") + ")");
    } else if (pc.micro_batch > 0 && (batch / dp) % pc.micro_batch != 0) {
      problems.push_back("micro_batch = " + num(pc.micro_batch) + " must divide the per-rank batch " + num(batch / dp));
    }
  }
  if (!problems.empty()) {
    std::string msg = "parallel (explicit): dp=" + num(pc.dp) + (pc.dp == 0 ? " (auto)" : "") + " tp=" + num(tp) +
                      " pp=" + num(pp) + " zero=" + num(pc.zero) + " micro_batch=" + num(pc.micro_batch) + " on " +
                      num(in.world) + " ranks (" + num(c.gpn) + " per node), " + num(m.heads) + " heads, " +
                      num(m.blocks) + " blocks, global_batch " + num(in.train.global_batch) + ": ";
    for (size_t i = 0; i < problems.size(); ++i) msg += (i ? "; " : "") + problems[i];
    throw ConfigError(msg);
  }
  ParallelLayout l;
  l.dp = dp, l.tp = tp, l.pp = pp, l.zero = pc.zero, l.recompute = pc.recompute;
  l.gpipe = pc.pp_schedule == "gpipe";
  RankedPlan r = best_micro_batch(c, l, batch, true);
  r.why = "explicit [parallel] layout" + (r.why.empty() ? std::string() : "; " + r.why);
  return {r};
}

}  // namespace

double usable_memory_bytes(const PlannerInput& in) {
  if (in.memory_bytes > 0) return in.memory_bytes;
  if (in.profile.memory_bytes > 0) return in.profile.memory_bytes;
  return std::numeric_limits<double>::infinity();
}

std::vector<int64_t> nearest_valid_global_batches(int64_t b, int64_t dp) {
  std::vector<int64_t> out;
  const int64_t lo = (b / dp) * dp, hi = lo + dp;
  if (lo > 0) out.push_back(lo);
  out.push_back(hi);
  return out;
}

std::vector<RankedPlan> plan_candidates(const PlannerInput& in) {
  const Context c = make_context(in);
  std::vector<RankedPlan> all;
  if (in.parallel.mode == "explicit") {
    all = explicit_candidates(c);
    explain_ranking(&all, c);
    return all;
  }
  for (int64_t tp : divisors(in.world)) {
    for (int64_t pp : divisors(in.world / tp)) {
      const std::string why = structural_reason(c, tp, pp);
      if (!why.empty()) {
        all.push_back(structural_candidate(c, tp, pp, why));
        continue;
      }
      const int64_t dp = in.world / (tp * pp);
      const int64_t batch = batch_for(in, dp);
      if (batch < 0) {
        all.push_back(structural_candidate(c, tp, pp, batch_reason(in, dp)));
        continue;
      }
      const int64_t max_zero = dp > 1 ? std::min<int64_t>(2, in.caps.max_zero) : 0;  // ZeRO needs dp > 1
      const bool can_recompute = in.caps.recompute && in.model.blocks > 0;
      for (int64_t zero = 0; zero <= max_zero; ++zero) {
        for (int rc = 0; rc <= (can_recompute ? 1 : 0); ++rc) {
          ParallelLayout l;
          l.dp = dp, l.tp = tp, l.pp = pp, l.zero = zero, l.recompute = rc == 1;
          l.gpipe = in.parallel.pp_schedule == "gpipe";
          RankedPlan r = best_micro_batch(c, l, batch, false);
          if (r.feasible && r.plan.requested_global_batch > 0) {
            r.why = "global batch " + num(r.plan.global_batch()) + " instead of " + num(in.train.global_batch) +
                    " (within parallel.batch_tolerance)";
          }
          all.push_back(r);
        }
      }
    }
  }
  explain_ranking(&all, c);
  return all;
}

Plan plan_job(const PlannerInput& in) {
  const auto all = plan_candidates(in);
  if (!all.empty() && all.front().feasible) {
    Plan p = all.front().plan;
    p.reason = all.front().why;
    return p;
  }
  const Context c = make_context(in);
  // Closest to fitting: the candidate that misses by the least memory.
  for (const auto& r : all) {
    if (r.structural || r.missing_bytes <= 0) continue;
    throw ConfigError("no layout fits: the smallest, " + r.plan.summary() + " on " + num(in.world) + " " + c.unit +
                      "s, needs " + format_size(r.memory.total()) + " per " + c.unit + ", " + format_size(c.usable) +
                      " usable: " + format_size(r.missing_bytes) + " missing; use more or larger devices" +
                      (in.precision.dtype == "fp32" ? ", bf16," : "") + " or a smaller model");
  }
  // Otherwise no dp can split the batch: report the pure data-parallel one, then why each layout
  // with tensor or pipeline parallelism was ruled out (every factor named).
  std::string others;
  for (const auto& r : all) {
    if (r.structural && (r.plan.tp > 1 || r.plan.pp > 1))
      others += (others.empty() ? "; other layouts: " : "; ") + std::string("tp ") + num(r.plan.tp) + " x pp " +
                num(r.plan.pp) + ": " + r.why;
  }
  for (const auto& r : all) {
    if (r.plan.tp == 1 && r.plan.pp == 1) {
      const int64_t dp = r.plan.dp;
      if (in.train.global_batch % dp != 0 && in.parallel.batch_from_checkpoint) {
        throw ConfigError("train.global_batch = " + num(in.train.global_batch) +
                          ", the batch of the checkpoint this run resumes, cannot be split evenly over dp = " +
                          num(dp) + " data-parallel ranks; resume on a rank count whose data-parallel size divides " +
                          num(in.train.global_batch) + ", or start over with --no-resume" + others);
      }
      if (in.train.global_batch % dp != 0) {
        throw ConfigError("train.global_batch = " + num(in.train.global_batch) + " cannot be split evenly over dp = " +
                          num(dp) + " data-parallel ranks; nearest valid global batches: " +
                          join(nearest_valid_global_batches(in.train.global_batch, dp), " or ") +
                          " (or allow a change with parallel.batch_tolerance)" + others);
      }
      throw ConfigError("no layout of " + num(in.world) + " ranks works: " + r.why + others);
    }
  }
  throw ConfigError("no layout of " + num(in.world) + " ranks works");
}

PlannerInput planner_input_for(const JobConfig& cfg, const ModelStats& stats, int64_t world) {
  PlannerInput in;
  in.model = stats;
  in.model_name = cfg.model.name;
  in.train = cfg.train;
  in.optimizer = cfg.optimizer;
  in.parallel = cfg.parallel;
  in.precision = cfg.precision;
  in.world = world;
  return in;
}

}  // namespace gtrain
