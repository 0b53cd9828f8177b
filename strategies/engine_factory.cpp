// engine_factory.cpp: a job's parallel engine from its plan.
#include "strategies/engine_factory.h"

#include "runtime/core/errors.h"
#include "runtime/models/gpt.h"
#include "strategies/data_parallel.h"
#include "strategies/pipeline_parallel.h"
#include "strategies/process_groups.h"

namespace gtrain {

namespace {

DataParallelOptions data_parallel_options(const JobConfig& cfg, const Plan& plan, Model& model,
                                          const ProcessGroups& groups) {
  DataParallelOptions dpo;
  dpo.zero_stage = plan.zero;
  dpo.offload_optimizer = plan.offload;
  dpo.bitwise = plan.chunk > 0;
  if (plan.zero == 3) {
    // One unit per block, named by the model's parameter names (a block's parameters are the same
    // tensors as the model's).
    std::map<const void*, std::string> name_of;
    for (const auto& kv : model.named_parameters()) name_of[kv.value().unsafeGetTensorImpl()] = kv.key();
    for (const auto& block : model.blocks()) {
      std::vector<std::string> names;
      for (const auto& p : block->parameters()) {
        auto it = name_of.find(p.unsafeGetTensorImpl());
        if (it != name_of.end()) names.push_back(it->second);
      }
      dpo.units.push_back(std::move(names));
    }
  }
  dpo.bucket_bytes = static_cast<int64_t>(cfg.parallel.bucket_mb * 1e6);
  dpo.optimizer = cfg.optimizer;
  dpo.placements = model.parameter_placements();
  dpo.model_comm = groups.model;
  dpo.reports_loss = groups.tp_rank == 0;
  if (groups.tp_rank > 0) {
    // Parameters every tp rank holds whole (norms, row-parallel biases): tp rank 0 counts and writes them.
    for (const auto& kv : model.named_parameters()) {
      if (!dpo.placements.count(kv.key())) dpo.mirrored.insert(kv.key());
    }
  }
  return dpo;
}

}  // namespace

std::unique_ptr<ParallelEngine> build_engine(const JobConfig& cfg, const Plan& plan, const ModelStats& stats,
                                             const std::shared_ptr<Model>& model,
                                             const std::shared_ptr<Communicator>& comm, torch::Device device) {
  if (comm->size() != plan.world) {
    throw Error("build_engine: communicator has " + std::to_string(comm->size()) + " ranks, plan expects " +
                std::to_string(plan.world));
  }
  // Sub-communicators (tp adjacent, then pp, then dp), then the model split over them: each rank
  // built the whole model from the same seed and keeps its part.
  const ProcessGroups groups = make_process_groups(comm, plan);
  if (plan.tp > 1) model->shard_tensor_parallel(groups.tp);
  if (plan.recompute) model->set_recompute(true);
  // Built (and initialised) on the CPU from the same seed everywhere, then moved to the rank's device.
  if (!device.is_cpu()) model->to(device);
  if (auto lm = std::dynamic_pointer_cast<DecoderLm>(model)) {
    // Fused output layer + loss: on CUDA by default (logits of 50k-token vocabularies dominate
    // memory traffic there); the CPU keeps the plain layer unless asked.
    lm->set_fused_loss(fused_loss_enabled(cfg.train.fused_loss, device.is_cuda()));
  }
  const DataParallelOptions dpo = data_parallel_options(cfg, plan, *model, groups);
  if (plan.pp > 1 && plan.zero == 3) {
    throw ConfigError("parallel.zero = 3 with pp = " + std::to_string(plan.pp) +
                      ": ZeRO-3 does not run with pipeline parallel (use zero <= 2 with pp, or pp = 1)");
  }
  if (plan.pp > 1) {
    PipelineOptions po;
    po.schedule = cfg.parallel.pp_schedule;
    return std::make_unique<PipelineEngine>(
        groups, model, pipeline_stage_bounds(stats, static_cast<int64_t>(model->blocks().size()), plan.pp), dpo, po);
  }
  std::vector<std::pair<std::string, torch::Tensor>> named;
  for (const auto& kv : model->named_parameters()) named.emplace_back(kv.key(), kv.value());
  return std::make_unique<DataParallelEngine>(groups.dp, std::move(named), dpo);
}

void check_pipeline_split(Model& model, const Plan& plan) {
  if (plan.pp <= 1) return;
  const int64_t nblocks = static_cast<int64_t>(model.blocks().size());
  if (nblocks == 0)
    throw ConfigError("pp = " + std::to_string(plan.pp) + ": this model has no blocks to split into stages");
  balance_stages(std::vector<double>(nblocks, 1.0), 0, 0, plan.pp);
}

}  // namespace gtrain
