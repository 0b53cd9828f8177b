// run_command.cpp: the body of `gtrain run` for one rank.
#include "launcher/commands/run_command.h"

#include <ATen/CPUGeneratorImpl.h>
#include <unistd.h>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include <nlohmann/json.hpp>

#include "launcher/base/hardware_query.h"
#include "launcher/base/program_runner.h"
#include "launcher/base/run_lock.h"
#include "launcher/base/text_util.h"
#include "launcher/launch/device_choice.h"
#include "launcher/launch/launch.h"
#include "launcher/launch/stage_handoff.h"
#include "launcher/scheduler/allocation.h"
#include "launcher/scheduler/hostlist.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/comm/device_sharing.h"
#include "runtime/comm/mpi_communicator.h"
#include "runtime/common/cuda_device.h"
#include "runtime/common/torch_threads.h"
#include "runtime/core/checkpoint_dirs.h"
#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/core/heartbeat.h"
#include "runtime/core/rank_output.h"
#include "runtime/core/run_dir/plan_record.h"
#include "runtime/core/run_dir/run_files.h"
#include "runtime/core/run_dir/run_identity.h"
#include "runtime/core/run_dir/run_records.h"
#include "runtime/core/schedule.h"
#include "runtime/core/startup.h"
#include "runtime/core/stop_policy.h"
#include "runtime/metrics/metrics_log.h"
#include "runtime/models/decoder_lm.h"
#include "runtime/models/model_registry.h"
#include "runtime/models/parallel_layers.h"
#include "runtime/train/initial_weights.h"
#include "runtime/train/teacher.h"
#include "runtime/train/thread_choice.h"
#include "strategies/engine_factory.h"
#include "strategies/planner/capabilities.h"
#include "strategies/planner/hardware_profile.h"
#include "strategies/planner/planner.h"
#include "strategies/sharded_frozen_model.h"

namespace fs = std::filesystem;

