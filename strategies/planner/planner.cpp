// planner.cpp: candidate enumeration, constraints, ranking and the errors that say what is missing.
#include "strategies/planner/planner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>

#include "runtime/core/adapter_shapes.h"
#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/core/teacher_stats.h"

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

struct Context {
  const PlannerInput& in;
  CostModelInput cost;
  double usable;
  int64_t gpn;
  std::string unit;  // "GPU" or "rank"
  double budget;     // usable / (1 + parallel.memory_margin): what a chosen layout's estimate may reach
};

// "5%": parallel.memory_margin as a percentage.
std::string margin_text(const PlannerInput& in) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g%%", 100.0 * in.parallel.memory_margin);
  return buf;
}

// The global batch dp replicas will use: train.global_batch, split into uneven shares when dp does
// not divide it; with parallel.batch_tolerance > 0 (a user who prefers an even split with a changed
// batch) the nearest batch dp splits evenly within the tolerance instead. -1 when dp exceeds the
// batch (a replica needs at least one sample) and no batch within the tolerance helps.
int64_t batch_for(const PlannerInput& in, int64_t dp) {
  const int64_t B = in.train.global_batch;
  if (B % dp == 0) return B;
  if (in.parallel.batch_tolerance > 0) {
    int64_t best = -1;
    for (int64_t b : nearest_valid_global_batches(B, dp)) {
      const double off = std::fabs(static_cast<double>(b - B)) / static_cast<double>(B);
      if (off <= in.parallel.batch_tolerance + 1e-12 && (best < 0 || std::llabs(b - B) < std::llabs(best - B)))
        best = b;
    }
    if (best > 0) return best;
  }
  return dp <= B ? B : -1;
}

bool bitwise(const PlannerInput& in) {
  return in.train.reproducible == Reproducible::bitwise;
}

// Why bitwise mode leaves tensor parallelism out.
constexpr const char* kBitwiseTp =
    "train.reproducible = \"bitwise\" runs tp = 1 only (tensor parallelism splits each matmul's sum "
    "over ranks, an order no unsplit run computes)";

// Bitwise mode: the chunk sizes worth trying for `batch` over dp replicas. train.reproducible_chunk
// when set (a resumed run keeps its checkpoint's); else the divisors of the batch that leave at
// least max(dp, min(batch, 8)) chunks, so that a later stage on up to 8 ranks still has a chunk
// for each (the chunk is chosen once, at the first stage).
std::vector<int64_t> chunk_candidates(const PlannerInput& in, int64_t batch, int64_t dp) {
  if (in.train.reproducible_chunk > 0) return {in.train.reproducible_chunk};
  const int64_t least = std::max(dp, std::min<int64_t>(batch, 8));
  std::vector<int64_t> out;
  for (int64_t c : divisors(batch)) {
    if (batch / c >= least) out.push_back(c);
  }
  return out;
}

// Why the configured chunk cannot split `batch` over dp replicas, or "".
std::string chunk_problem(const PlannerInput& in, int64_t batch, int64_t dp) {
  const int64_t c = in.train.reproducible_chunk;
  if (c <= 0) return "";
  if (batch % c != 0) {
    return "train.reproducible_chunk = " + num(c) + " does not divide the global batch " + num(batch) +
           (in.batch_from_checkpoint ? " (the checkpoint's)" : "");
  }
  if (batch / c < dp) {
    return "train.reproducible_chunk = " + num(c) + " makes " + num(batch / c) + " chunks a step, fewer than the " +
           num(dp) + " data-parallel replicas (each needs one)";
  }
  return "";
}

