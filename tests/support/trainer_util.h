// trainer_util.h: the small synthetic jobs the trainer, checkpoint and data-parallel suites train.
#pragma once

#include <memory>
#include <vector>

#include "launcher/commands/run_command.h"
#include "runtime/core/config/job_config.h"
#include "runtime/train/trainer.h"

namespace gtrain {

inline JobConfig synthetic_mlp(int64_t steps, int64_t batch) {
  JobConfig c;
  c.model.name = "mlp";
  c.model.hidden = {32};
  c.data.kind = DataKind::synthetic;
  c.data.synthetic_samples = 4096;
  c.data.synthetic_features = 16;
  c.data.synthetic_classes = 4;
  c.train.global_batch = batch;
  c.train.steps = steps;
  c.train.seed = 3;
  c.log.progress = "none";
  c.optimizer.learning_rate = 3e-3;
  return c;
}

inline std::unique_ptr<Trainer> make_trainer(const JobConfig& c, int64_t micro_batch = 0, TrainerPaths paths = {}) {
  JobConfig cfg = c;
  cfg.parallel.micro_batch = micro_batch;
  validate_job_config(cfg);
  auto comm = std::make_shared<LocalCommunicator>();
  auto parts = assemble_job(cfg, 1, comm);
  return std::make_unique<Trainer>(cfg, parts.plan, comm, parts.model, parts.data, std::move(parts.engine), paths);
}

inline std::vector<torch::Tensor> params_of(Trainer& t) {
  std::vector<torch::Tensor> out;
  for (auto& p : t.model().parameters()) out.push_back(p.detach().clone());
  return out;
}

}  // namespace gtrain
