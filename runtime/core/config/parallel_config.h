// parallel_config.h: the [parallel] section: automatic or explicit dp/tp/pp/ZeRO and micro-batching.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "runtime/core/config/enum_names.h"
#include "runtime/core/config/schema.h"

namespace gtrain {

// parallel.mode: who chooses the layout ("auto": the planner; "explicit": the keys below).
enum class ParallelMode { automatic, given };
constexpr std::array<EnumName<ParallelMode>, 2> enum_names(ParallelMode) {
  return {{{ParallelMode::automatic, "auto"}, {ParallelMode::given, "explicit"}}};
}

// parallel.offload: where the optimizer's master weights, state and step live.
enum class Offload { none, optimizer };
constexpr std::array<EnumName<Offload>, 2> enum_names(Offload) {
  return {{{Offload::none, "none"}, {Offload::optimizer, "optimizer"}}};
}

// parallel.pp_schedule: the order of a pipeline's forwards and backwards.
enum class PpSchedule { one_f_one_b, gpipe };
constexpr std::array<EnumName<PpSchedule>, 2> enum_names(PpSchedule) {
  return {{{PpSchedule::one_f_one_b, "1f1b"}, {PpSchedule::gpipe, "gpipe"}}};
}

struct ParallelConfig {
  ParallelMode mode = ParallelMode::automatic;       // auto: the planner picks the layout; explicit: the fields below
  int64_t dp = 0;                                    // explicit: data-parallel ranks (0 = world / (tp * pp))
  int64_t tp = 1;                                    // explicit: tensor-parallel ranks
  int64_t pp = 1;                                    // explicit: pipeline stages
  int64_t zero = 0;                                  // explicit: ZeRO stage on the dp dimension (0, 1, 2, 3)
  Offload offload = Offload::none;                   // explicit: optimizer = master weights, state and step on the host
  int64_t micro_batch = 0;                           // most samples per rank per forward/backward (0 = planner picks)
  bool recompute = false;                            // explicit: recompute activations per block in backward
  PpSchedule pp_schedule = PpSchedule::one_f_one_b;  // pipeline schedule: 1f1b or gpipe
  int64_t pp_microbatches = 0;      // pipeline: micro-batches per step per replica (0 = from micro_batch)
  double memory_gb = 0.0;           // usable memory per rank for planning (0 = detect)
  double memory_margin = 0.05;      // a chosen layout's estimate + this fraction of it fits the usable memory
  double bucket_mb = 25.0;          // data parallel: gradient bucket size
  double collective_timeout_s = 0;  // no progress this long is a hang (0 = auto: max(5 x slowest step, 30 s))
  double batch_tolerance = 0.0;     // fraction the global batch may move to split evenly over dp
                                    // (0 = exact: shares that differ by one sample when dp does not divide it)

  template <class V>
  void visit(V& v) {
    v("mode", mode,
      "\"auto\": plan dp/tp/pp/ZeRO/micro-batch for the granted devices; "
      "\"explicit\": use dp, tp, pp, zero, micro_batch as given.");
    v("dp", dp, "explicit: data-parallel size (0 = world size / (tp * pp)).", cfg::at_least(0));
    v("tp", tp, "explicit: tensor-parallel size.", cfg::at_least(1));
    v("pp", pp, "explicit: pipeline-parallel stages.", cfg::at_least(1));
    v("zero", zero,
      "explicit: ZeRO stage over data parallel (0 = off, 1 = optimizer state, 2 = + gradients, "
      "3 = + parameters, gathered one block at a time).",
      cfg::range(0, 3));
    v("offload", offload,
      "explicit: \"optimizer\" keeps the fp32 master weights and the optimizer state in host memory "
      "and runs the optimizer step on the CPU (with any ZeRO stage); \"none\" keeps them on the device.");
    v("micro_batch", micro_batch,
      "Most samples per rank per forward/backward; a share it does not divide is split into "
      "micro-batches that differ by one sample (0 = the planner picks).",
      cfg::at_least(0));
    v("recompute", recompute, "explicit: recompute activations per block during backward to save memory.");
    v("pp_schedule", pp_schedule,
      "Pipeline schedule when pp > 1: \"1f1b\" (one forward, one backward: at most "
      "pp micro-batches of activations in flight) or \"gpipe\" (all forwards, then all backwards).");
    v("pp_microbatches", pp_microbatches,
      "Micro-batches per optimizer step per data-parallel replica (at most the smallest replica's "
      "share of global_batch); its share is split into that many, differing by at most one sample. More "
      "micro-batches shrink the pipeline bubble (pp-1)/(m+pp-1) (0 = from micro_batch).",
      cfg::at_least(0));
    v("memory_gb", memory_gb, "Usable memory per rank in GiB for planning (0 = detect).", cfg::at_least(0.0));
    v("memory_margin", memory_margin,
      "Fraction of its memory estimate a chosen layout keeps free (the estimate's measured error: "
      "within 4% below on GPUs, docs/planning.md); layouts that fit only without it are listed as "
      "tight, not chosen.",
      cfg::range(0.0, 1.0));
    v("bucket_mb", bucket_mb,
      "Data parallel: gradient bucket size in MB; full buckets are all-reduced while "
      "backward continues.",
      cfg::greater_than(0.0));
    v("collective_timeout_s", collective_timeout_s,
      "Seconds without progress after which a rank counts as hung (a peer died, a deadlock, a stuck "
      "collective): the launching gtrain names it and stops every rank, then restarts them "
      "(schedule.max_restarts). 0 = auto: max(5 x the slowest of the last 20 steps, 30 s) once steps "
      "have started, schedule.startup_timeout_s before, and a save's or evaluation's own measured "
      "duration x5 while one runs.",
      cfg::at_least(0.0));
    v("batch_tolerance", batch_tolerance,
      "Fraction by which the planner may change train.global_batch so that the data-parallel size "
      "splits it evenly (0 = keep it exactly: replicas then take shares that differ by one sample, "
      "32 over 3 as 11, 11, 10).",
      cfg::range(0.0, 0.5));
  }
};

}  // namespace gtrain