// Why (tp, pp) cannot be used at all, or "" when it can.
std::string structural_reason(const Context& c, int64_t tp, int64_t pp) {
  const ModelStats& m = c.in.model;
  const std::string model = c.in.model_name.empty() ? std::string("this model") : "model " + c.in.model_name;
  if (tp > 1 && bitwise(c.in)) return kBitwiseTp;
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
  // MFU's numerator and denominator (the trainer divides by the measured step time).
  const auto& hw = c.cost.profile;
  const double peak = p.precision == "bf16" ? hw.bf16_flops : p.precision == "fp16" ? hw.fp16_flops : hw.fp32_flops;
  p.flops_per_step = training_flops_per_sample(c.cost, false) * static_cast<double>(p.global_batch());
  p.peak_flops = peak * static_cast<double>(hw.kind == DeviceKind::cpu ? p.nodes : p.world);
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

// The grad_accum values worth trying for `batch` over l.dp replicas: each gives micro-batches of
// at most ceil(share / grad_accum). Even shares: the divisors (micro-batches all the same size);
// uneven: every count up to the smallest share that makes a different largest micro-batch.
std::vector<int64_t> accum_candidates(int64_t batch, int64_t dp) {
  const int64_t most = (batch + dp - 1) / dp, least = batch / dp;
  std::vector<int64_t> out;
  if (batch % dp == 0) {
    for (int64_t m : divisors(most)) out.push_back(most / m);
    return out;
  }
  int64_t last_m = -1;
  for (int64_t a = 1; a <= least; ++a) {
    const int64_t m = largest_part(most, a);
    if (m != last_m) out.push_back(a);
    last_m = m;
  }
  return out;
}

// Why a fixed parallel.micro_batch or parallel.pp_microbatches cannot split `batch` over dp
// replicas (a micro-batch would be empty), or "".
std::string fixed_split_problem(const ParallelConfig& pc, int64_t batch, int64_t dp) {
  const int64_t most = (batch + dp - 1) / dp, least = batch / dp;
  const std::string shares = least == most ? num(least) + " samples per replica"
                                           : "replica shares of " + num(most) + " and " + num(least) + " samples";
  const std::string of = " (global batch " + num(batch) + " over dp " + num(dp) + ": " + shares + ")";
  if (pc.pp_microbatches > least) {
    return "parallel.pp_microbatches = " + num(pc.pp_microbatches) + " exceeds the " + num(least) +
           " samples of the smallest replica" + of + ": a micro-batch would be empty";
  }
  if (pc.micro_batch > 0 && largest_part(most, pc.micro_batch) > least) {
    return "parallel.micro_batch = " + num(pc.micro_batch) + " makes " + num(largest_part(most, pc.micro_batch)) +
           " micro-batches per step, more than the " + num(least) + " samples of the smallest replica" + of +
           ": use micro_batch >= " + num(largest_part(most, least));
  }
  return "";
}

// A candidate that cannot run for its shape (`why`), shown with its batch split once.
RankedPlan structural_miss(const Context& c, ParallelLayout l, int64_t batch, const std::string& why) {
  l.split_batch(batch, 1);
  RankedPlan r = make_candidate(c, l, c.in.train.global_batch);
  r.structural = true;
  r.why = why;
  return r;
}

// The candidate `l` when even its smallest split (`smallest`: "micro_batch 4", "chunk 2") is over
// memory: infeasible with what is missing, or, for an explicit layout, accepted with a warning.
RankedPlan over_memory(const Context& c, const ParallelLayout& l, const std::string& smallest, bool explicit_layout) {
  RankedPlan r = make_candidate(c, l, c.in.train.global_batch);
  r.missing_bytes = r.memory.total() - c.usable;
  r.why = "over memory by " + format_size(r.missing_bytes) + " (needs " + format_size(r.memory.total()) + " per " +
          c.unit + ", " + format_size(c.usable) + " usable) even at " + smallest;
  if (explicit_layout) {
    r.feasible = true;
    r.why = "explicit layout; exceeds the memory estimate by " + format_size(r.missing_bytes) +
            " (the estimate errs on the safe side)";
  }
  return r;
}

// The fastest of `splits` (one layout, its batch split in different ways) whose estimate is at most
// `limit`, the one with less memory on a tie; nothing when none is.
std::optional<RankedPlan> fastest_fitting(const Context& c, const std::vector<ParallelLayout>& splits, double limit) {
  std::optional<RankedPlan> best;
  for (const auto& l : splits) {
    if (estimate_memory(c.cost, l).total() > limit) continue;
    RankedPlan r = make_candidate(c, l, c.in.train.global_batch);
    r.feasible = true;
    if (!best || r.time.total() < best->time.total() - 1e-12 ||
        (std::fabs(r.time.total() - best->time.total()) <= 1e-12 && r.memory.total() < best->memory.total())) {
      best = r;
    }
  }
  return best;
}

// The fastest split that fits with the memory margin; else the fastest that fits only without it,
// "tight": infeasible in auto mode (listed, never chosen), accepted with a warning when explicit.
std::optional<RankedPlan> fitting_split(const Context& c, const std::vector<ParallelLayout>& splits,
                                        bool explicit_layout) {
  if (auto best = fastest_fitting(c, splits, c.budget)) return best;
  auto tight = fastest_fitting(c, splits, c.usable);
  if (!tight) return tight;
  tight->tight = true;
  const std::string need = format_size(tight->memory.total()) + " of " + format_size(c.usable) + " usable per " +
                           c.unit + ", inside the " + margin_text(c.in) + " margin (parallel.memory_margin); " +
                           seconds(tight->time.total()) + "/step";
  if (explicit_layout) {
    tight->why = "explicit layout; tight: " + need;
  } else {
    tight->feasible = false;
    tight->why = "tight: " + need;
  }
  return tight;
}

RankedPlan best_chunk(const Context& c, ParallelLayout l, int64_t batch, bool explicit_layout);

// Whether an online teacher is held whole or sharded over dp in layout `l`, the ways worth trying
// (distill.sharding): sharding only under ZeRO-3 with dp >= 2 and tp = 1 (with tp the teacher is
// split as the student is); "auto" tries both (whole, faster,
// wins where it fits). The last one is the leanest: reported when nothing fits.
std::vector<bool> teacher_shardings(const Context& c, const ParallelLayout& l) {
  const TeacherCost& t = c.cost.teacher;
  if (!t.enabled() || l.zero < 3 || l.dp < 2 || l.tp > 1 || t.sharding == "whole") return {false};
  if (t.sharding == "zero3") return {true};
  return {false, true};
}

// For one (dp, tp, pp, zero, recompute): the fastest micro-batch that fits, or the smallest one
// marked over memory. parallel.micro_batch bounds the micro-batch (shares it does not divide are
// split into parts differing by one); parallel.pp_microbatches fixes grad_accum.
RankedPlan best_micro_batch(const Context& c, ParallelLayout l, int64_t batch, bool explicit_layout) {
  if (bitwise(c.in)) return best_chunk(c, l, batch, explicit_layout);
  const ParallelConfig& pc = c.in.parallel;
  if (const std::string why = fixed_split_problem(pc, batch, l.dp); !why.empty()) {
    return structural_miss(c, l, batch, why);
  }
  std::vector<int64_t> accums;
  if (pc.pp_microbatches > 0) {
    accums.push_back(pc.pp_microbatches);
  } else if (pc.micro_batch > 0) {
    accums.push_back(largest_part((batch + l.dp - 1) / l.dp, pc.micro_batch));
  } else {
    accums = accum_candidates(batch, l.dp);
  }
  std::vector<ParallelLayout> splits;
  for (bool shard : teacher_shardings(c, l)) {
    l.shard_teacher = shard;
    for (int64_t a : accums) {
      l.split_batch(batch, a);
      splits.push_back(l);
    }
  }
  if (auto best = fitting_split(c, splits, explicit_layout)) return *best;
  // Nothing fits: report the smallest micro-batch's need (or, explicit, accept it with a warning).
  l.split_batch(batch, *std::max_element(accums.begin(), accums.end()));
  return over_memory(c, l, "micro_batch " + num(l.micro_batch), explicit_layout);
}

// Bitwise mode's best_micro_batch: every micro-batch is one chunk; the fastest chunk size that fits.
RankedPlan best_chunk(const Context& c, ParallelLayout l, int64_t batch, bool explicit_layout) {
  if (const std::string why = chunk_problem(c.in, batch, l.dp); !why.empty()) {
    return structural_miss(c, l, batch, why);
  }
  const std::vector<int64_t> chunks = chunk_candidates(c.in, batch, l.dp);
  if (chunks.empty()) {
    return structural_miss(c, l, batch,
                           "bitwise mode: the global batch " + num(batch) +
                               " has no chunk size leaving one chunk for each of " + num(l.dp) + " replicas");
  }
  std::vector<ParallelLayout> splits;
  for (bool shard : teacher_shardings(c, l)) {
    l.shard_teacher = shard;
    for (int64_t chunk : chunks) {
      l.split_chunks(batch, chunk);
      splits.push_back(l);
    }
  }
  if (auto best = fitting_split(c, splits, explicit_layout)) return *best;
  l.split_chunks(batch, chunks.front());
  return over_memory(c, l, "chunk " + num(l.chunk), explicit_layout);
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
      {"bitwise mode", a.reproducible - b.reproducible},
  };
  const auto* worst = &parts[0];
  for (const auto& p : parts) {
    if (p.second > worst->second) worst = &p;
  }
  return std::string(worst->first) + " +" + seconds(worst->second);
}

}  // namespace

