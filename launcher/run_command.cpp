// run_command.cpp: the body of `gtrain run` for one rank.
#include "launcher/run_command.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include <nlohmann/json.hpp>

#include "runtime/common/errors.h"
#include "runtime/common/startup.h"
#include "runtime/models/model_registry.h"
#include "launcher/allocation.h"
#include "launcher/launch.h"
#include "launcher/run_lock.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/train/schedule.h"
#include "launcher/program_runner.h"
#include "runtime/comm/mpi_communicator.h"
#include "runtime/common/rank_output.h"
#include "strategies/capabilities.h"
#include "strategies/data_parallel.h"
#include "strategies/pipeline_parallel.h"
#include "strategies/process_groups.h"
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

JobParts assemble_job(const JobConfig& cfg, int world_size, std::shared_ptr<Communicator> comm, int local_ranks) {
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
  PlannerInput pin = planner_input_for(cfg, parts.stats, world_size);
  pin.gpus_per_node = world_size;
  pin.caps = kRunCapabilities;
  pin.profile = local_cpu_profile(process_environment(), ProcessContext::get().host,
                                  static_cast<int>(std::thread::hardware_concurrency()));
  pin.memory_bytes = cfg.parallel.memory_gb > 0 ? cfg.parallel.memory_gb * 1024.0 * 1024.0 * 1024.0
                                                : 0.8 * available_memory_bytes() / std::max(1, local_ranks);
  if (cfg.parallel.pp_microbatches > 0 && cfg.parallel.micro_batch == 0) {
    // m micro-batches per replica: micro_batch = global_batch / (dp * m), dp from the explicit layout.
    const int64_t tp = cfg.parallel.tp, pp = cfg.parallel.pp;
    const int64_t dp = cfg.parallel.dp > 0 ? cfg.parallel.dp : std::max<int64_t>(1, world_size / (tp * pp));
    const int64_t per_replica = cfg.train.global_batch / dp;
    if (cfg.train.global_batch % dp != 0 || per_replica % cfg.parallel.pp_microbatches != 0) {
      throw ConfigError("parallel.pp_microbatches = " + std::to_string(cfg.parallel.pp_microbatches) +
                        " must divide the " + std::to_string(per_replica) + " samples per replica (train.global_batch " +
                        std::to_string(cfg.train.global_batch) + " / dp " + std::to_string(dp) + ")");
    }
    pin.parallel.micro_batch = per_replica / cfg.parallel.pp_microbatches;
  }
  parts.plan = plan_job(pin);
  const Plan& plan = parts.plan;
  if (plan.tp > 1 && parts.stats.vocab > 0 && parts.stats.vocab % plan.tp != 0) {
    throw ConfigError("tp = " + std::to_string(plan.tp) + " must divide the vocabulary (" +
                      std::to_string(parts.stats.vocab) + "); set model.vocab to a multiple of " + std::to_string(plan.tp));
  }

  if (comm) {
    if (comm->size() != world_size) {
      throw Error("assemble_job: communicator has " + std::to_string(comm->size()) + " ranks, plan expects " +
                  std::to_string(world_size));
    }
    // Sub-communicators (tp adjacent, then pp, then dp), then the model split over them: each
    // rank built the whole model from the same seed and keeps its part.
    const ProcessGroups groups = make_process_groups(comm, ParallelDims{plan.dp, plan.tp, plan.pp});
    if (plan.tp > 1) parts.model->shard_tensor_parallel(groups.tp);
    if (plan.recompute) parts.model->set_recompute(true);
    DataParallelOptions dpo;
    dpo.zero_stage = plan.zero;
    dpo.bucket_bytes = static_cast<int64_t>(cfg.parallel.bucket_mb * 1e6);
    dpo.optimizer = cfg.optimizer;
    dpo.placements = parts.model->parameter_placements();
    dpo.model_comm = groups.model;
    dpo.reports_loss = groups.tp_rank == 0;
    if (groups.tp_rank > 0) {
      // Parameters every tp rank holds whole (norms, row-parallel biases): tp rank 0 counts and writes them.
      for (const auto& kv : parts.model->named_parameters()) {
        if (!dpo.placements.count(kv.key())) dpo.mirrored.insert(kv.key());
      }
    }
    if (plan.pp > 1) {
      // Stages balanced by FLOPs: uniform blocks, the embedding on the first stage, the output
      // layer (2 x hidden x vocab per token, x3 for backward) on the last.
      const auto& st = parts.stats;
      const int64_t nblocks = static_cast<int64_t>(parts.model->blocks().size());
      const double block = st.blocks > 0 ? st.flops_per_sample / static_cast<double>(st.blocks) : 1.0;
      const double head = 6.0 * static_cast<double>(st.hidden * st.vocab * st.seq_len);
      std::vector<double> cost(nblocks, block);
      PipelineOptions po;
      po.schedule = cfg.parallel.pp_schedule;
      parts.engine = std::make_unique<PipelineEngine>(groups, parts.model, balance_stages(cost, 0.0, head, plan.pp),
                                                      dpo, po);
    } else {
      std::vector<std::pair<std::string, torch::Tensor>> named;
      for (const auto& kv : parts.model->named_parameters()) named.emplace_back(kv.key(), kv.value());
      parts.engine = std::make_unique<DataParallelEngine>(groups.dp, std::move(named), dpo);
    }
  } else if (plan.pp > 1) {
    // Validation before the ranks start: the model must expose its blocks and stages.
    const int64_t nblocks = static_cast<int64_t>(parts.model->blocks().size());
    if (nblocks == 0) throw ConfigError("pp = " + std::to_string(plan.pp) + ": this model has no blocks to split into stages");
    balance_stages(std::vector<double>(nblocks, 1.0), 0, 0, plan.pp);
  }
  return parts;
}

