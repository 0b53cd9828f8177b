// run_command.cpp: the body of `gtrain run` for one rank.
#include "launcher/run_command.h"

#include <unistd.h>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include <nlohmann/json.hpp>

#include "launcher/allocation.h"
#include "launcher/device_choice.h"
#include "launcher/hardware_query.h"
#include "launcher/hostlist.h"
#include "launcher/launch.h"
#include "launcher/program_runner.h"
#include "launcher/run_lock.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/checkpoint_dirs.h"
#include "runtime/comm/mpi_communicator.h"
#include "runtime/comm/routed_communicator.h"
#include "runtime/common/cuda_device.h"
#include "runtime/common/errors.h"
#include "runtime/common/rank_output.h"
#include "runtime/common/startup.h"
#include "runtime/common/torch_threads.h"
#include "runtime/metrics/metrics_log.h"
#include "runtime/models/gpt.h"
#include "runtime/models/model_registry.h"
#include "runtime/train/initial_weights.h"
#include "runtime/train/schedule.h"
#include "runtime/train/thread_choice.h"
#include "strategies/capabilities.h"
#include "strategies/data_parallel.h"
#include "strategies/hardware_profile.h"
#include "strategies/pipeline_parallel.h"
#include "strategies/planner.h"
#include "strategies/process_groups.h"

namespace fs = std::filesystem;

namespace gtrain {

// A whole-split evaluation longer than this many global batches is named at start: token data's
// held-out split can hold millions of windows.
constexpr int64_t kLongEvalBatches = 1000;

JobParts assemble_job(const JobConfig& cfg, int world_size, std::shared_ptr<Communicator> comm, int local_ranks,
                      torch::Device device) {
  auto& registry = ModelRegistry::global();
  if (!cfg.model.plugin.empty()) registry.load_plugin(cfg.model.plugin);
  if (!registry.has(cfg.model.name)) {
    registry.create(cfg.model, DataSpec{});  // reports the unknown name before any data is read
  }
  JobParts parts;
  parts.data = open_datasets(cfg.data, cfg.model, cfg.train.seed);
  if (cfg.train.global_batch > parts.data.train->size()) {
    throw ConfigError("train.global_batch = " + std::to_string(cfg.train.global_batch) + " exceeds the " +
                          std::to_string(parts.data.train->size()) + " samples of the training split (data.kind = \"" +
                          cfg.data.kind + "\"): one step would draw samples more than once",
                      "lower train.global_batch, or give the job more data");
  }
  torch::manual_seed(static_cast<uint64_t>(cfg.train.seed));
  parts.model = registry.create(cfg.model, parts.data.train->spec());
  parts.stats = parts.model->stats(parts.data.train->spec());

  // A CUDA rank plans with its GPU's profile and memory (found by its NVML index).
  parts.plan = plan_run(cfg, parts.stats, world_size, local_ranks,
                        device.is_cuda() ? cuda::nvml_index_for(device.index(), process_environment()) : -1);
  const Plan& plan = parts.plan;

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
    // Built (and initialised) on the CPU from the same seed everywhere, then moved to the rank's device.
    if (!device.is_cpu()) parts.model->to(device);
    if (auto gpt = std::dynamic_pointer_cast<Gpt>(parts.model)) {
      // Fused output layer + loss: on CUDA by default (logits of 50k-token vocabularies dominate
      // memory traffic there); the CPU keeps the plain layer unless asked.
      gpt->set_fused_loss(cfg.train.fused_loss == "on" || (cfg.train.fused_loss == "auto" && device.is_cuda()));
    }
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
      parts.engine =
          std::make_unique<PipelineEngine>(groups, parts.model, balance_stages(cost, 0.0, head, plan.pp), dpo, po);
    } else {
      std::vector<std::pair<std::string, torch::Tensor>> named;
      for (const auto& kv : parts.model->named_parameters()) named.emplace_back(kv.key(), kv.value());
      parts.engine = std::make_unique<DataParallelEngine>(groups.dp, std::move(named), dpo);
    }
  } else if (plan.pp > 1) {
    // Validation before the ranks start: the model must expose its blocks and stages.
    const int64_t nblocks = static_cast<int64_t>(parts.model->blocks().size());
    if (nblocks == 0)
      throw ConfigError("pp = " + std::to_string(plan.pp) + ": this model has no blocks to split into stages");
    balance_stages(std::vector<double>(nblocks, 1.0), 0, 0, plan.pp);
  }
  return parts;
}