double ranking_time(const RankedPlan& r) {
  return r.time.total() * (r.plan.idle_ranks() > 0 ? 1.0 + kIdleRankMargin : 1.0);
}

namespace {

bool same_time(double a, double b) {
  return std::fabs(a - b) <= kSameTime * std::max(a, b);
}

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "+%.1f%%", 100.0 * fraction);
  return buf;
}

// Why the chosen layout `r` leaves ranks idle: the best layout on all of them, or that none works.
std::string idle_reason(const std::vector<RankedPlan>& all, const RankedPlan& r, const Context& c) {
  std::string out = "uses " + num(r.plan.world) + " of the " + num(r.plan.granted) + " granted " + c.unit + "s (" +
                    num(r.plan.idle_ranks()) + " idle): ";
  for (const auto& o : all) {
    if (!o.feasible || o.plan.idle_ranks() > 0) continue;
    char buf[160];
    std::snprintf(buf, sizeof(buf), "%s/step against %s on all %lld (%s)", seconds(r.time.total()).c_str(),
                  seconds(o.time.total()).c_str(), (long long)o.plan.world, o.plan.summary().c_str());
    return out + buf;
  }
  for (const auto& o : all) {
    if (o.plan.idle_ranks() == 0 && !o.why.empty())
      return out + "no layout of all " + num(c.in.world) + " fits (" + o.why + ")";
  }
  return out + "no layout of all " + num(c.in.world) + " works";
}