namespace {

void write_run_files(const std::string& run_dir, const JobConfig& cfg, const Plan& plan, int64_t requested_batch) {
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) throw ConfigError(run_dir + ": cannot create run directory: " + ec.message());
  {
    std::ofstream f(fs::path(run_dir) / "config.toml");
    f << to_toml(cfg);
    if (!f) throw Error(run_dir + "/config.toml: cannot write");
  }
  nlohmann::json pj = {{"world", plan.world}, {"dp", plan.dp}, {"tp", plan.tp}, {"pp", plan.pp},
                       {"zero", plan.zero}, {"micro_batch", plan.micro_batch}, {"grad_accum", plan.grad_accum},
                       {"recompute", plan.recompute}, {"precision", plan.precision},
                       {"est_memory_bytes", plan.est_memory_bytes}, {"est_step_seconds", plan.est_step_seconds},
                       {"global_batch", plan.global_batch()}, {"requested_global_batch", requested_batch},
                       {"profile", plan.profile}, {"reason", plan.reason}};
  std::ofstream f(fs::path(run_dir) / "plan.json");
  f << pj.dump(2) << "\n";
}

}  // namespace

namespace {

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The stage deadline: the earliest of the scheduler's end time, --time-limit / schedule.time_limit_s
// and the end of the quota window we are in.
Deadline stage_deadline(const JobConfig& cfg, const RunOptions& o, const Allocation& alloc) {
  const double now = unix_now();
  std::vector<Deadline> ds;
  if (alloc.end_time_unix > 0) ds.push_back({static_cast<double>(alloc.end_time_unix), alloc.scheduler + " end time"});
  double limit = cfg.schedule.time_limit_s;
  if (!o.time_limit.empty()) limit = parse_duration(o.time_limit, "--time-limit");
  if (limit > 0) ds.push_back({now + limit, o.time_limit.empty() ? "schedule.time_limit_s" : "--time-limit"});
  std::vector<Window> windows;
  for (size_t i = 0; i < cfg.schedule.window.size(); ++i) {
    windows.push_back(parse_window(cfg.schedule.window[i], "schedule.window[" + std::to_string(i) + "]"));
  }
  if (const double end = window_end(windows, now); end > 0) ds.push_back({end, "quota window"});
  return earliest(ds);
}

std::string env_or(const std::map<std::string, std::string>& env, const char* key) {
  auto it = env.find(key);
  return it == env.end() ? std::string() : it->second;
}

}  // namespace