namespace {

void write_run_files(const std::string& run_dir, const JobConfig& cfg, const Plan& plan, int64_t requested_batch) {
  {
    std::ofstream f(fs::path(run_dir) / "config.toml");
    f << to_toml(cfg);
    if (!f) throw Error(run_dir + "/config.toml: cannot write");
  }
  nlohmann::json pj = {{"world", plan.world},
                       {"dp", plan.dp},
                       {"tp", plan.tp},
                       {"pp", plan.pp},
                       {"zero", plan.zero},
                       {"micro_batch", plan.micro_batch},
                       {"grad_accum", plan.grad_accum},
                       {"recompute", plan.recompute},
                       {"precision", plan.precision},
                       {"est_memory_bytes", plan.est_memory_bytes},
                       {"est_tensor_bytes", plan.est_tensor_bytes},
                       {"est_step_seconds", plan.est_step_seconds},
                       {"global_batch", plan.global_batch()},
                       {"requested_global_batch", requested_batch},
                       {"profile", plan.profile},
                       {"reason", plan.reason}};
  std::ofstream f(fs::path(run_dir) / "plan.json");
  f << pj.dump(2) << "\n";
}

std::string env_or(const std::map<std::string, std::string>& env, const char* key) {
  auto it = env.find(key);
  return it == env.end() ? std::string() : it->second;
}

// This rank's device (launcher/device_choice.h): train.device, the visible CUDA devices, and, when
// CUDA_VISIBLE_DEVICES does not already narrow them, the GPUs the allocation granted this node.
DeviceChoice rank_device(const JobConfig& cfg, const RankEnvironment& re,
                         const std::map<std::string, std::string>& env) {
  DeviceChoiceInput in;
  in.requested = cfg.train.device;
  in.cuda_build = cuda::built_with_cuda();
  in.device_count = in.requested == "cpu" ? 0 : cuda::device_count();
  in.local_rank = re.local_rank;
  in.local_size = re.local_size;
  const std::string vis = env_or(env, "CUDA_VISIBLE_DEVICES");
  in.visible_set = env.count("CUDA_VISIBLE_DEVICES") > 0 &&
                   parse_visible_devices(vis, "CUDA_VISIBLE_DEVICES").kind == VisibleDevices::kList;
  if (in.cuda_build && in.device_count > 0 && !in.visible_set) {
    // The launching gtrain passes what it discovered; discover here only without it (srun ranks).
    if (auto g = granted_for_host(env_or(env, "GTRAIN_INTERNAL_GRANTED"), ProcessContext::get().host)) {
      in.granted = *g;
      return choose_device(in);
    }
    DiscoveryOptions d;
    d.read_limits = false;
    const Allocation a = discover_allocation(env, system_command_runner(), d);
    for (const auto& node : a.nodes) {
      if (same_host(node.host, a.this_host)) in.granted = node.gpus;
    }
  }
  return choose_device(in);
}

// What in a run directory says the run has committed a checkpoint before: committed checkpoint
// directories (here: every one invalid), or metrics.jsonl's "checkpoint" records of a save known to
// have finished (a synchronous one; an asynchronous one followed by a record of the next save's
// previous_write_s, or by a stage's "final" / "stage_end" record, written once its saves commit; a
// save still in flight when the run was killed proves nothing). "" when nothing does: a run that
// never saved loses nothing by starting at step 0. (stages.jsonl outlives --no-resume: not evidence.)
std::string saved_history(const std::string& run_dir, const std::string& checkpoints) {
  std::vector<std::string> found;
  const auto committed = committed_checkpoint_dirs(checkpoints);
  if (!committed.empty()) {
    std::string steps;
    for (const auto& [step, path] : committed) steps += (steps.empty() ? "" : ", ") + std::to_string(step);
    found.push_back(std::to_string(committed.size()) + " checkpoint(s) in " + checkpoints + " (step " + steps +
                    "), none valid");
  }
  int64_t saves = 0, last_save = -1;
  bool finished = false;
  std::ifstream in(fs::path(run_dir) / "metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object()) continue;
    const std::string kind = j.value("kind", "");
    // A stage's "final" and "stage_end" records come after it waited for its saves to commit.
    if ((kind == "final" || kind == "stage_end") && saves > 0) finished = true;
    if (kind != "checkpoint") continue;
    ++saves;
    finished = finished || j.contains("previous_write_s") || !j.value("async", true);
    if (j.contains("step") && j["step"].is_number_integer()) last_save = std::max(last_save, j["step"].get<int64_t>());
  }
  if (finished)
    found.push_back("metrics.jsonl records " + std::to_string(saves) + " save(s), the last at step " +
                    std::to_string(last_save));
  std::string out;
  for (const auto& f : found) out += (out.empty() ? "" : "; ") + f;
  return out;
}

}  // namespace