// Why the feasible alternative `r` ranks below `best` (the chosen one), with the numbers right:
// slower by X%; faster but on fewer ranks, within kIdleRankMargin; as fast with more memory or on
// fewer ranks.
// Two step times with as many digits (4 to 9) as it takes for them to read differently, and their
// relative difference with as many as it takes not to read 0: "0.40276 s", "0.40259 s", "0.044%".
struct TimePair {
  std::string a, b, percent;
};
TimePair time_pair(double ta, double tb) {
  TimePair t;
  char buf[48];
  for (int digits = 4; digits <= 9; ++digits) {
    std::snprintf(buf, sizeof(buf), "%.*g s", digits, ta);
    t.a = buf;
    std::snprintf(buf, sizeof(buf), "%.*g s", digits, tb);
    t.b = buf;
    if (t.a != t.b) break;
  }
  const double pct = 100.0 * std::fabs(ta / tb - 1.0);
  std::snprintf(buf, sizeof(buf), pct >= 0.1 ? "%.1f%%" : "%.2g%%", pct);
  t.percent = buf;
  return t;
}

std::string lost_because(const RankedPlan& r, const RankedPlan& best, const Context& c) {
  const double ta = r.time.total(), tb = best.time.total();
  const TimePair t = time_pair(ta, tb);
  if (!same_time(ta, tb) && ta > tb) {
    return "slower: " + t.a + "/step vs " + t.b + " (+" + t.percent + "), mostly " + slower_because(r.time, best.time);
  }
  if (!same_time(ta, tb)) {  // faster, but it leaves ranks idle and is not kIdleRankMargin faster
    char buf[200];
    std::snprintf(buf, sizeof(buf),
                  " but leaves %lld of the %lld %ss idle: a layout on fewer ranks must be %.0f%% faster",
                  (long long)r.plan.idle_ranks(), (long long)r.plan.granted, c.unit.c_str(), 100.0 * kIdleRankMargin);
    return t.a + "/step vs " + t.b + " (" + t.percent + " faster)" + buf;
  }
  if (r.plan.world != best.plan.world) {
    return "as fast (" + seconds(ta) + "/step) on fewer " + c.unit + "s (" + num(r.plan.world) + " of " +
           num(best.plan.world) + ")";
  }
  const double more = r.memory.total() - best.memory.total();
  if (more > 0) return "as fast (" + seconds(ta) + "/step), " + format_size(more) + " more memory per " + c.unit;
  return "as fast (" + seconds(ta) + "/step), as much memory (listed after the chosen one)";
}

