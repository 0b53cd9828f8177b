// run_command.cpp: the body of `gtrain run` for one rank.
#include "launcher/run_command.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include <nlohmann/json.hpp>

#include "runtime/common/errors.h"
#include "runtime/common/startup.h"
#include "runtime/models/model_registry.h"
#include "strategies/capabilities.h"
#include "strategies/hardware_profile.h"
#include "strategies/planner.h"

namespace fs = std::filesystem;

namespace gtrain {

std::string resolve_run_dir(const JobConfig& c, const RunOptions& o) {
  if (!o.run_dir.empty()) return o.run_dir;
  std::string name = c.log.name;
  if (name.empty()) name = fs::path(o.config_path).stem().string();
  if (name.empty()) name = "run";
  return (fs::path(c.log.root) / name).string();
}

JobParts assemble_job(const JobConfig& cfg, int world_size) {
  auto& registry = ModelRegistry::global();
  if (!cfg.model.plugin.empty()) registry.load_plugin(cfg.model.plugin);
  if (!registry.has(cfg.model.name)) {
    registry.create(cfg.model, DataSpec{});  // reports the unknown name before any data is read
  }
  JobParts parts;
  parts.data = open_datasets(cfg.data, cfg.model, cfg.train.seed);
  torch::manual_seed(static_cast<uint64_t>(cfg.train.seed));
  parts.model = registry.create(cfg.model, parts.data.train->spec());
  parts.stats = parts.model->stats(parts.data.train->spec());

  // Plan with what this runtime executes (strategies/capabilities.h) and this host's CPU profile
  // (calibrated by `gtrain plan --calibrate`, else a conservative default).
  PlannerInput pin;
  pin.model = parts.stats;
  pin.model_name = cfg.model.name;
  pin.train = cfg.train;
  pin.optimizer = cfg.optimizer;
  pin.parallel = cfg.parallel;
  pin.precision = cfg.precision;
  pin.world = world_size;
  pin.gpus_per_node = world_size;
  pin.caps = kRunCapabilities;
  pin.profile = local_cpu_profile(process_environment(), ProcessContext::get().host,
                                  static_cast<int>(std::thread::hardware_concurrency()));
  pin.memory_bytes = cfg.parallel.memory_gb > 0 ? cfg.parallel.memory_gb * 1024.0 * 1024.0 * 1024.0
                                                : 0.8 * available_memory_bytes() / world_size;
  parts.plan = plan_job(pin);
  return parts;
}

RunOutcome run_job(const RunOptions& o) {
  JobConfig cfg = load_job_config(o.config_path, o.sets, process_environment());
  if (o.quiet) cfg.log.progress = "none";
  auto comm = std::make_shared<LocalCommunicator>();
  auto& ctx = ProcessContext::get();
  ctx.rank = comm->rank();
  ctx.world_size = comm->size();

  const int threads = set_torch_threads(cfg.train.threads, 1);
  JobParts parts = assemble_job(cfg, comm->size());
  const Plan& plan = parts.plan;
  const int64_t requested_batch = cfg.train.global_batch;
  cfg.train.global_batch = plan.global_batch();  // differs only within parallel.batch_tolerance
  DataSplits& data = parts.data;

  const std::string run_dir = resolve_run_dir(cfg, o);
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) throw ConfigError(run_dir + ": cannot create run directory: " + ec.message());
  {
    std::ofstream f(fs::path(run_dir) / "config.toml");
    f << to_toml(cfg);
    if (!f) throw Error(run_dir + "/config.toml: cannot write");
  }
  {
    nlohmann::json pj = {{"world", plan.world}, {"dp", plan.dp}, {"tp", plan.tp}, {"pp", plan.pp},
                         {"zero", plan.zero}, {"micro_batch", plan.micro_batch}, {"grad_accum", plan.grad_accum},
                         {"recompute", plan.recompute}, {"precision", plan.precision},
                         {"est_memory_bytes", plan.est_memory_bytes}, {"est_step_seconds", plan.est_step_seconds},
                         {"global_batch", plan.global_batch()}, {"requested_global_batch", requested_batch},
                         {"profile", plan.profile}, {"reason", plan.reason}};
    std::ofstream f(fs::path(run_dir) / "plan.json");
    f << pj.dump(2) << "\n";
  }
  TrainerPaths paths;
  paths.metrics = (fs::path(run_dir) / "metrics.jsonl").string();
  paths.checkpoints = cfg.checkpoint.dir.empty() ? (fs::path(run_dir) / "checkpoints").string() : cfg.checkpoint.dir;

  Trainer trainer(cfg, plan, comm, parts.model, data, paths);
  if (!o.quiet && comm->rank() == 0) {
    std::cout << "gtrain: run " << run_dir << "  model " << cfg.model.name << " (" << parts.stats.params
              << " params)  data " << cfg.data.kind << " (" << data.train->size() << " train samples)\n"
              << "gtrain: plan " << plan.summary() << "  global_batch " << cfg.train.global_batch
              << (requested_batch != cfg.train.global_batch ? " (requested " + std::to_string(requested_batch) + ")" : "")
              << "  steps " << trainer.total_steps() << "  threads " << threads << "\n"
              << "gtrain: " << plan.estimate_summary() << std::endl;
  }
  RunOutcome out;
  out.run_dir = run_dir;
  out.summary = trainer.run();
  if (!o.quiet && comm->rank() == 0) {
    const auto& s = out.summary;
    char buf[256];
    std::snprintf(buf, sizeof(buf), "gtrain: done %lld steps in %.1f s (%.0f samples/s, data wait %.2f s)  train loss %.4f",
                  (long long)s.steps, s.seconds, s.samples_per_s, s.data_wait_s, s.final_loss);
    std::cout << buf;
    if (data.eval) {
      std::snprintf(buf, sizeof(buf), "  eval loss %.4f  accuracy %.2f%%", s.eval.loss, 100.0 * s.eval.accuracy);
      std::cout << buf;
    }
    std::cout << std::endl;
  }
  return out;
}

}  // namespace gtrain
