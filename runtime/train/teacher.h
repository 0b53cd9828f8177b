// teacher.h: distillation's frozen teacher on a rank (distill.teacher): its model from its
// config.json or checkpoint manifest, its weights, checked against the student, and the
// Distillation term the student's loss adds (runtime/models/distillation.h).
#pragma once

#include <memory>

#include <torch/torch.h>

#include "runtime/core/config/job_config.h"
#include "runtime/models/distillation.h"

namespace gtrain {

// ConfigError (exit 2) naming distill.teacher when the teacher's vocabulary is not the student's
// (`student_vocab`: the student model's output rows), or its shape cannot be read. Reads no weights.
void check_teacher(const JobConfig& cfg, int64_t student_vocab);

// The teacher whole on `device`, its weights from distill.teacher, frozen, with [distill]'s ratio,
// temperature and divergence; for `spec`'s data. Checks as check_teacher first.
std::shared_ptr<Distillation> build_distillation(const JobConfig& cfg, const DataSpec& spec, int64_t student_vocab,
                                                 torch::Device device);

}  // namespace gtrain