void explain_ranking(std::vector<RankedPlan>* all, const Context& c) {
  // Feasible first, by ranking_time; as fast: the most ranks, then the least memory. Infeasible:
  // tight ones (by ranking_time: the one the margin kept from being chosen first), then memory
  // misses (least missing first), then the rest.
  auto infeasible_order = [](const RankedPlan& r) { return r.tight ? 0 : r.structural ? 2 : 1; };
  std::stable_sort(all->begin(), all->end(), [&](const RankedPlan& a, const RankedPlan& b) {
    if (a.feasible != b.feasible) return a.feasible;
    if (a.feasible) {
      const double ta = ranking_time(a), tb = ranking_time(b);
      if (!same_time(ta, tb)) return ta < tb;
      if (a.plan.world != b.plan.world) return a.plan.world > b.plan.world;  // as fast: use every rank
      return a.memory.total() < b.memory.total();
    }
    if (infeasible_order(a) != infeasible_order(b)) return infeasible_order(a) < infeasible_order(b);
    if (a.tight) return ranking_time(a) < ranking_time(b);  // the one that would have been chosen first
    return a.missing_bytes < b.missing_bytes;
  });
  int64_t feasible = 0;
  for (const auto& r : *all) feasible += r.feasible;
  int64_t rank = 0;
  for (auto& r : *all) {
    if (!r.feasible) continue;
    r.rank = ++rank;
    if (rank == 1) {
      std::string why = "least time per global batch of " + num(feasible) + " layout" + (feasible == 1 ? "" : "s") +
                        " that fit with the " + margin_text(c.in) + " memory margin";
      if (!r.plan.even()) {
        why += "; replica shares " + r.plan.shares() + " samples (the largest sets the step, " +
               percent(r.time.imbalance) + " over an even split)";
      }
      if (r.plan.idle_ranks() > 0) why += "; " + idle_reason(*all, r, c);
      if (!r.why.empty()) why += "; " + r.why;
      r.why = why;
      continue;
    }
    const std::string own = r.why;
    r.why = lost_because(r, all->front(), c);
    if (r.plan.idle_ranks() > 0 && r.why.find(" idle") == std::string::npos) {
      r.why += "; leaves " + num(r.plan.idle_ranks()) + " of the " + num(r.plan.granted) + " " + c.unit + "s idle";
    }
    if (!own.empty()) r.why += "; " + own;
  }
}

Context make_context(const PlannerInput& in) {
  if (in.world < 1) throw ConfigError("planner: the world size must be >= 1 (got " + num(in.world) + ")");
  if (in.train.global_batch < 1) throw ConfigError("train.global_batch must be >= 1");
  if (!(in.parallel.memory_margin >= 0))
    throw ConfigError("parallel.memory_margin must be >= 0 (got " + std::to_string(in.parallel.memory_margin) + ")");
  Context c{in,
            {},
            usable_memory_bytes(in),
            in.gpus_per_node > 0 ? std::min(in.gpus_per_node, in.world) : in.world,
            in.profile.kind == DeviceKind::gpu ? "GPU" : "rank",
            memory_budget_bytes(in)};
  c.cost.model = in.model;
  // What attention keeps of its [H, T, T] scores depends on the ranks' device and this LibTorch.
  c.cost.model.attention_score_tensors = attention_score_tensors(in.model.dropout);
  c.cost.adapter = in.adapter_cost;
  c.cost.teacher = in.teacher;
  c.cost.teacher.model.attention_score_tensors = attention_score_tensors(in.teacher.model.dropout);
  c.cost.optimizer = in.optimizer.name;
  c.cost.momentum = in.optimizer.momentum;
  c.cost.precision = in.precision.dtype;
  c.cost.threads_per_rank = in.train.threads;
  c.cost.profile = in.profile;
  c.cost.topology = {in.world, c.gpn, (in.world + c.gpn - 1) / c.gpn};
  // gpt's fused output layer + loss (train.fused_loss; "auto" = on for GPU ranks).
  c.cost.fused_loss =
      in.model.is_transformer() && fused_loss_enabled(in.train.fused_loss, in.profile.kind == DeviceKind::gpu);
  cache_stage_blocks(&c.cost);
  return c;
}

