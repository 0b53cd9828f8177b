// job_sizing.cpp: jobs sized with LibTorch: the data opened, the model built once on the CPU.
#include "launcher/commands/job_sizing.h"

#include <memory>

#include "launcher/launch/run_launch.h"
#include "runtime/core/train_steps.h"
#include "runtime/data/dataset.h"
#include "runtime/models/model_registry.h"

namespace gtrain {

JobDescription describe_job_with_libtorch(const JobConfig& cfg) {
  JobDescription d;
  std::shared_ptr<Dataset> train;
  auto open = [&] {
    if (!train) train = open_datasets(cfg.data, cfg.model, cfg.train.seed).train;
    return train;
  };
  if (auto stats = model_stats_from_config(cfg)) {
    d.stats = *stats;  // sized from the shape: a 13B model is never built here
  } else if (decoder_stats(cfg.model, open()->spec().vocab, &d.stats)) {
    // a decoder sized from its shape and the data's vocabulary
  } else {
    auto& reg = ModelRegistry::global();
    if (!cfg.model.plugin.empty()) reg.load_plugin(cfg.model.plugin);
    if (!reg.has(cfg.model.name)) reg.create(cfg.model, DataSpec{});  // names the unknown model
    auto model = reg.create(cfg.model, open()->spec());
    d.stats = model->stats(open()->spec());
  }
  const auto steps = total_steps_without_data(cfg.train, d.stats.seq_len);
  d.total_steps = steps ? *steps : compute_total_steps(cfg.train, open()->size(), open()->spec().tokens_per_sample());
  return d;
}

}  // namespace gtrain