RunOutcome run_job(const RunOptions& o) {
  const auto env = process_environment();
  JobConfig cfg = load_job_config(o.config_path, o.sets, env);
  if (o.quiet) cfg.log.progress = "none";
  const RankEnvironment rank_env = detect_rank_environment(env);
  require_mpi_wireup(rank_env);  // before MPI_Init, which would abort every rank
  const std::string run_dir = resolve_run_dir(cfg, o);
  const std::string batch_note = keep_checkpoint_batch(cfg, o, run_dir);
  std::unique_ptr<RunLock> lock;

  if (!rank_env.launched && !stage_prepared(env, run_dir)) {
    // Started as gtrain-worker directly (or by gtrain for a model it cannot size without LibTorch):
    // launch here; several ranks are validated once (data, model, plan), then mpirun replaces us.
    StageLaunch stage = launch_stage(o, cfg, env, self_executable(), [&](const Allocation& alloc) {
      const int ranks = alloc.world_size();
      if (ranks == 1) return;  // this process is the rank: it builds the job next
      const int gpu = launch_nvml_index(cfg, alloc);
      assemble_job(cfg, ranks, nullptr, ranks, gpu >= 0 ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU));
    });
    if (stage.exit_code >= 0) {  // several ranks ran under mpirun
      RunOutcome done;
      done.run_dir = run_dir;
      done.launcher_exit = stage.exit_code;
      return done;
    }
    lock = std::move(stage.lock);
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
    throw ConfigError("this gtrain was built without MPI, so it cannot run as one of " + std::to_string(rank_env.size) +
                      " ranks (rebuild with libopenmpi-dev installed)");
  }