std::string batch_reason(const PlannerInput& in, int64_t dp) {
  return "dp=" + num(dp) + " exceeds the global batch " + num(in.train.global_batch) +
         " (a data-parallel replica needs at least one sample)";
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
  if (tp > 1 && bitwise(in)) problems.push_back("tp = " + num(tp) + ": " + kBitwiseTp);
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
  if (pc.zero == 3 && pp > 1) {
    problems.push_back("zero = 3 with pp = " + num(pp) +
                       ": ZeRO-3 does not run with pipeline parallel (use zero <= 2 with pp, or pp = 1)");
  }
  if (pc.offload == Offload::optimizer && !in.caps.offload)
    problems.push_back("offload = \"optimizer\" cannot run yet");
  if (pc.recompute && !in.caps.recompute) problems.push_back("recompute = true: activation recompute cannot run yet");
  if (pc.recompute && m.blocks <= 0) problems.push_back("recompute = true: this model has no blocks to recompute");
  int64_t batch = -1;
  std::string hint;
  if (dp >= 1) {
    batch = batch_for(in, dp);
    if (batch < 0) {
      problems.push_back("train.global_batch = " + num(in.train.global_batch) +
                         (in.batch_from_checkpoint ? " (the batch of the checkpoint this run resumes)" : "") +
                         " must be at least dp = " + num(dp) + " (a data-parallel replica needs a sample)");
    } else if (const std::string why = chunk_problem(in, batch, dp); bitwise(in) && !why.empty()) {
      problems.push_back(why);
      hint = "set train.reproducible_chunk to a divisor of the global batch of at most " + num(batch / dp);
    } else if (const std::string why = fixed_split_problem(pc, batch, dp); !bitwise(in) && !why.empty()) {
      problems.push_back(why);
      hint = pc.pp_microbatches > 0
                 ? "set parallel.pp_microbatches to at most " + num(batch / dp)
                 : "set parallel.micro_batch to at least " + num(largest_part((batch + dp - 1) / dp, batch / dp));
    }
  }
  if (!problems.empty()) {
    std::string msg = "parallel (explicit): dp=" + num(pc.dp) + (pc.dp == 0 ? " (auto)" : "") + " tp=" + num(tp) +
                      " pp=" + num(pp) + " zero=" + num(pc.zero) + " micro_batch=" + num(pc.micro_batch) + " on " +
                      num(in.world) + " ranks (" + num(c.gpn) + " per node), " + num(m.heads) + " heads, " +
                      num(m.blocks) + " blocks, global_batch " + num(in.train.global_batch) + ": ";
    for (size_t i = 0; i < problems.size(); ++i) msg += (i ? "; " : "") + problems[i];
    throw ConfigError(msg, hint);
  }
  ParallelLayout l;
  l.dp = dp, l.tp = tp, l.pp = pp, l.zero = pc.zero, l.recompute = pc.recompute;
  l.offload = pc.offload == Offload::optimizer;
  l.gpipe = pc.pp_schedule == PpSchedule::gpipe;
  RankedPlan r = best_micro_batch(c, l, batch, true);
  r.why = "explicit [parallel] layout" + (r.why.empty() ? std::string() : "; " + r.why);
  return {r};
}

}  // namespace

double usable_memory_bytes(const PlannerInput& in) {
  if (in.memory_bytes > 0) return in.memory_bytes;
  if (in.profile.memory_bytes > 0) return in.profile.usable_bytes();
  return std::numeric_limits<double>::infinity();
}

double memory_budget_bytes(const PlannerInput& in) {
  return usable_memory_bytes(in) / (1.0 + std::max(0.0, in.parallel.memory_margin));
}

std::vector<int64_t> nearest_valid_global_batches(int64_t b, int64_t dp) {
  std::vector<int64_t> out;
  const int64_t lo = (b / dp) * dp, hi = lo + dp;
  if (lo > 0) out.push_back(lo);
  out.push_back(hi);
  return out;
}

