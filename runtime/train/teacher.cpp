// teacher.cpp: distill.teacher built, checked and loaded on a rank.
#include "runtime/train/teacher.h"

#include "runtime/core/errors.h"
#include "runtime/core/teacher_stats.h"
#include "runtime/models/model_registry.h"
#include "runtime/train/initial_weights.h"

namespace gtrain {
namespace {

ModelConfig checked_teacher_config(const JobConfig& cfg, int64_t student_vocab) {
  const DistillConfig& d = cfg.distill;
  if (!d.cache.empty()) {
    throw ConfigError("distill.cache = \"" + d.cache + "\": reading a teacher cache is not supported yet",
                      "set distill.teacher and leave distill.cache empty to run the teacher online");
  }
  const ModelConfig m = teacher_model_config(cfg);
  if (m.vocab != student_vocab) {
    throw ConfigError("distill.teacher: " + d.teacher + " has a vocabulary of " + std::to_string(m.vocab) +
                          " tokens, the student's model has " + std::to_string(student_vocab),
                      "distil from a teacher with the student's tokenizer (and set model.vocab to its size)");
  }
  return m;
}

}  // namespace

void check_teacher(const JobConfig& cfg, int64_t student_vocab) {
  checked_teacher_config(cfg, student_vocab);
}

std::shared_ptr<Distillation> build_distillation(const JobConfig& cfg, const DataSpec& spec, int64_t student_vocab,
                                                 torch::Device device) {
  const ModelConfig m = checked_teacher_config(cfg, student_vocab);
  std::shared_ptr<Model> teacher = ModelRegistry::global().create(m, spec);
  load_model_weights(*teacher, cfg.distill.teacher, "distill.teacher");
  teacher->to(device);
  DistillSettings s;
  s.ratio = cfg.distill.kd_ratio;
  s.temperature = cfg.distill.temperature;
  s.kind = parse_kd_divergence(cfg.distill.loss);
  return std::make_shared<Distillation>(std::move(teacher), s);
}

}  // namespace gtrain