#endif
  if (!comm) comm = std::make_shared<LocalCommunicator>();
  // The rank's device; CUDA ranks reduce CUDA tensors over NCCL (MPI keeps CPU tensors and bootstrap).
  const DeviceChoice dev = rank_device(cfg, rank_env, stage_env);
  const torch::Device device =
      dev.cuda ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(dev.index)) : torch::Device(torch::kCPU);
  if (dev.cuda) {
    cuda::set_device(dev.index);
#if defined(GTRAIN_WITH_NCCL) && defined(GTRAIN_WITH_MPI)
    if (auto mpi = std::dynamic_pointer_cast<MpiCommunicator>(comm)) comm = RoutedCommunicator::create(mpi, dev.index);
#else
    if (comm->size() > 1) {
      throw ConfigError("train.device: " + std::to_string(comm->size()) +
                            " CUDA ranks need NCCL, and this gtrain was "
                            "built without it",
                        "install NCCL (nccl.h, libnccl) and rebuild, or set train.device = \"cpu\"");
    }
#endif
  }
  const bool main_rank = comm->rank() == 0;
  if (!main_rank) cfg.log.progress = "none";
  // Launched by srun without our launcher: rank 0 holds the lock.
  if (!lock && main_rank && env_or(stage_env, "GTRAIN_INTERNAL_LOCKED").empty())
    lock = acquire_stage_lock(run_dir, cfg);
  install_stop_signals(cfg.schedule.stop_signals);
  // No launching gtrain says what a stop signal does (it does for ranks under mpirun): this rank does.
  announce_stop_requests(!o.quiet && main_rank && (comm->size() == 1 || rank_env.launcher == "srun"));

  const int threads = set_torch_threads(cfg.train.threads, rank_env.local_size);
  // The start-up line's "threads/rank N (why)".
  std::string threads_text =
      std::to_string(threads) + (cfg.train.threads > 0 ? " (train.threads)" : " (cores / local ranks)");
  // Memory the job adds on top of the loaded program: compared with the planner's estimate.
  reset_peak_resident();
  const double baseline_rss = resident_bytes();
  JobParts parts = [&] {
    BuildAllocationScope build;  // the whole model is transient: give it back once split
    return assemble_job(cfg, comm->size(), comm, rank_env.local_size, device);
  }();
  const Plan& plan = parts.plan;
  const int64_t requested_batch = cfg.train.global_batch;
  cfg.train.global_batch = plan.global_batch();  // differs only within parallel.batch_tolerance

  // Resume: --resume PATH, else the newest valid checkpoint unless --no-resume.
  TrainerPaths paths;
  paths.metrics = (fs::path(run_dir) / "metrics.jsonl").string();
  paths.checkpoints = checkpoint_directory(cfg.checkpoint, run_dir);
  std::string resume_from;
  std::vector<std::string> warnings;
  if (!o.resume.empty()) {
    if (!fs::exists(fs::path(o.resume) / "manifest.json")) {
      throw ConfigError("--resume " + o.resume + ": not a committed checkpoint (no manifest.json)");
    }
    resume_from = o.resume;
  } else if (!o.no_resume) {
    // Rank 0 verifies (reads every piece once) and tells the others which checkpoint to load.
    // A run that saved before and has nothing valid left is refused rather than started over
    // unnoticed: an unattended stage would redo the whole job. The refusal goes to every rank.
    std::string refusal;
    if (main_rank) {
      resume_from = find_latest_valid_checkpoint(paths.checkpoints, &warnings);
      if (resume_from.empty() && !paths.checkpoints.empty()) refusal = saved_history(run_dir, paths.checkpoints);
    }
    refusal = broadcast_string(*comm, refusal, 0);
    if (!refusal.empty()) {
      if (main_rank)
        for (const auto& w : warnings) std::cerr << "gtrain: warning: " << w << std::endl;
      throw ResumeMismatchError(run_dir + " has saved before (" + refusal + ") but nothing is left to resume from",
                                "--no-resume starts the run over at step 0 (its checkpoints are moved aside, not "
                                "deleted), --resume PATH resumes from a checkpoint elsewhere; gtrain ckpt verify "
                                "PATH says what is wrong with one");
    }
    resume_from = broadcast_string(*comm, resume_from, 0);
  }
  paths.append_metrics = !resume_from.empty();
  if (main_rank) {
    for (const auto& w : warnings) std::cerr << "gtrain: warning: " << w << std::endl;
    if (!batch_note.empty() && !o.quiet) std::cout << "gtrain: " << batch_note << std::endl;
    std::error_code ec;
    fs::create_directories(run_dir, ec);
    if (ec) throw ConfigError(run_dir + ": cannot create run directory: " + ec.message());
  }
  if (comm->size() > 1) comm->barrier();  // the run directory exists before any rank writes

  const std::string engine_desc = parts.engine->describe();
  Trainer trainer(cfg, plan, comm, parts.model, parts.data, std::move(parts.engine), paths, device);
  trainer.set_memory_baseline(baseline_rss);
  if (cfg.train.threads == 0 && device.is_cpu() && threads > 1) {
    // The cores' share is not always fastest (OpenMP's spinning pool against OpenBLAS's and the data
    // workers: 2-20x slower steps at 2 threads than at 1 on 2 busy cores here): the first steps measure.
    trainer.set_thread_tuning(threads, rank_env.local_size);
    std::string counts;
    for (int n : thread_candidates(threads)) counts += (counts.empty() ? "" : ", ") + std::to_string(n);
    threads_text = "auto (the first steps try " + counts + " and keep the fastest)";
  }
  StageOptions stage;
  stage.ledger = (fs::path(run_dir) / "stages.jsonl").string();
  {
    const std::string d = env_or(stage_env, "GTRAIN_INTERNAL_DEADLINE");
    if (!d.empty()) {
      stage.deadline_unix = std::atof(d.c_str());
      stage.deadline_source = d.substr(d.find('|') + 1);
    }
    stage.stop_file = env_or(stage_env, "GTRAIN_INTERNAL_STOP_FILE");
    const std::string a = env_or(stage_env, "GTRAIN_INTERNAL_ALLOCATION");
    stage.allocation = a.empty() ? nlohmann::json::object() : nlohmann::json::parse(a, nullptr, false);
    if (rank_env.launcher == "srun" && main_rank && d.empty()) {
      // srun started the ranks, so no launching gtrain found the stage's deadline and allocation:
      // rank 0, the only one that reads them, does (the job's end time, --time-limit, quota windows).
      DiscoveryOptions dopt;
      dopt.read_limits = false;
      const Allocation alloc = discover_allocation(stage_env, system_command_runner(), dopt);
      const Deadline deadline = stage_deadline(cfg, o, alloc);
      stage.deadline_unix = deadline.unix_time;
      stage.deadline_source = deadline.source;
      stage.allocation = allocation_record(alloc, comm->size());
    }
  }
  // Same token on every rank: rank 0's clock and pid.
  auto token =
      torch::tensor({static_cast<int64_t>(unix_now() * 1000) ^ (static_cast<int64_t>(::getpid()) << 40)}, torch::kLong);
  if (comm->size() > 1) comm->broadcast(token, 0);
  stage.save_token = std::to_string(token.item<int64_t>());
  if (!resume_from.empty()) {
    const auto t0 = std::chrono::steady_clock::now();
    trainer.resume(resume_from);
    stage.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  InitialWeights initial;  // checkpoint.init_from: a fresh start's weights (a resume has its own)
  if (resume_from.empty() && !cfg.checkpoint.init_from.empty()) {
    const auto t0 = std::chrono::steady_clock::now();
    initial = load_initial_weights(trainer.engine(), *comm, cfg.checkpoint.init_from);
    stage.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  // Checkpoints newer than where this run starts belong to another trajectory: moved aside (never
  // deleted), so that pruning keeps this run's checkpoints and the next start resumes this run. Done
  // once the resume has passed its checks: a refused start leaves the run directory as it was.
  if (main_rank) {
    // The resolved config and plan describe the run from here on: written once the start is accepted.
    write_run_files(run_dir, cfg, plan, requested_batch);
    const int64_t resume_step = resume_from.empty() ? -1 : trainer.steps_done();
    const auto moved = supersede_checkpoints(paths.checkpoints, resume_step, resume_from);
    if (resume_step >= 0) {
      int64_t last_dropped = -1;
      const int64_t dropped = drop_records_after(paths.metrics, resume_step, &last_dropped);
      if (dropped > 0) {
        // Why the records after the resumed step go depends on why the run resumes there.
        const std::string upto = last_dropped > resume_step ? " (up to step " + std::to_string(last_dropped) + ")" : "";
        const std::string why =
            !o.resume.empty() ? "--resume " + o.resume + " goes back to step " + std::to_string(resume_step) +
                                    ": the later steps are trained again from there"
            : !moved.steps.empty()
                ? "the newer checkpoint(s) (step " + std::to_string(moved.steps.back()) +
                      (moved.steps.size() > 1 ? " and older" : "") + ") are invalid, so the run resumes at step " +
                      std::to_string(resume_step) + " and trains the later steps again"
                : "the previous stage ran past its last checkpoint (step " + std::to_string(resume_step) +
                      ") before it ended; those steps are trained again";
        std::cerr << "gtrain: warning: " << paths.metrics << ": dropped " << dropped << " record(s) after step "
                  << resume_step << upto << ": " << why << std::endl;
      }
    }
    if (!moved.steps.empty()) {
      std::string steps;
      for (auto s : moved.steps) steps += (steps.empty() ? "" : ", ") + std::to_string(s);
      const std::string why = o.no_resume           ? "--no-resume starts the run over"
                              : !o.resume.empty()   ? "resuming from the older checkpoint " + resume_from
                              : resume_from.empty() ? "they are invalid and no valid checkpoint remains"
                                                    : "they are invalid; resuming from " + resume_from;
      std::cerr << "gtrain: warning: moved " << moved.steps.size() << " checkpoint(s) (step " << steps << ") aside to "
                << moved.folder << ": " << why << std::endl;
    }
  }
  trainer.set_stage(stage);
  if (!o.quiet && main_rank) {
    std::cout << "gtrain: run " << run_dir << "  model " << cfg.model.name << " (" << parts.stats.params
              << " params)  data " << cfg.data.kind << " ("
              << (parts.data.train->source().empty() ? "" : parts.data.train->source() + ": ")
              << parts.data.train->size() << " train samples"
              << (parts.data.eval && !parts.data.eval->source().empty() ? "; eval " + parts.data.eval->source() : "")
              << ")\n"
              << "gtrain: plan " << plan.summary() << "  global_batch " << cfg.train.global_batch
              << (requested_batch != cfg.train.global_batch ? " (requested " + std::to_string(requested_batch) + ")"
                                                            : "")
              << "  steps " << trainer.total_steps() << "  threads/rank " << threads_text << "\n"
              << "gtrain: " << plan.estimate_summary() << "\n"
              << "gtrain: " << engine_desc << " over " << comm->backend() << "\n"
              << "gtrain: device " << dev.str() << " (" << dev.reason << ")\n";
    if (!resume_from.empty()) {
      std::cout << "gtrain: resumed from " << resume_from << " at step " << trainer.steps_done()
                << " (probe loss checked, " << stage.load_seconds << " s)\n";
      if (!cfg.checkpoint.init_from.empty())
        std::cout << "gtrain: checkpoint.init_from (" << cfg.checkpoint.init_from
                  << ") is for fresh starts: the run's own checkpoint was loaded instead\n";
    }
    if (!initial.source.empty()) {
      std::cout << "gtrain: weights from " << initial.source << " (" << initial.tensors
                << " tensors, checkpoint.init_from; optimizer fresh at step 0, " << stage.load_seconds << " s)\n";
      if (initial.ignored > 0)
        std::cout << "gtrain: checkpoint.init_from: " << initial.ignored << " optimizer-state tensors in "
                  << initial.source << " ignored (exp_avg, exp_avg_sq, momentum_buffer, optimizer.step)\n";
    }
    for (const auto& n : parts.data.notes) std::cerr << "gtrain: warning: " << n << std::endl;
    const int64_t eval_batches =
        parts.data.eval ? (parts.data.eval->size() + cfg.train.global_batch - 1) / cfg.train.global_batch : 0;
    if (cfg.train.eval_batches == 0 && eval_batches > kLongEvalBatches) {
      std::cerr << "gtrain: warning: train.eval_batches = 0 evaluates the whole held-out split, " << eval_batches
                << " batches of " << cfg.train.global_batch
                << " at each evaluation; set train.eval_batches to cap it (llm.c uses 20)" << std::endl;
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
  if (!o.quiet && main_rank && out.summary.already_complete) {
    std::cout << "gtrain: " << run_dir << " is complete (step " << out.summary.steps << " of " << trainer.total_steps()
              << "); nothing to do" << std::endl;
  } else if (!o.quiet && main_rank && out.summary.stopped_early && out.summary.stage_steps == 0) {
    std::cout << "gtrain: stage ended by " << out.summary.stop_reason << " before its first step (at step "
              << out.summary.steps << "); nothing to save; run the same command to resume (exit code 3)"
              << (out.summary.stop_detail.empty() ? "" : "\ngtrain: stopping: " + out.summary.stop_detail) << std::endl;
  } else if (!o.quiet && main_rank) {
    const auto& s = out.summary;
    char buf[256];
    // "done 200 steps" for a whole run in one stage; after a resume, the stage's own share too.
    std::string steps = std::to_string(s.steps) + " steps";
    if (s.stage_steps != s.steps)
      steps = "step " + std::to_string(s.steps) + " (" + std::to_string(s.stage_steps) + " this stage)";
    std::snprintf(buf, sizeof(buf), "gtrain: %s %s in %.1f s (%.0f samples/s, data wait %.2f s)  train loss %.4f",
                  s.stopped_early ? "stage ended at" : "done", steps.c_str(), s.seconds, s.samples_per_s, s.data_wait_s,
                  s.final_loss);
    std::cout << buf;
    if (s.stopped_early) {
      std::cout << "\ngtrain: stage ended by " << s.stop_reason << "; checkpoint saved; run the same command to resume"
                << " (exit code 3)";
      if (!s.stop_detail.empty()) std::cout << "\ngtrain: stopping at step " << s.steps << ": " << s.stop_detail;
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