namespace gtrain {

// A whole-split evaluation longer than this many global batches is named at start: token data's
// held-out split can hold millions of windows.
constexpr int64_t kLongEvalBatches = 1000;

namespace {

// How this rank holds an online teacher in `plan`'s layout: sharded over dp beside a ZeRO-3
// student (the plan's choice; tp = pp = 1, so every rank is a dp rank), split over the student's tp
// group (its vocabulary-parallel logits gathered whole for the loss, which every rank of the group
// computes alike), or whole (nullptr); `note` gets the start-up line saying so.
TeacherSharder teacher_layout(const JobConfig& cfg, const Plan& plan, const DecoderLm& student,
                              const std::shared_ptr<Communicator>& comm, torch::Device device, std::string* note) {
  if (plan.shard_teacher) {
    return [comm, device, note](std::shared_ptr<Model> teacher) -> TeacherForward {
      auto sharded = std::make_shared<ShardedFrozenModel>(comm, std::move(teacher), device);
      *note = "teacher sharded over " + std::to_string(comm->size()) +
              " ranks (ZeRO-3): " + format_bytes(static_cast<double>(sharded->shard_bytes())) + " of its " +
              format_bytes(static_cast<double>(sharded->total_bytes())) +
              " weights on each, gathered one block at a time";
      return [sharded](const torch::Tensor& ids) { return sharded->forward(ids); };
    };
  }
  if (plan.tp == 1) return nullptr;
  const TpGroup tp = student.tp_group();
  const std::string path = cfg.distill.teacher;
  const bool pipeline = plan.pp > 1;  // attach_teacher says so
  return [tp, device, note, pipeline, path](std::shared_ptr<Model> teacher) -> TeacherForward {
    try {
      teacher->shard_tensor_parallel(tp.comm);
    } catch (const ConfigError& e) {
      throw ConfigError("distill.teacher: " + path + ": " + e.what(),
                        "choose a parallel.tp that divides the teacher's heads, MLP width and vocabulary too");
    }
    teacher->to(device);
    if (!pipeline) *note = "teacher split over tp = " + std::to_string(tp.size()) + " as the student is";
    return [teacher, tp](const torch::Tensor& ids) { return gather_last_dim_tp(teacher->forward(ids), tp); };
  };
}

// Distillation: the teacher (or its cache) checked against the student and the layout before any
// rank starts, and on each rank built (its weights read) or opened, and attached to the student's
// loss; its identity (path, hash: rank 0 reads the files) goes into the checkpoints. The teacher's
// construction draws no random numbers the student's run would otherwise draw.
void attach_teacher(const JobConfig& cfg, const Plan& plan, JobParts& parts, const std::shared_ptr<Communicator>& comm,
                    torch::Device device) {
  const DistillConfig& d = cfg.distill;
  const std::string key = d.cache.empty() ? "distill.teacher" : "distill.cache";
  auto* student = dynamic_cast<DecoderLm*>(parts.model.get());
  if (!student) {
    throw ConfigError(key + ": model.name = \"" + cfg.model.name + "\" cannot be distilled",
                      "distil a gpt or llama model");
  }
  const bool cached = !d.cache.empty();
  if (!comm) {
    check_teacher(cfg, *parts.data.train, student->vocab());
    return;
  }
  auto gen = at::detail::getDefaultCPUGenerator();
  const auto rng = gen.get_state();
  const std::string hash = d.teacher.empty() ? "" : base_model_hash(*comm, d.teacher, "distill.teacher");
  parts.teacher = {{"path", d.teacher.empty() ? d.cache : d.teacher}, {"hash", hash}};
  if (plan.pp > 1 && !cached) {
    parts.teacher_note =
        "teacher on the last pipeline stage only (it runs on the micro-batch's ids there), " +
        (plan.tp > 1 ? "split over tp = " + std::to_string(plan.tp) + " as the student is" : std::string("whole"));
  }
  // A pipeline's earlier stages compute no loss: the teacher (or cache) lives on the last one only.
  if (!parts.engine->computes_loss()) {
    if (cached) parts.teacher["hash"] = DistillCacheReader(d.cache).manifest().key.teacher_hash;
    gen.set_state(rng);
    return;
  }
  const TeacherSharder shard =
      cached ? nullptr : teacher_layout(cfg, plan, *student, comm, device, &parts.teacher_note);
  auto distill = build_distillation(cfg, *parts.data.train, student->vocab(), device, hash, shard);
  if (distill->cached()) parts.teacher["hash"] = distill->cache()->manifest().key.teacher_hash;
  student->set_distillation(std::move(distill));
  gen.set_state(rng);
}

}  // namespace

JobParts assemble_job(const JobConfig& cfg, int world_size, std::shared_ptr<Communicator> comm, int local_ranks,
                      torch::Device device, bool use_fewer_ranks, bool batch_from_checkpoint, int ranks_on_device) {
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
                          name_of(cfg.data.kind) + "\"): one step would draw samples more than once",
                      "lower train.global_batch, or give the job more data");
  }
  torch::manual_seed(static_cast<uint64_t>(cfg.train.seed));
  parts.model = registry.create(cfg.model, parts.data.train->spec());
  parts.stats = parts.model->stats(parts.data.train->spec());
  // LoRA: adapters on the whole model (the same draws on every rank), before any split.
  // The frozen base in adapter.base_dtype from the start (checkpoint.init_from's values are cast as
  // they load): the engine shards it in that type under ZeRO-3.
  if (cfg.adapter.lora()) {
    parts.lora = apply_lora(*parts.model, cfg.adapter);
    hold_frozen_base(*parts.model, cfg.adapter.base_dtype);
  }

  // A CUDA rank plans with its GPU's profile and memory (found by its NVML index).
  // Before the ranks start (no communicator yet) the plan may leave some granted ones idle;
  // started ranks use exactly their number.
  const PlanDevice planned{device.is_cuda() ? cuda::nvml_index_for(device.index(), process_environment()) : -1,
                           ranks_on_device};
  parts.plan = plan_run(cfg, parts.stats, world_size, local_ranks, planned, use_fewer_ranks && comm == nullptr,
                        batch_from_checkpoint);
  const Plan& plan = parts.plan;

  if (comm) {
    parts.engine = build_engine(cfg, plan, parts.stats, parts.model, comm, device);
  } else {
    check_pipeline_split(*parts.model, plan);  // before the ranks start: the stages must exist
  }
  // After the engine split the student (a tp teacher takes its group).
  if (cfg.distill.enabled()) attach_teacher(cfg, plan, parts, comm, device);
  return parts;
}

