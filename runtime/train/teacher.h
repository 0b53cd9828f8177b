// teacher.h: distillation's frozen teacher on a rank (distill.teacher): its model from its
// config.json or checkpoint manifest, its weights, checked against the student, and the
// Distillation term the student's loss adds (runtime/models/distillation.h), online or from the
// teacher's cached outputs (distill.cache, made by `gtrain distill cache`).
#pragma once

#include <memory>

#include <torch/torch.h>

#include "runtime/core/config/job_config.h"
#include "runtime/core/distill_cache.h"
#include "runtime/data/dataset.h"
#include "runtime/models/distillation.h"

namespace gtrain {

// ConfigError (exit 2) naming distill.teacher when the teacher's vocabulary is not the student's
// (`student_vocab`: the student model's output rows), or its shape cannot be read. Reads no weights.
// With distill.cache: the cache's manifest checked against this run instead (check_distill_cache).
void check_teacher(const JobConfig& cfg, const Dataset& train, int64_t student_vocab);

// The teacher whole on `device`, its weights from distill.teacher, frozen, in eval mode; for
// `spec`'s data. Checks as check_teacher first.
std::shared_ptr<Model> build_teacher(const JobConfig& cfg, const DataSpec& spec, int64_t student_vocab,
                                     torch::Device device);

// The distillation term of the student's loss with [distill]'s ratio, temperature and divergence:
// the teacher built on `device` (build_teacher), or, with distill.cache, the cache read instead
// (checked first against `teacher_hash`, distill.teacher's; "" = the cache's teacher as given).
// `shard` given: the teacher is built on the host and handed to it (ZeRO-3 shards it over the dp
// ranks), and the loss runs the forward it returns.
using TeacherSharder = std::function<TeacherForward(std::shared_ptr<Model> teacher_on_host)>;
std::shared_ptr<Distillation> build_distillation(const JobConfig& cfg, const Dataset& train, int64_t student_vocab,
                                                 torch::Device device, const std::string& teacher_hash,
                                                 const TeacherSharder& shard = nullptr);

// What a cache for this run must have been made for: the teacher's hash (of distill.teacher's
// files; `teacher_hash` when given, e.g. read once and shared), the training data and its
// samples' length (model.seq_len), the vocabulary, distill.top_k and distill.temperature.
DistillCacheKey distill_cache_key(const JobConfig& cfg, const Dataset& train, int64_t vocab,
                                  const std::string& teacher_hash);

// Opens distill.cache and checks its key against this run's (a ConfigError, exit 2, naming what
// differs), the teacher against `teacher_hash` ("" = the cache's own teacher taken as given).
std::shared_ptr<DistillCacheReader> check_distill_cache(const JobConfig& cfg, const Dataset& train, int64_t vocab,
                                                        const std::string& teacher_hash);

}  // namespace gtrain
