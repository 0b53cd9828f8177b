// distill_config.h: the [distill] section: knowledge distillation from a frozen teacher model.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/core/config/schema.h"

namespace gtrain {

struct DistillConfig {
  std::string teacher;              // Hugging Face directory, run or checkpoint of the teacher ("" = no distillation)
  std::string cache;                // directory of cached teacher outputs (gtrain distill cache) read instead
  double kd_ratio = 0.5;            // weight of the distillation term: (1 - r) CE + r T^2 KL
  double temperature = 1.0;         // softmax temperature T of teacher and student in the KD term
  std::string loss = "forward_kl";  // forward_kl | reverse_kl | jsd
  int64_t top_k = 64;               // cache: teacher logits kept per token (with the tail's mass)
  std::string online = "full";      // an online teacher's term: full distribution | top_k (as a cache at top_k)
  std::string sharding = "auto";    // under ZeRO-3: auto (sharded where whole does not fit) | zero3 | whole

  bool enabled() const { return !teacher.empty() || !cache.empty(); }

  template <class V>
  void visit(V& v) {
    v("teacher", teacher,
      "Teacher model: a Hugging Face directory, a gtrain run or checkpoint directory (\"\" = no "
      "distillation unless distill.cache is set). Frozen; it must share the student's vocabulary.");
    v("cache", cache,
      "Directory of the teacher's top-k outputs written by `gtrain distill cache` for this data; read "
      "instead of running the teacher (\"\" = run the teacher online).");
    v("kd_ratio", kd_ratio,
      "Weight r of the distillation term: loss = (1 - r) x cross-entropy + r x T^2 x divergence, both "
      "over the trainable tokens of the global batch.",
      cfg::range(0.0, 1.0));
    v("temperature", temperature, "Softmax temperature T applied to teacher and student logits in the KD term.",
      cfg::greater_than(0.0));
    v("loss", loss,
      "Divergence: \"forward_kl\" KL(teacher || student), \"reverse_kl\" KL(student || teacher), or "
      "\"jsd\" (Jensen-Shannon, beta 0.5).",
      cfg::one_of({"forward_kl", "reverse_kl", "jsd"}));
    v("top_k", top_k, "Teacher logits kept per token by `gtrain distill cache` (the rest as one tail mass).",
      cfg::at_least(1));
    v("online", online,
      "An online teacher's term: \"full\" (its whole distribution) or \"top_k\" (its top_k logits and "
      "the tail's mass, as a cache at the same k gives them: the run a student on such a cache reproduces).",
      cfg::one_of({"full", "top_k"}));
    v("sharding", sharding,
      "An online teacher beside a ZeRO-3 student (dp >= 2, tp = 1; with tp it is split as the student is): "
      "\"auto\" holds it whole on every rank where "
      "that fits and shards its weights over the dp ranks (gathered one block at a time) where only that "
      "fits; \"zero3\" always shards it; \"whole\" never does.",
      cfg::one_of({"auto", "zero3", "whole"}));
  }
};

}  // namespace gtrain