// This rank's device: the visible CUDA devices narrow it, else the allocation's grant for this node.
DeviceChoice rank_device(const JobConfig& cfg, const RankEnvironment& re,
                         const std::map<std::string, std::string>& env) {
  DeviceChoiceInput in;
  in.requested = cfg.train.device;
  in.cuda_build = cuda::built_with_cuda();
  in.device_count = in.requested == DeviceRequest::cpu ? 0 : cuda::device_count();
  in.local_rank = re.local_rank;
  in.local_size = re.local_size;
  const auto vis = env.find("CUDA_VISIBLE_DEVICES");
  in.visible_set =
      vis != env.end() && parse_visible_devices(vis->second, "CUDA_VISIBLE_DEVICES").kind == VisibleDevices::kList;
  in.positions = StageHandoff::from_env(env).positions_for(ProcessContext::get().host);
  if (in.cuda_build && in.device_count > 0 && !in.visible_set) {
    // The launching gtrain passes what it discovered; discover here only without it (srun ranks).
    if (auto g = StageHandoff::from_env(env).granted_for(ProcessContext::get().host)) {
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

namespace {

void write_run_files(const std::string& run_dir, const JobConfig& cfg, const Plan& plan, int64_t requested_batch) {
  const RunDir dir(run_dir);
  {
    std::ofstream f(dir.config());
    f << to_toml(cfg);
    if (!f)
      throw Error(dir.config() + ": cannot write", "check that the disk is not full and the run directory is writable");
  }
  write_plan_record(run_dir, PlanRecord::from_plan(plan, requested_batch));
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
  for (const auto& r : read_run_records(RunDir(run_dir).metrics())) {
    // A stage's "final" and "stage_end" records come after it waited for its saves to commit.
    if ((r.is<FinalRecord>() || r.is<StageEndRecord>()) && saves > 0) finished = true;
    if (!r.is<CheckpointRecord>()) continue;
    const auto save = r.as<CheckpointRecord>();
    ++saves;
    finished = finished || save.previous_write_s || !save.async;
    if (record_step(r.json)) last_save = std::max(last_save, save.step);
  }
  if (finished)
    found.push_back("metrics.jsonl records " + std::to_string(saves) + " save(s), the last at step " +
                    std::to_string(last_save));
  std::string out;
  for (const auto& f : found) out += (out.empty() ? "" : "; ") + f;
  return out;
}

// One rank's job as run_job builds it, step by step.
struct RankJob {
  explicit RankJob(const RunOptions& options) : o(options) {}
  const RunOptions& o;
  JobConfig cfg;
  RankEnvironment rank_env;
  std::string run_dir;
  std::string batch_note;  // the resume kept its checkpoint's global batch ("" = unchanged)
  std::unique_ptr<RunLock> lock;
  std::map<std::string, std::string> stage_env;  // the environment once the stage is prepared
  StageHandoff handoff;                          // what a launching gtrain told this rank
  std::shared_ptr<Communicator> comm;
  DeviceChoice dev;
  int ranks_on_device = 1;  // the most ranks on one GPU, from their bus ids (device_world)
  torch::Device device{torch::kCPU};
  bool main_rank = true;
  int threads = 1;
  std::string threads_text;  // the start-up line's "threads/rank N (why)"
  int64_t requested_batch = 0;
  double prepare_s = 0;        // data.kind = text / jsonl: finding or preparing its shards before the stage
  nlohmann::json data_counts;  // chat / prompt_completion data: what its rows kept (the ledger's "data")
};

// Where the run starts: a checkpoint to resume ("" = step 0) and what was found on the way.
struct ResumeChoice {
  std::string from;
  std::vector<std::string> warnings;
};

// Started as gtrain-worker directly (or by gtrain for a model it cannot size without LibTorch):
// launch here; several ranks are validated once (data, model, plan), then mpirun runs them. Returns
// mpirun's exit code, or -1 when this process is the rank.
int launch_here(RankJob& job, const std::map<std::string, std::string>& env) {
  const JobConfig& cfg = job.cfg;
  StageLaunch stage = launch_stage(job.o, cfg, env, self_executable(), [&](const Allocation& alloc) {
    const int ranks = alloc.world_size();
    Plan one;
    if (ranks == 1) return one;  // this process is the rank: it builds the job next
    const PlanDevice gpu = launch_plan_device(cfg, alloc);
    return assemble_job(cfg, ranks, nullptr, ranks,
                        gpu.nvml_index >= 0 ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU),
                        /*use_fewer_ranks=*/alloc.ranks_override == 0, !job.batch_note.empty(), gpu.ranks_on_device)
        .plan;
  });
  if (stage.exit_code >= 0) return stage.exit_code;
  job.lock = std::move(stage.lock);
  return -1;
}

// The world communicator (MPI when launched as one of several ranks) and this rank's device; CUDA
// ranks reduce CUDA tensors over NCCL (MPI keeps CPU tensors and the bootstrap), or over MPI through
// host memory where ranks share a GPU (device_sharing.h).
void open_communicator(RankJob& job) {
#ifdef GTRAIN_WITH_MPI
  if (job.rank_env.launched) {
    MpiCommOptions mo;
    mo.timeout_s = job.cfg.parallel.collective_timeout_s;
    mo.startup_timeout_s = job.cfg.schedule.startup_timeout_s;
    job.comm = MpiCommunicator::world(mo);
    start_rank_output_prefix(job.comm->rank());
  }
#else
  if (job.rank_env.launched) {
    throw ConfigError(
        str("this gtrain was built without MPI, so it cannot run as one of ", job.rank_env.size, " ranks"),
        "rebuild with libopenmpi-dev installed");
  }
#endif
  if (!job.comm) job.comm = std::make_shared<LocalCommunicator>();
  job.dev = rank_device(job.cfg, job.rank_env, job.stage_env);
  job.device = job.dev.cuda ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(job.dev.index))
                            : torch::Device(torch::kCPU);
  if (job.dev.cuda) cuda::set_device(job.dev.index);
#ifdef GTRAIN_WITH_MPI
  // CUDA ranks: NCCL for CUDA tensors, or MPI through host memory where ranks share a GPU.
  if (auto mpi = std::dynamic_pointer_cast<MpiCommunicator>(job.comm)) {
    StagingChoice staging;
    job.comm = device_world(mpi, job.dev.cuda ? job.dev.index : -1, ProcessContext::get().host,
                            staging_mode(job.stage_env), &staging);
    job.ranks_on_device = staging.ranks_per_device;
    if (!staging.note.empty() && job.comm->rank() == 0 && !job.o.quiet) std::cout << "gtrain: " << staging.note << "\n";
  }
#endif
}

// The lock (srun-started ranks: rank 0 takes it), stop signals, and the CPU threads per rank.
void claim_stage(RankJob& job) {
  job.main_rank = job.comm->rank() == 0;
  if (!job.main_rank) job.cfg.log.progress = "none";
  if (!job.lock && job.main_rank && job.handoff.locked_run_dir.empty())
    job.lock = acquire_stage_lock(job.run_dir, job.cfg);
  install_stop_signals(job.cfg.schedule.stop_signals);
  // No launching gtrain says what a stop signal does (it does for ranks under mpirun): this rank does.
  announce_stop_requests(!job.o.quiet && job.main_rank && (job.comm->size() == 1 || job.rank_env.launcher == "srun"));
  // Bitwise mode: a CPU kernel's rounding can depend on how its range is split over threads, so
  // every layout runs the same count (train.threads, else 1) and never tunes it.
  const bool bitwise = job.cfg.train.reproducible == Reproducible::bitwise;
  const int64_t threads = bitwise && job.cfg.train.threads == 0 ? 1 : job.cfg.train.threads;
  job.threads = set_torch_threads(threads, job.rank_env.local_size);
  job.threads_text =
      std::to_string(job.threads) + (job.cfg.train.threads > 0 ? " (train.threads)"
                                     : bitwise ? " (train.reproducible = bitwise: the same on every layout)"
                                               : " (cores / local ranks)");
}

// --resume PATH, else the newest valid checkpoint unless --no-resume. Rank 0 verifies (reads every
// piece once) and tells the others which checkpoint to load. A run that saved before and has
// nothing valid left is refused rather than started over unnoticed: an unattended stage would redo
// the whole job. The refusal goes to every rank.
ResumeChoice choose_resume(const RankJob& job, const TrainerPaths& paths) {
  ResumeChoice r;
  const RunOptions& o = job.o;
  if (!o.resume.empty()) {
    if (!fs::exists(fs::path(o.resume) / "manifest.json")) {
      throw ConfigError(
          "--resume " + o.resume + ": not a committed checkpoint (no manifest.json)",
          "give --resume a checkpoint directory that holds a manifest.json, or leave --resume out to resume from "
          "the newest valid checkpoint of the run directory");
    }
    r.from = o.resume;
    return r;
  }
  if (o.no_resume) return r;
  std::string refusal;
  if (job.main_rank) {
    r.from = find_latest_valid_checkpoint(paths.checkpoints, &r.warnings);
    if (r.from.empty() && !paths.checkpoints.empty()) refusal = saved_history(job.run_dir, paths.checkpoints);
  }
  refusal = broadcast_string(*job.comm, refusal, 0);
  if (!refusal.empty()) {
    if (job.main_rank)
      for (const auto& w : r.warnings) std::cerr << "gtrain: warning: " << w << std::endl;
    throw ResumeMismatchError(job.run_dir + " has saved before (" + refusal + ") but nothing is left to resume from",
                              "--no-resume starts the run over at step 0 (its checkpoints are moved aside, not "
                              "deleted), --resume PATH resumes from a checkpoint elsewhere; gtrain ckpt verify "
                              "PATH says what is wrong with one");
  }
  r.from = broadcast_string(*job.comm, r.from, 0);
  return r;
}

// Rank 0 reports what the resume search found and creates the run directory before any rank writes.
void prepare_run_directory(const RankJob& job, const ResumeChoice& resume, const Plan& plan) {
  if (job.main_rank) {
    for (const auto& w : resume.warnings) std::cerr << "gtrain: warning: " << w << std::endl;
    if (!job.batch_note.empty() && !job.o.quiet) std::cout << "gtrain: " << job.batch_note << std::endl;
    std::error_code ec;
    fs::create_directories(job.run_dir, ec);
    if (ec) {
      throw ConfigError(job.run_dir + ": cannot create run directory: " + ec.message(),
                        "check that its parent folder is writable, or choose another --run-dir");
    }
    // Ranks srun started (no launching gtrain recorded it): the identity, when the run has none.
    if (job.handoff.locked_run_dir.empty() && !read_run_identity(job.run_dir))
      write_run_identity(job.run_dir, run_identity(job.cfg, identity_layout(plan)));
  }
  if (job.comm->size() > 1) job.comm->barrier();
}

// The stage's facts: its deadline, stop file and allocation from the launching gtrain (or, for
// srun-started ranks, found by rank 0), and the token every rank's saves carry.
StageOptions stage_options(const RankJob& job) {
  StageOptions stage;
  stage.ledger = RunDir(job.run_dir).stages();
  const StageHandoff& handoff = job.handoff;
  if (handoff.has_deadline) {
    stage.deadline_unix = handoff.deadline_unix;
    stage.deadline_source = handoff.deadline_source;
  }
  stage.stop_file = handoff.stop_file;
  stage.restarts = handoff.restarts;
  stage.prepare_seconds = job.prepare_s;
  stage.data_counts = job.data_counts;
  const std::string& a = handoff.allocation_json;
  stage.allocation = a.empty() ? nlohmann::json::object() : nlohmann::json::parse(a, nullptr, false);
  if (job.rank_env.launcher == "srun" && job.main_rank && !handoff.has_deadline) {
    // srun started the ranks, so no launching gtrain found the stage's deadline and allocation:
    // rank 0, the only one that reads them, does (the job's end time, --time-limit, quota windows).
    DiscoveryOptions dopt;
    dopt.read_limits = false;
    dopt.read_end_time = true;  // the stage's deadline: Slurm before 23.02 exports no end time
    const Allocation alloc = discover_allocation(job.stage_env, system_command_runner(), dopt);
    const Deadline deadline = stage_deadline(job.cfg, job.o, alloc);
    stage.deadline_unix = deadline.unix_time;
    stage.deadline_source = deadline.source;
    stage.allocation = allocation_record(alloc, job.comm->size());
  }
  // Same token on every rank: rank 0's clock and pid.
  auto token =
      torch::tensor({static_cast<int64_t>(unix_now() * 1000) ^ (static_cast<int64_t>(::getpid()) << 40)}, torch::kLong);
  if (job.comm->size() > 1) job.comm->broadcast(token, 0);
  stage.save_token = std::to_string(token.item<int64_t>());
  return stage;
}

// A stop request (a stop signal, or the launching gtrain's stop file) during start-up, agreed by
// every rank at `point` (each reaches it, so the agreement is a collective like the others there):
// the stage ends before its first step with nothing to save. "" = go on. (A deadline that passed
// during start-up is the trainer's check before the first step, right after.)
std::string startup_stop(const RankJob& job, const char* point) {
  const StopPolicy policy({job.handoff.stop_file, 0.0, "", job.cfg.schedule.save_safety, job.cfg.schedule.min_lead_s},
                          job.comm->rank() == 0);
  const auto mine = policy.decide(stop_signal_received(), unix_now(), 0.0, 0.0, /*before_first_step=*/true);
  const std::string reason = agree_on_stop(policy, mine, *job.comm);
  if (!reason.empty() && job.main_rank && !job.o.quiet) {
    std::cout << "gtrain: " << reason << " during start-up (" << point
              << "): the stage ends before its first step, nothing to save; exit 3 (run the same command to "
                 "continue)"
              << std::endl;
  }
  return reason;
}

// The outcome of a stage that a stop request ended during start-up.
RunOutcome stopped_in_startup(const RankJob& job, const std::string& reason) {
  RunOutcome out;
  out.run_dir = job.run_dir;
  out.summary.stopped_early = true;
  out.summary.stop_reason = reason;
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// The resumed checkpoint, or checkpoint.init_from's weights on a fresh start (a resume has its own).
InitialWeights load_start_weights(const RankJob& job, Trainer& trainer, const std::string& resume_from,
                                  StageOptions& stage) {
  InitialWeights initial;
  const auto t0 = std::chrono::steady_clock::now();
  const JobConfig& cfg = job.cfg;
  if (cfg.adapter.lora()) {
    // The frozen base comes from checkpoint.init_from on every start (checkpoints hold the adapters),
    // or from the model's own initialisation (train.seed); its identity goes into every checkpoint.
    const std::string& base = cfg.checkpoint.init_from;
    if (!base.empty()) initial = load_frozen_base(trainer.engine(), *job.comm, base);
    const std::string hash = base.empty() ? "seed:" + std::to_string(cfg.train.seed) : base_model_hash(*job.comm, base);
    trainer.set_base_model({{"path", base}, {"hash", hash}});
    if (!resume_from.empty()) trainer.resume(resume_from);
    stage.load_seconds = seconds_since(t0);
    return initial;
  }
  if (!resume_from.empty()) {
    trainer.resume(resume_from);
    stage.load_seconds = seconds_since(t0);
  } else if (!job.cfg.checkpoint.init_from.empty()) {
    initial = load_initial_weights(trainer.engine(), *job.comm, job.cfg.checkpoint.init_from);
    stage.load_seconds = seconds_since(t0);
  }
  return initial;
}

// Why metrics.jsonl's records after the resumed step go depends on why the run resumes there.
std::string dropped_records_reason(const RunOptions& o, const SupersededCheckpoints& moved, int64_t resume_step) {
  if (!o.resume.empty())
    return "--resume " + o.resume + " goes back to step " + std::to_string(resume_step) +
           ": the later steps are trained again from there";
  if (!moved.steps.empty())
    return "the newer checkpoint(s) (step " + std::to_string(moved.steps.back()) +
           (moved.steps.size() > 1 ? " and older" : "") + ") are invalid, so the run resumes at step " +
           std::to_string(resume_step) + " and trains the later steps again";
  return "the previous stage ran past its last checkpoint (step " + std::to_string(resume_step) +
         ") before it ended; those steps are trained again";
}

// Rank 0, once the start is accepted: the resolved config and plan, then checkpoints newer than
// where this run starts (another trajectory) moved aside, never deleted, so that pruning keeps
// this run's checkpoints and the next start resumes this run, and their metrics records dropped. A
// refused start leaves the run directory as it was.
void commit_start(const RankJob& job, const Plan& plan, const TrainerPaths& paths, const std::string& resume_from,
                  int64_t resume_step) {
  if (!job.main_rank) return;
  const RunOptions& o = job.o;
  write_run_files(job.run_dir, job.cfg, plan, job.requested_batch);
  const auto moved = supersede_checkpoints(paths.checkpoints, resume_step, resume_from);
  if (resume_step >= 0) {
    int64_t last_dropped = -1;
    const int64_t dropped = drop_records_after(paths.metrics, resume_step, &last_dropped);
    if (dropped > 0) {
      const std::string upto = last_dropped > resume_step ? " (up to step " + std::to_string(last_dropped) + ")" : "";
      std::cerr << "gtrain: warning: " << paths.metrics << ": dropped " << dropped << " record(s) after step "
                << resume_step << upto << ": " << dropped_records_reason(o, moved, resume_step) << std::endl;
    }
  }
  if (moved.steps.empty()) return;
  const std::string why = o.no_resume           ? "--no-resume starts the run over"
                          : !o.resume.empty()   ? "resuming from the older checkpoint " + resume_from
                          : resume_from.empty() ? "they are invalid and no valid checkpoint remains"
                                                : "they are invalid; resuming from " + resume_from;
  std::cerr << "gtrain: warning: moved " << moved.steps.size() << " checkpoint(s) (step " << join(moved.steps)
            << ") aside to " << moved.folder << ": " << why << std::endl;
}

}  // namespace

std::string unsaved_work_note(const JobConfig& cfg, const Plan& plan, int64_t steps_to_go) {
  if (cfg.checkpoint.interval > 0 || plan.est_step_seconds <= 0 || steps_to_go <= 0) return "";
  const double at_risk = plan.est_step_seconds * static_cast<double>(steps_to_go);
  if (at_risk < kUnsavedWorkNoteSeconds) return "";
  const int64_t every = std::max<int64_t>(1, std::llround(kSuggestedSaveSeconds / plan.est_step_seconds));
  return str("checkpoint.interval = 0: nothing is saved before the end (or a stop request), so a node failure loses ",
             "up to the whole stage, ", format_duration_words(at_risk), " of training at the planned ",
             strf("%.3g", plan.est_step_seconds), " s a step; checkpoint.interval = ", every,
             " saves about every 30 min (async saves cost a few percent of a step)");
}

namespace {

// The start-up lines: run, plan, estimate, engine, device, where the weights came from, warnings.
void print_start(const RankJob& job, const JobParts& parts, const Trainer& trainer, const std::string& engine_desc,
                 const std::string& resume_from, const InitialWeights& initial, const StageOptions& stage) {
  const JobConfig& cfg = job.cfg;
  const Plan& plan = parts.plan;
  const auto& train = *parts.data.train;
  std::cout << "gtrain: run " << job.run_dir << "  model " << cfg.model.name << " (" << parts.stats.params
            << " params)  data " << cfg.data.kind << " (" << (train.source().empty() ? "" : train.source() + ": ")
            << train.size() << " train samples"
            << (parts.data.eval && !parts.data.eval->source().empty() ? "; eval " + parts.data.eval->source() : "")
            << ")\n"
            << "gtrain: plan " << plan.summary() << "  global_batch " << cfg.train.global_batch
            << (job.requested_batch != cfg.train.global_batch
                    ? " (requested " + std::to_string(job.requested_batch) + ")"
                    : "")
            << "  steps " << trainer.total_steps() << "  threads/rank " << job.threads_text << "\n"
            << "gtrain: " << plan.estimate_summary() << (job.dev.cuda ? " on " + plan.profile : "") << "\n"
            << "gtrain: " << engine_desc << " over " << job.comm->backend() << "\n"
            << "gtrain: device " << job.dev.str() << " (" << job.dev.reason << ")\n";
  if (!parts.teacher_note.empty()) std::cout << "gtrain: " << parts.teacher_note << "\n";
  if (!cfg.sweep_sections.empty()) {
    std::cout << "gtrain: note: " << cfg.source_path << " has [" << join(cfg.sweep_sections, "] and [")
              << "] (gtrain sweep reads them): this run trains the base job, without the search\n";
  }
  if (parts.lora.adapters > 0) {
    const double total = static_cast<double>(parts.lora.trainable + parts.lora.frozen);
    std::cout << "gtrain: LoRA rank " << cfg.adapter.rank << " alpha " << cfg.adapter.alpha << " on "
              << join(parts.lora.targets, ", ") << ": " << parts.lora.adapters << " adapters, " << parts.lora.trainable
              << " trainable parameters (" << strf("%.3g", 100.0 * static_cast<double>(parts.lora.trainable) / total)
              << "% of " << static_cast<int64_t>(total) << "); base frozen in " << cfg.adapter.base_dtype << ", from "
              << (cfg.checkpoint.init_from.empty() ? std::string("its own initialisation (train.seed)")
                                                   : cfg.checkpoint.init_from)
              << "\n";
  }
  if (!resume_from.empty()) {
    std::cout << "gtrain: resumed from " << resume_from << " at step " << trainer.steps_done()
              << " (probe loss checked, " << stage.load_seconds << " s)\n";
    if (!cfg.checkpoint.init_from.empty() && parts.lora.adapters == 0)
      std::cout << "gtrain: checkpoint.init_from (" << cfg.checkpoint.init_from
                << ") is for fresh starts: the run's own checkpoint was loaded instead\n";
  }
  if (!initial.source.empty() && parts.lora.adapters == 0) {
    std::cout << "gtrain: weights from " << initial.source << " (" << initial.tensors
              << " tensors, checkpoint.init_from; optimizer fresh at step 0, " << stage.load_seconds << " s)\n";
    if (initial.ignored > 0)
      std::cout << "gtrain: checkpoint.init_from: " << initial.ignored << " optimizer-state tensors in "
                << initial.source << " ignored (exp_avg, exp_avg_sq, momentum_buffer, optimizer.step)\n";
    if (initial.skipped > 0)
      std::cout << "gtrain: checkpoint.init_from: " << initial.skipped << " tensors in " << initial.source
                << " that are not parameters skipped (buffers such as attn.bias, a tied model's lm_head)\n";
  }
  for (const auto& n : parts.data.notes) std::cerr << "gtrain: warning: " << n << std::endl;
  if (const std::string risk = unsaved_work_note(cfg, plan, trainer.total_steps() - trainer.steps_done());
      !risk.empty())
    std::cout << "gtrain: " << risk << "\n";
  const int64_t batch = cfg.train.global_batch;
  const int64_t eval_batches = parts.data.eval ? (parts.data.eval->size() + batch - 1) / batch : 0;
  if (cfg.train.eval_batches == 0 && eval_batches > kLongEvalBatches) {
    std::cerr << "gtrain: warning: train.eval_batches = 0 evaluates the whole held-out split, " << eval_batches
              << " batches of " << batch << " at each evaluation; set train.eval_batches to cap it (llm.c uses 20)"
              << std::endl;
  }
  if (stage.deadline_unix > 0) {
    // The nearest of --time-limit / schedule.time_limit_s, the scheduler's end time and the window's close.
    std::cout << "gtrain: stage deadline in " << format_eta(stage.deadline_unix - unix_now()) << ", at "
              << text::local_time(stage.deadline_unix, "%Y-%m-%d %H:%M:%S") << " (" << stage.deadline_source
              << ", the nearest of the time limit, the scheduler's end time and the quota window's close)\n";
  }
  std::cout << std::flush;
}

// The closing line: done, stage ended (and why), or nothing to do.
void print_end(const RankJob& job, const TrainSummary& s, int64_t total_steps, bool has_eval) {
  if (s.already_complete) {
    std::cout << "gtrain: " << job.run_dir << " is complete (step " << s.steps << " of " << total_steps
              << "); nothing to do" << std::endl;
    return;
  }
  if (s.stopped_early && s.stage_steps == 0) {
    std::cout << "gtrain: stage ended by " << s.stop_reason << " before its first step (at step " << s.steps
              << "); nothing to save; run the same command to resume (exit code 3)"
              << (s.stop_detail.empty() ? "" : "\ngtrain: stopping: " + s.stop_detail) << std::endl;
    return;
  }
  // "done 200 steps" for a whole run in one stage; after a resume, the stage's own share too.
  std::string steps = std::to_string(s.steps) + " steps";
  if (s.stage_steps != s.steps)
    steps = "step " + std::to_string(s.steps) + " (" + std::to_string(s.stage_steps) + " this stage)";
  const std::string mfu = s.mfu > 0 ? strf(", MFU %.3g%%", 100.0 * s.mfu) : "";
  // Why the stage stopped comes first, then what it did.
  if (s.stopped_early) {
    if (!s.stop_detail.empty()) std::cout << "gtrain: stopping at step " << s.steps << ": " << s.stop_detail << "\n";
    std::cout << "gtrain: stage ended by " << s.stop_reason << "; checkpoint saved; run the same command to resume"
              << " (exit code 3)\n";
  }
  std::cout << strf("gtrain: %s %s in %.1f s (%.0f samples/s, data wait %.2f s%s)  train loss %.4f",
                    s.stopped_early ? "stage ended at" : "done", steps.c_str(), s.seconds, s.samples_per_s,
                    s.data_wait_s, mfu.c_str(), s.final_loss);
  if (has_eval && !s.stopped_early) {
    std::cout << strf("  eval loss %.4f  accuracy %.2f%%", s.eval.loss, 100.0 * s.eval.accuracy);
  }
  std::cout << std::endl;
}

}  // namespace

RunOutcome run_job(const RunOptions& o) {
  // 1. Config, rank environment, run directory.
  const auto env = process_environment();
  RankJob job(o);
  job.cfg = load_job_config(o.config_path, o.sets, env);
  if (o.quiet) job.cfg.log.progress = "none";
  job.rank_env = detect_rank_environment(env);
  require_mpi_wireup(job.rank_env);  // before MPI_Init, which would abort every rank
  job.run_dir = resolve_run_dir(job.cfg, o);
  job.batch_note = keep_checkpoint_batch(job.cfg, o, job.run_dir);
  const bool launching = !job.rank_env.launched && !stage_prepared(env, job.run_dir);
  // Text data: once, here (conversations: with what their rows kept and left out).
  job.prepare_s = resolve_text_data(job.cfg, job.run_dir, env, launching, o.quiet, &job.data_counts);
  RunOutcome out;
  out.run_dir = job.run_dir;
  // 2. Launch the ranks here unless a launcher did.
  if (launching) {
    out.launcher_exit = launch_here(job, process_environment());
    if (out.launcher_exit >= 0) return out;  // several ranks ran under mpirun
  }
  job.stage_env = process_environment();
  job.handoff = StageHandoff::from_env(job.stage_env);
  // 3. Communicator, device, lock, threads; the heartbeat the launching gtrain watches.
  open_communicator(job);
  if (!job.handoff.heartbeat_dir.empty())
    Heartbeat::get().start(job.handoff.heartbeat_dir, job.comm->rank(), ProcessContext::get().host);
  claim_stage(job);
  if (const std::string stop = startup_stop(job, "communicator opened"); !stop.empty())
    return stopped_in_startup(job, stop);
  // 4. Assemble data, model, plan and engine; memory the job adds on top of the loaded program is
  // compared with the planner's estimate.
  reset_peak_resident();
  const double baseline_rss = resident_bytes();
  JobParts parts = [&] {
    BuildAllocationScope build;  // the whole model is transient: give it back once split
    return assemble_job(job.cfg, job.comm->size(), job.comm, job.rank_env.local_size, job.device,
                        /*use_fewer_ranks=*/false, !job.batch_note.empty(), job.ranks_on_device);
  }();
  if (const std::string stop = startup_stop(job, "model and data built"); !stop.empty())
    return stopped_in_startup(job, stop);
  job.requested_batch = job.cfg.train.global_batch;
  job.cfg.train.global_batch = parts.plan.global_batch();  // differs only within parallel.batch_tolerance
  // 5. Choose where to start.
  TrainerPaths paths;
  paths.metrics = RunDir(job.run_dir).metrics();
  paths.checkpoints = checkpoint_directory(job.cfg.checkpoint, job.run_dir);
  const ResumeChoice resume = choose_resume(job, paths);
  paths.append_metrics = !resume.from.empty();
  prepare_run_directory(job, resume, parts.plan);
  // 6. The trainer, its stage, and its starting weights.
  const std::string engine_desc = parts.engine->describe();
  Trainer trainer(job.cfg, parts.plan, job.comm, parts.model, parts.data, std::move(parts.engine), paths, job.device);
  trainer.set_memory_baseline(baseline_rss);
  if (!parts.teacher.is_null()) trainer.set_teacher(parts.teacher);
  if (job.cfg.train.threads == 0 && job.device.is_cpu() && job.threads > 1 &&
      job.cfg.train.reproducible != Reproducible::bitwise) {
    // The cores' share is not always fastest (OpenMP's spinning pool against OpenBLAS's and the data
    // workers: 2-20x slower steps at 2 threads than at 1 on 2 busy cores here): the first steps measure.
    trainer.set_thread_tuning(job.threads, job.rank_env.local_size);
    job.threads_text = "auto (the first steps try " + join(thread_candidates(job.threads)) + " and keep the fastest)";
  }
  StageOptions stage = stage_options(job);
  const InitialWeights initial = load_start_weights(job, trainer, resume.from, stage);
  if (const std::string stop = startup_stop(job, "weights loaded"); !stop.empty()) return stopped_in_startup(job, stop);
  commit_start(job, parts.plan, paths, resume.from, resume.from.empty() ? -1 : trainer.steps_done());
  trainer.set_stage(stage);
  const bool report = !o.quiet && job.main_rank;
  if (report) print_start(job, parts, trainer, engine_desc, resume.from, initial, stage);
  // 7. Train, then the summary.
  out.summary = trainer.run();
  if (report) print_end(job, out.summary, trainer.total_steps(), parts.data.eval != nullptr);
  return out;
}

void finish_run_process() {
  Heartbeat::get().stop();
#ifdef GTRAIN_WITH_MPI
  MpiCommunicator::finalize();
#endif
  stop_rank_output_prefix();
}

}  // namespace gtrain
