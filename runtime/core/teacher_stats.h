// teacher_stats.h: the sizes of distillation's frozen teacher (distill.teacher) for the planner, read
// from its Hugging Face config.json or its gtrain checkpoint's manifest (torch-free: no weights read).
#pragma once

#include <optional>
#include <string>

#include "runtime/core/config/job_config.h"
#include "runtime/core/model_stats.h"

namespace gtrain {

// The teacher's stats at the student's sequence length (it runs on the student's samples):
// distill.teacher as a Hugging Face directory (its config.json) or a gtrain run or checkpoint
// directory (the [model] keys and the embedding's vocabulary its manifest records). nullopt when
// [distill] names no teacher or the student reads distill.cache instead (no teacher runs); also when
// the teacher's shape cannot be read, with `note` saying why (the planner then leaves it out).
std::optional<ModelStats> teacher_stats(const JobConfig& cfg, std::string* note);

// The teacher's [model] settings from the same sources, its vocab the embedding's rows (a Hugging
// Face vocab_size), at the student's model.seq_len. ConfigError naming distill.teacher when they
// cannot be read.
ModelConfig teacher_model_config(const JobConfig& cfg);

}  // namespace gtrain
