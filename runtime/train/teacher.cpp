// teacher.cpp: distill.teacher built, checked and loaded on a rank; distill.cache opened and checked.
#include "runtime/train/teacher.h"

#include "runtime/core/errors.h"
#include "runtime/core/teacher_stats.h"
#include "runtime/models/model_registry.h"
#include "runtime/train/initial_weights.h"

namespace gtrain {
namespace {

ModelConfig checked_teacher_config(const JobConfig& cfg, int64_t student_vocab) {
  const DistillConfig& d = cfg.distill;
  const ModelConfig m = teacher_model_config(cfg);
  if (m.vocab != student_vocab) {
    throw ConfigError("distill.teacher: " + d.teacher + " has a vocabulary of " + std::to_string(m.vocab) +
                          " tokens, the student's model has " + std::to_string(student_vocab),
                      "distil from a teacher with the student's tokenizer (and set model.vocab to its size)");
  }
  return m;
}

DistillSettings settings_of(const DistillConfig& d) {
  DistillSettings s;
  s.ratio = d.kd_ratio;
  s.temperature = d.temperature;
  s.kind = parse_kd_divergence(d.loss);
  if (d.online == "top_k") s.top_k = d.top_k;
  return s;
}

}  // namespace

void check_teacher(const JobConfig& cfg, const Dataset& train, int64_t student_vocab) {
  if (!cfg.distill.cache.empty()) {
    const std::string& t = cfg.distill.teacher;
    check_distill_cache(cfg, train, student_vocab, t.empty() ? "" : base_model_hash(t, "distill.teacher"));
    return;
  }
  checked_teacher_config(cfg, student_vocab);
}

std::shared_ptr<Model> build_teacher(const JobConfig& cfg, const DataSpec& spec, int64_t student_vocab,
                                     torch::Device device) {
  const ModelConfig m = checked_teacher_config(cfg, student_vocab);
  std::shared_ptr<Model> teacher = ModelRegistry::global().create(m, spec);
  load_model_weights(*teacher, cfg.distill.teacher, "distill.teacher");
  teacher->to(device);
  for (auto& p : teacher->parameters()) p.set_requires_grad(false);
  teacher->eval();
  return teacher;
}

std::shared_ptr<Distillation> build_distillation(const JobConfig& cfg, const Dataset& train, int64_t student_vocab,
                                                 torch::Device device, const std::string& teacher_hash,
                                                 const TeacherSharder& shard) {
  if (!cfg.distill.cache.empty())
    return std::make_shared<Distillation>(check_distill_cache(cfg, train, student_vocab, teacher_hash),
                                          settings_of(cfg.distill));
  if (shard) {
    auto teacher = build_teacher(cfg, train.spec(), student_vocab, torch::kCPU);
    TeacherForward forward = shard(teacher);
    return std::make_shared<Distillation>(std::move(teacher), settings_of(cfg.distill), std::move(forward));
  }
  return std::make_shared<Distillation>(build_teacher(cfg, train.spec(), student_vocab, device),
                                        settings_of(cfg.distill));
}

DistillCacheKey distill_cache_key(const JobConfig& cfg, const Dataset& train, int64_t vocab,
                                  const std::string& teacher_hash) {
  DistillCacheKey key;
  key.teacher_hash = teacher_hash;
  key.data = distill_data_key(train.identity(), train.spec().tokens_per_sample());
  key.vocab = vocab;
  key.k = cfg.distill.top_k;
  key.temperature = cfg.distill.temperature;
  return key;
}

std::shared_ptr<DistillCacheReader> check_distill_cache(const JobConfig& cfg, const Dataset& train, int64_t vocab,
                                                        const std::string& teacher_hash) {
  auto reader = std::make_shared<DistillCacheReader>(cfg.distill.cache);
  const std::string hash = teacher_hash.empty() ? reader->manifest().key.teacher_hash : teacher_hash;
  reader->check_key(distill_cache_key(cfg, train, vocab, hash));
  return reader;
}

}  // namespace gtrain