namespace {

// Every automatic candidate on exactly c.in.world ranks, appended to `all`: every tp dividing the
// world, every pp dividing world / tp, dp the rest (dividing the batch or not), ZeRO and recompute.
// `granted` > world: a layout that leaves granted - world ranks idle (its structural misses are
// left out: the all-ranks candidates already say why such shapes fail).
void add_world_candidates(const Context& c, int64_t granted, std::vector<RankedPlan>* all) {
  const PlannerInput& in = c.in;
  const bool fewer = granted > in.world;
  for (int64_t tp : divisors(in.world)) {
    for (int64_t pp : divisors(in.world / tp)) {
      const std::string why = structural_reason(c, tp, pp);
      const int64_t dp = in.world / (tp * pp);
      const int64_t batch = why.empty() ? batch_for(in, dp) : -1;
      if (!why.empty() || batch < 0) {
        if (!fewer) all->push_back(structural_candidate(c, tp, pp, why.empty() ? batch_reason(in, dp) : why));
        continue;
      }
      // ZeRO needs dp > 1; ZeRO-3 does not run with pipeline parallel.
      const int64_t max_zero = dp > 1 ? std::min<int64_t>(pp > 1 ? 2 : 3, in.caps.max_zero) : 0;
      const bool can_recompute = in.caps.recompute && in.model.blocks > 0;
      // Optimizer offload moves state from device to host memory: a CPU rank's are the same memory,
      // so it would only add copies (parallel.offload in explicit mode still runs it).
      const bool offload_worth_trying = in.caps.offload && in.profile.kind == DeviceKind::gpu;
      for (int64_t zero = 0; zero <= max_zero; ++zero) {
        for (int rc = 0; rc <= (can_recompute ? 1 : 0); ++rc) {
          for (int off = 0; off <= (offload_worth_trying ? 1 : 0); ++off) {
            ParallelLayout l;
            l.dp = dp, l.tp = tp, l.pp = pp, l.zero = zero, l.recompute = rc == 1, l.offload = off == 1;
            l.gpipe = in.parallel.pp_schedule == PpSchedule::gpipe;
            RankedPlan r = best_micro_batch(c, l, batch, false);
            if (fewer && r.structural) continue;
            r.plan.granted = granted;
            if (r.feasible && r.plan.requested_global_batch > 0) {
              r.why = "global batch " + num(r.plan.global_batch()) + " instead of " + num(in.train.global_batch) +
                      " (within parallel.batch_tolerance)";
            }
            all->push_back(r);
          }
        }
      }
    }
  }
}

}  // namespace

std::vector<int64_t> fewer_rank_counts(int64_t granted, int64_t gpus_per_node, int64_t global_batch) {
  std::vector<int64_t> out;
  const int64_t half = (granted + 1) / 2;
  auto add = [&](int64_t k) {
    if (k >= 1 && k < granted && std::find(out.begin(), out.end(), k) == out.end()) out.push_back(k);
  };
  if (granted <= kAllFewerRanksUpTo) {
    for (int64_t k = granted - 1; k >= half; --k) add(k);
  } else {
    for (int64_t k = granted - 1; k >= std::max(half, granted - 8); --k) add(k);
    for (int64_t unit = 2; unit < granted; unit *= 2) {
      if ((granted / unit) * unit >= half) add((granted / unit) * unit);
    }
    if (gpus_per_node > 1 && (granted / gpus_per_node) * gpus_per_node >= half)
      add((granted / gpus_per_node) * gpus_per_node);
  }
  if (global_batch < granted) add(global_batch);  // pure data parallel: one replica per sample
  std::sort(out.rbegin(), out.rend());
  return out;
}