RunOutcome run_job(const RunOptions& o) {
  const auto env = process_environment();
  JobConfig cfg = load_job_config(o.config_path, o.sets, env);
  if (o.quiet) cfg.log.progress = "none";
  if (!o.time_limit.empty()) parse_duration(o.time_limit, "--time-limit");  // reject bad input early
  const RankEnvironment rank_env = detect_rank_environment(env);
  const std::string run_dir = resolve_run_dir(cfg, o);
  std::unique_ptr<RunLock> lock;

  if (!rank_env.launched) {
    // One rank per granted GPU (CPU ranks stand in without CUDA), or --ranks.
    DiscoveryOptions dopt;
    dopt.ranks = o.ranks;
    dopt.read_limits = false;
    const Allocation alloc = discover_allocation(env, system_command_runner(), dopt);
    const int ranks = alloc.world_size();
    lock = RunLock::acquire(run_dir);
    const Deadline deadline = stage_deadline(cfg, o, alloc);
    // Ranks learn the stage's facts from the launching process.
    setenv("GTRAIN_INTERNAL_LOCKED", "1", 1);
    setenv("GTRAIN_INTERNAL_DEADLINE", (std::to_string(deadline.unix_time) + "|" + deadline.source).c_str(), 1);
    setenv("GTRAIN_INTERNAL_ALLOCATION",
           nlohmann::json({{"scheduler", alloc.scheduler}, {"job_id", alloc.job_id}, {"nodes", alloc.nodes.size()},
                           {"gpus", alloc.total_gpus()}, {"ranks", ranks}})
               .dump()
               .c_str(),
           1);
    if (ranks > 1) {
      // Validate data, model and plan once here, so bad input is one message, then start the ranks.
      assemble_job(cfg, ranks, nullptr, ranks);
      LaunchSpec spec;
      spec.ranks = ranks;
      spec.executable = self_executable();
      spec.args = o.argv;
      for (const auto& n : alloc.nodes) {
        spec.hosts.push_back({n.host, n.gpus.empty() ? std::max(1, n.tasks) : static_cast<int>(n.gpus.size())});
      }
      if (spec.hosts.size() > 1) {
        spec.hostfile = (fs::path(run_dir) / "hostfile").string();
        for (const auto& kv : env) {
          if (kv.first.rfind("GTRAIN_", 0) == 0) spec.forward_env.push_back(kv.first);
        }
        spec.forward_env.insert(spec.forward_env.end(),
                                {"PATH", "LD_LIBRARY_PATH", "GTRAIN_INTERNAL_LOCKED", "GTRAIN_INTERNAL_DEADLINE",
                                 "GTRAIN_INTERNAL_ALLOCATION"});
      } else {
        spec.hosts.clear();
      }
      exec_mpirun(spec);
    }
  }
  const auto stage_env = process_environment();

  std::shared_ptr<Communicator> comm;
#ifdef GTRAIN_WITH_MPI
  if (rank_env.launched) {
    MpiCommOptions mo;
    mo.timeout_s = cfg.parallel.collective_timeout_s;
    comm = MpiCommunicator::world(mo);
    start_rank_output_prefix(comm->rank());
  }
#else
  if (rank_env.launched) {
    throw ConfigError("this gtrain was built without MPI, so it cannot run as one of " +
                      std::to_string(rank_env.size) + " ranks (rebuild with libopenmpi-dev installed)");
  }
#endif
  if (!comm) comm = std::make_shared<LocalCommunicator>();
  const bool main_rank = comm->rank() == 0;
  if (!main_rank) cfg.log.progress = "none";
  // Launched by srun without our launcher: rank 0 holds the lock.
  if (!lock && main_rank && env_or(stage_env, "GTRAIN_INTERNAL_LOCKED").empty()) lock = RunLock::acquire(run_dir);
  install_stop_signals(cfg.schedule.stop_signals);

  const int threads = set_torch_threads(cfg.train.threads, rank_env.local_size);
  // Memory the job adds on top of the loaded program: compared with the planner's estimate.
  reset_peak_resident();
  const double baseline_rss = resident_bytes();
  JobParts parts = [&] {
    BuildAllocationScope build;  // the whole model is transient: give it back once split
    return assemble_job(cfg, comm->size(), comm, rank_env.local_size);
  }();
  const Plan& plan = parts.plan;
  const int64_t requested_batch = cfg.train.global_batch;
  cfg.train.global_batch = plan.global_batch();  // differs only within parallel.batch_tolerance

  // Resume: --resume PATH, else the newest valid checkpoint unless --no-resume.
  TrainerPaths paths;
  paths.metrics = (fs::path(run_dir) / "metrics.jsonl").string();
  paths.checkpoints = cfg.checkpoint.dir.empty() ? (fs::path(run_dir) / "checkpoints").string() : cfg.checkpoint.dir;
  std::string resume_from;
  std::vector<std::string> warnings;
  if (!o.resume.empty()) {
    if (!fs::exists(fs::path(o.resume) / "manifest.json")) {
      throw ConfigError("--resume " + o.resume + ": not a committed checkpoint (no manifest.json)");
    }
    resume_from = o.resume;
  } else if (!o.no_resume) {
    resume_from = find_latest_valid_checkpoint(paths.checkpoints, &warnings);
  }
  paths.append_metrics = !resume_from.empty();
  if (main_rank) {
    for (const auto& w : warnings) std::cerr << "gtrain: warning: " << w << std::endl;
    write_run_files(run_dir, cfg, plan, requested_batch);
  }
  if (comm->size() > 1) comm->barrier();  // the run directory exists before any rank writes

  const std::string engine_desc = parts.engine->describe();
  Trainer trainer(cfg, plan, comm, parts.model, parts.data, std::move(parts.engine), paths);
  trainer.set_memory_baseline(baseline_rss);
  StageOptions stage;
  stage.ledger = (fs::path(run_dir) / "stages.jsonl").string();
  {
    const std::string d = env_or(stage_env, "GTRAIN_INTERNAL_DEADLINE");
    if (!d.empty()) {
      stage.deadline_unix = std::atof(d.c_str());
      stage.deadline_source = d.substr(d.find('|') + 1);
    }
    const std::string a = env_or(stage_env, "GTRAIN_INTERNAL_ALLOCATION");
    stage.allocation = a.empty() ? nlohmann::json::object() : nlohmann::json::parse(a, nullptr, false);
  }
  // Same token on every rank: rank 0's clock and pid.
  auto token = torch::tensor({static_cast<int64_t>(unix_now() * 1000) ^ (static_cast<int64_t>(::getpid()) << 40)},
                             torch::kLong);
  if (comm->size() > 1) comm->broadcast(token, 0);
  stage.save_token = std::to_string(token.item<int64_t>());
  if (!resume_from.empty()) {
    const auto t0 = std::chrono::steady_clock::now();
    trainer.resume(resume_from);
    stage.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  trainer.set_stage(stage);
  if (!o.quiet && main_rank) {
    std::cout << "gtrain: run " << run_dir << "  model " << cfg.model.name << " (" << parts.stats.params
              << " params)  data " << cfg.data.kind << " (" << parts.data.train->size() << " train samples)\n"
              << "gtrain: plan " << plan.summary() << "  global_batch " << cfg.train.global_batch
              << (requested_batch != cfg.train.global_batch ? " (requested " + std::to_string(requested_batch) + ")" : "")
              << "  steps " << trainer.total_steps() << "  threads/rank " << threads << "\n"
              << "gtrain: " << plan.estimate_summary() << "\n"
              << "gtrain: " << engine_desc << " over " << comm->backend() << "\n";
    if (!resume_from.empty()) {
      std::cout << "gtrain: resumed from " << resume_from << " at step " << trainer.steps_done() << " (probe loss checked, "
                << stage.load_seconds << " s)\n";
    }
    if (stage.deadline_unix > 0) {
      std::cout << "gtrain: stage deadline in " << static_cast<int64_t>(stage.deadline_unix - unix_now()) << " s ("
                << stage.deadline_source << ")\n";
    }
    std::cout << std::flush;
  }
  RunOutcome out;
  out.run_dir = run_dir;
  out.summary = trainer.run();
  if (!o.quiet && main_rank) {
    const auto& s = out.summary;
    char buf[256];
    std::snprintf(buf, sizeof(buf), "gtrain: %s %lld steps in %.1f s (%.0f samples/s, data wait %.2f s)  train loss %.4f",
                  s.stopped_early ? "stage ended at" : "done", (long long)s.steps, s.seconds, s.samples_per_s,
                  s.data_wait_s, s.final_loss);
    std::cout << buf;
    if (s.stopped_early) {
      std::cout << "\ngtrain: stage ended by " << s.stop_reason << "; checkpoint saved; run the same command to resume"
                << " (exit code 3)";
    }
    if (parts.data.eval && !s.stopped_early) {
      std::snprintf(buf, sizeof(buf), "  eval loss %.4f  accuracy %.2f%%", s.eval.loss, 100.0 * s.eval.accuracy);
      std::cout << buf;
    }
    std::cout << std::endl;
  }
  return out;
}

void finish_run_process() {
#ifdef GTRAIN_WITH_MPI
  MpiCommunicator::finalize();
#endif
  stop_rank_output_prefix();
}

}  // namespace gtrain