std::vector<RankedPlan> plan_candidates(const PlannerInput& in) {
  const Context c = make_context(in);
  std::vector<RankedPlan> all;
  if (in.parallel.mode == ParallelMode::given) {
    all = explicit_candidates(c);
    explain_ranking(&all, c);
    return all;
  }
  add_world_candidates(c, in.world, &all);
  if (in.use_fewer_ranks) {
    for (int64_t k : fewer_rank_counts(in.world, c.gpn, in.train.global_batch)) {
      PlannerInput fewer = in;
      fewer.world = k;
      fewer.gpus_per_node = c.gpn;
      add_world_candidates(make_context(fewer), in.world, &all);
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
  // Fits, but only inside the memory margin: say so, and what would accept it.
  for (const auto& r : all) {
    if (!r.tight) continue;
    throw ConfigError("no layout fits with the " + margin_text(in) + " memory margin (parallel.memory_margin): the " +
                          "closest, " + r.plan.summary() + " on " + num(in.world) + " " + c.unit + "s, needs " +
                          format_size(r.memory.total()) + " per " + c.unit + " of " + format_size(c.usable) +
                          " usable, " + format_size(r.memory.total() * (1.0 + in.parallel.memory_margin) - c.usable) +
                          " short of the margin",
                      "use more or larger devices, or lower parallel.memory_margin (the estimate's measured error "
                      "is within 4% on GPUs; docs/planning.md)");
  }
  // Closest to fitting: the candidate that misses by the least memory.
  for (const auto& r : all) {
    if (r.structural || r.missing_bytes <= 0) continue;
    throw ConfigError("no layout fits: the smallest, " + r.plan.summary() + " on " + num(in.world) + " " + c.unit +
                      "s, needs " + format_size(r.memory.total()) + " per " + c.unit + ", " + format_size(c.usable) +
                      " usable: " + format_size(r.missing_bytes) + " missing; use more or larger devices" +
                      (in.precision.dtype == "fp32" ? ", bf16," : "") + " or a smaller model");
  }
  // Otherwise every layout is ruled out for its shape: report the pure data-parallel one (dp above
  // the global batch), then why each layout with tensor or pipeline parallelism was ruled out.
  std::string others;
  for (const auto& r : all) {
    if (r.structural && (r.plan.tp > 1 || r.plan.pp > 1))
      others += (others.empty() ? "; other layouts: " : "; ") + std::string("tp ") + num(r.plan.tp) + " x pp " +
                num(r.plan.pp) + ": " + r.why;
  }
  for (const auto& r : all) {
    if (r.plan.tp == 1 && r.plan.pp == 1 && r.plan.world == in.world) {
      if (r.plan.dp > in.train.global_batch) {
        throw ConfigError("train.global_batch = " + num(in.train.global_batch) +
                              (in.batch_from_checkpoint ? " (the batch of the checkpoint this run resumes)" : "") +
                              " is smaller than the " + num(r.plan.dp) + " data-parallel ranks" + others,
                          "raise train.global_batch to at least " + num(r.plan.dp) + ", or run on at most " +
                              num(in.train.global_batch) + " ranks");
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
  in.adapter = cfg.adapter;
  in.adapter_cost = adapter_cost_for(cfg.model, cfg.adapter);
  if (const auto teacher = teacher_stats(cfg, &in.teacher_note)) {
    in.teacher.model = *teacher;
    const bool half_precision = cfg.precision.dtype == "bf16" || cfg.precision.dtype == "fp16";
    in.teacher.bytes = half_precision || (cfg.adapter.lora() && cfg.adapter.base_dtype == "bf16") ? 2.0 : 4.0;
    in.teacher.sharding = cfg.distill.sharding;
  }
  return in;
}

AdapterCost adapter_cost_for(const ModelConfig& model, const AdapterConfig& adapter) {
  AdapterCost a;
  const auto targets = lora_target_projections(model, adapter);
  if (targets.empty()) return a;
  a.params = lora_parameter_count(model, adapter);
  a.params_per_block = lora_parameters_per_block(model, adapter);
  a.base_bytes = adapter.base_dtype == "bf16" ? 2.0 : 4.0;
  a.rank_elements = static_cast<double>(adapter.rank) * static_cast<double>(targets.size());
  for (const auto& t : targets) {
    a.dropout_elements += adapter.dropout > 0 ? static_cast<double>(t.in) : 0.0;
    // Tensor parallel splits o and down by rows (their input), every other projection by columns.
    const bool row_split = t.name == "o" || t.name == "down";
    a.tp_whole_per_block += static_cast<double>(adapter.rank * (row_split ? t.out : t.in));
  }
  return a;
}

}  // namespace gtrain
