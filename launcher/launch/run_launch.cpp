// run_launch.cpp: the launching side of `gtrain run` (torch-free; see run_launch.h).
#include "launcher/launch/run_launch.h"

#include <unistd.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "launcher/base/hardware_query.h"
#include "launcher/base/program_runner.h"
#include "launcher/cluster/cluster_samples.h"
#include "launcher/launch/attempt.h"
#include "launcher/launch/device_choice.h"
#include "launcher/launch/host_include.h"
#include "launcher/launch/launch.h"
#include "launcher/launch/stage_handoff.h"
#include "launcher/scheduler/allocation.h"
#include "launcher/scheduler/scheduler_backend.h"
#include "runtime/core/checkpoint_dirs.h"
#include "runtime/core/checkpoint_manifest.h"
#include "runtime/core/disk_space.h"
#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/core/heartbeat.h"
#include "runtime/core/rank_output.h"
#include "runtime/core/run_dir/chain_file.h"
#include "runtime/core/run_dir/run_files.h"
#include "runtime/core/run_dir/run_identity.h"
#include "runtime/core/run_dir/run_records.h"
#include "runtime/core/run_dir/stage_records.h"
#include "runtime/core/schedule.h"
#include "runtime/core/startup.h"
#include "runtime/core/stop_policy.h"
#include "runtime/core/text/encoder.h"
#include "runtime/core/text/text_data.h"
#include "strategies/planner/capabilities.h"
#include "strategies/planner/hardware_profile.h"
#include "strategies/planner/planner.h"

namespace fs = std::filesystem;

namespace gtrain {

CLI::App* add_run_command(CLI::App& app, RunOptions& run) {
  auto* run_cmd = app.add_subcommand("run", "Train the job a config file describes.");
  run_cmd->add_option("config", run.config_path, "TOML config file")->required();
  run_cmd->add_option("--set", run.sets, "Override a key: section.key=value (repeatable; beats env and file)")
      ->type_name("KEY=VALUE")
      ->allow_extra_args(false);
  run_cmd->add_option("--run-dir", run.run_dir, "Run directory (default <log.root>/<log.name>)");
  run_cmd->add_flag("--quiet", run.quiet, "Only errors on the console");
  auto* resume = run_cmd->add_option("--resume", run.resume,
                                     "Resume from this checkpoint directory (default: the newest valid one)");
  run_cmd->add_flag("--no-resume", run.no_resume, "Start from step 0 even when the run directory has checkpoints")
      ->excludes(resume);
  run_cmd->add_flag("--force", run.force,
                    "Train even when a finished run beside this one has the same identity (to measure noise)");
  run_cmd
      ->add_option("--time-limit", run.time_limit,
                   "Stage wall time (90s, 15m, 2h, HH:MM:SS, D-HH:MM): stop early enough to save, exit 3")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            try {
              parse_duration(v, "--time-limit");
              return "";
            } catch (const ConfigError& e) {
              const std::string what = e.what(), prefix = "--time-limit: ";  // CLI11 names the flag itself
              return what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what;
            }
          },
          "DURATION"));
  run_cmd
      ->add_option("--include", run.include,
                   "Only these hosts of the allocation, and on each only these granted GPUs (node2:0,1@node3)")
      ->type_name("HOSTS");
  run_cmd
      ->add_option("--ranks", run.ranks, "Ranks to start (default: one per granted GPU; CPU ranks stand in for GPUs)")
      ->check(CLI::Validator(
          [](std::string& v) -> std::string {
            if (v.empty() || v.size() > 6 || v.find_first_not_of("0123456789") != std::string::npos || std::stoi(v) < 1)
              return "expected a whole number of ranks from 1 to 999999, got '" + v + "'";
            return "";
          },
          "N"));
  return run_cmd;
}

std::string resolve_run_dir(const JobConfig& c, const std::string& config_path, const std::string& run_dir) {
  if (!run_dir.empty()) return run_dir;
  std::string name = c.log.name;
  if (name.empty()) name = fs::path(config_path).stem().string();
  if (name.empty()) name = "run";
  return (fs::path(c.log.root) / name).string();
}

std::string resolve_run_dir(const JobConfig& c, const RunOptions& o) {
  return resolve_run_dir(c, o.config_path, o.run_dir);
}

std::string keep_checkpoint_batch(JobConfig& cfg, const RunOptions& o, const std::string& run_dir) {
  if (o.no_resume) return "";
  std::string path = o.resume;
  if (path.empty()) {  // the newest committed checkpoint (the resume verifies it, and falls back, later)
    const auto committed = committed_checkpoint_dirs(checkpoint_directory(cfg.checkpoint, run_dir));
    if (!committed.empty()) path = committed.back().second.string();
  }
  if (path.empty()) return "";
  std::ifstream f(fs::path(path) / kManifestFile);
  const auto m = nlohmann::json::parse(f, nullptr, false);
  const char* batch_key = manifest_key::kGlobalBatch;
  if (!m.is_object() || !m.contains(batch_key) || !m[batch_key].is_number_integer()) return "";
  // Bitwise mode keeps the chunk the first stage chose (train.reproducible_chunk = 0 leaves it to
  // the checkpoint): another chunk would be another sum.
  const auto* conf =
      m.contains(manifest_key::kConfig) && m[manifest_key::kConfig].is_object() ? &m[manifest_key::kConfig] : nullptr;
  if (cfg.train.reproducible == Reproducible::bitwise && cfg.train.reproducible_chunk == 0 && conf &&
      conf->value("train.reproducible", std::string()) == "\"bitwise\"") {  // as flat_fields writes it
    const char* chunk_key = manifest_key::kChunk;
    if (m.contains(chunk_key) && m[chunk_key].is_number_integer()) {
      cfg.train.reproducible_chunk = m[chunk_key].get<int64_t>();
    } else {  // an older gtrain recorded the plan's chunk in the config
      try {
        cfg.train.reproducible_chunk = std::stoll(conf->value("train.reproducible_chunk", std::string("0")));
      } catch (const std::exception&) {
        cfg.train.reproducible_chunk = 0;
      }
    }
  }
  const int64_t saved = m[batch_key].get<int64_t>(), asked = cfg.train.global_batch;
  if (saved == asked && cfg.parallel.batch_tolerance == 0) return "";
  const double off = std::abs(static_cast<double>(saved - asked)) / static_cast<double>(std::max<int64_t>(asked, 1));
  if (off > cfg.parallel.batch_tolerance + 1e-12) return "";  // a changed batch: the resume refuses it, naming both
  cfg.train.global_batch = saved;
  cfg.parallel.batch_tolerance = 0;
  return "resuming with the checkpoint's global batch " + std::to_string(saved) + " exactly (train.global_batch " +
         std::to_string(asked) + ", parallel.batch_tolerance applies to fresh starts only)";
}

double resolve_text_data(JobConfig& cfg, const std::string& run_dir, const std::map<std::string, std::string>& env,
                         bool launcher, bool quiet, nlohmann::json* counts) {
  if (!is_text(cfg.data.kind)) return 0;
  const text::TextData td = launcher && !env.count(text::kEnvTextData)
                                ? text::ensure_text_data(cfg, run_dir, quiet ? nullptr : &std::cout)
                                : text::text_data_for_rank(cfg, run_dir, env);
  cfg.data.prepared_dir = td.dir;
  if (launcher) {
    setenv(text::kEnvTextData, td.dir.c_str(), 1);
    setenv(text::kEnvPrepareSeconds, strf("%.3f", td.seconds).c_str(), 1);
    if (!td.counts.is_null()) setenv(text::kEnvDataCounts, td.counts.dump().c_str(), 1);
  }
  if (counts) *counts = td.counts;
  return td.seconds;
}

std::optional<ModelStats> model_stats_from_config(const JobConfig& cfg) {
  if ((cfg.model.name != "gpt" && cfg.model.name != "llama") || !cfg.model.plugin.empty()) return std::nullopt;
  int64_t vocab = cfg.model.vocab;
  if (vocab <= 0) {
    if (is_text(cfg.data.kind))  // the tokenizer's
      vocab = cfg.data.prepared_dir.empty()
                  ? static_cast<int64_t>(text::load_encoder(text::text_tokenizer(cfg)).vocab_size)
                  : text::read_prepare_manifest(cfg.data.prepared_dir).vocab_size;
    else if (cfg.data.kind == DataKind::text_bytes)
      vocab = 256;
    else if (cfg.data.kind == DataKind::synthetic)
      vocab = 64;  // the synthetic token task's default
    else
      return std::nullopt;  // the data's vocabulary decides
  }
  ModelStats s;
  decoder_stats(cfg.model, vocab, &s);
  return s;
}

HardwareProfile gpu_rank_profile(const GpuInfo& g, int ranks_on_device) {
  const double mem = static_cast<double>(g.memory_bytes);
  const auto known = find_gpu_profile(g.name, mem);
  HardwareProfile p = known ? *known : nearest_gpu_profile_by_memory(mem);
  if (mem > 0) p.memory_bytes = mem;
  // Ranks that share the GPU split its memory (each with its own CUDA context) and its rates.
  return shared_gpu_profile(p, ranks_on_device);
}

Plan plan_run(const JobConfig& cfg, const ModelStats& stats, int world_size, int local_ranks, PlanDevice device,
              bool use_fewer_ranks, bool batch_from_checkpoint) {
  // Plan with what this runtime executes (strategies/planner/capabilities.h) and this host's CPU profile
  // (calibrated by `gtrain plan --calibrate`, else a conservative default).
  PlannerInput pin = planner_input_for(cfg, stats, world_size);
  pin.gpus_per_node = world_size;
  pin.caps = kRunCapabilities;
  pin.use_fewer_ranks = use_fewer_ranks;
  pin.batch_from_checkpoint = batch_from_checkpoint;
  pin.profile = local_cpu_profile(process_environment(), ProcessContext::get().host,
                                  static_cast<int>(std::thread::hardware_concurrency()));
  pin.memory_bytes = cfg.parallel.memory_gb > 0 ? cfg.parallel.memory_gb * 1024.0 * 1024.0 * 1024.0
                                                : 0.8 * available_memory_bytes() / std::max(1, local_ranks);
  if (device.nvml_index >= 0) {
    // By the GPU's NVML name and memory; unless parallel.memory_gb says otherwise, its total less
    // what the profile reserves (CUDA context, NCCL), the margin left to the planner.
    const HardwareInfo hw = query_hardware();
    if (static_cast<size_t>(device.nvml_index) < hw.gpus.size()) {
      const GpuInfo& g = hw.gpus[static_cast<size_t>(device.nvml_index)];
      pin.profile = gpu_rank_profile(g, device.ranks_on_device);
      if (cfg.parallel.memory_gb <= 0 && g.memory_bytes > 0) pin.memory_bytes = 0;  // the profile's usable_bytes()
    }
  }
  // parallel.pp_microbatches fixes the micro-batches per step (the planner checks it against the
  // smallest replica share); parallel.micro_batch bounds the micro-batch.
  Plan plan = plan_job(pin);
  if (plan.tp > 1 && stats.vocab > 0 && stats.vocab % plan.tp != 0) {
    throw ConfigError(str("tp = ", plan.tp, " must divide the vocabulary (", stats.vocab, ")"),
                      str("set model.vocab to a multiple of ", plan.tp));
  }
  return plan;
}

PlanDevice launch_plan_device(const JobConfig& cfg, const Allocation& alloc) {
  PlanDevice d;
  const int gpus = alloc.total_gpus();
  if (!alloc.cuda_build || cfg.train.device == DeviceRequest::cpu || gpus == 0) return d;
  for (const auto& n : alloc.nodes) {
    if (n.gpus.empty()) continue;
    d.nvml_index = n.gpus.front();
    break;
  }
  if (d.nvml_index >= 0) d.ranks_on_device = std::max(1, (alloc.world_size() + gpus - 1) / gpus);
  return d;
}

namespace {

// Exports the hand-off into this process's environment, for the ranks it starts.
void export_env(const StageHandoff& handoff) {
  for (const auto& [name, value] : handoff.to_env()) setenv(name.c_str(), value.c_str(), 1);
}

// The worker executable could not be started (errno `err`).
Error worker_start_error(const std::string& worker, int err) {
  return Error("cannot start " + worker + ": " + std::strerror(err) +
               " (gtrain-worker is built next to gtrain; set GTRAIN_WORKER to its path)");
}

size_t count_lines(const fs::path& file) {
  std::ifstream in(file);
  size_t n = 0;
  for (std::string line; std::getline(in, line);) n += !line.empty();
  return n;
}

// A stage whose ranks died without writing their ledger record (a rank killed by a signal, the
// second TERM's abort): the launcher writes one from what metrics.jsonl shows of the stage, so
// stages.jsonl has every stage and `gtrain status` does not take an earlier stage's end for the run's.
void record_unreported_stage(const std::string& run_dir, double start_unix, int world, const nlohmann::json& allocation,
                             int64_t total_steps, const std::string& exit) {
  const auto ran = metrics_stages(RunDir(run_dir).metrics(), start_unix);
  if (ran.empty()) return;  // no step trained: a start refused or failed before training is no stage
  // The time it trained, from its train records (step_time_s): goodput counts it.
  const MetricsStage& s = ran.back();
  StageLedger(RunDir(run_dir).stages())
      .append(unreported_stage_record(start_unix, unix_now(), allocation, world, ran.front().step_from, s, total_steps,
                                      exit, "launcher"));
}

}  // namespace

std::unique_ptr<RunLock> acquire_stage_lock(const std::string& run_dir, const JobConfig& cfg) {
  const int64_t previous_holder = RunLock::holder_pid(run_dir);  // the last run that held it
  auto lock = RunLock::acquire(run_dir, checkpoint_directory(cfg.checkpoint, run_dir));
  for (const auto& rec : record_lost_stages(run_dir, previous_holder, cfg.train.steps)) {
    std::cerr << "gtrain: warning: " << RunDir(run_dir).stages() << " had no record of the stage that trained steps "
              << rec.step_from << "-" << rec.step_to
              << " (its launcher was killed before it wrote one): added from metrics.jsonl" << std::endl;
  }
  return lock;
}

std::string cancelled_chain_stage(const std::map<std::string, std::string>& env, const std::string& run_dir) {
  const auto stage = env.find("GTRAIN_SUBMIT_STAGE");
  if (stage == env.end() || stage->second.empty()) return "";
  // A damaged chain.json is the stage's chain-step's to name.
  if (!chain_exists(run_dir)) return "";
  Chain c;
  try {
    c = read_chain_file(run_dir);
  } catch (const Error&) {
    return "";
  }
  if (c.state != ChainState::cancelled) return "";
  return "stage " + stage->second + " of a chain gtrain cancel cancelled (" + chain_path(run_dir) + ")";
}

// The earliest of the scheduler's end time, --time-limit / schedule.time_limit_s and the end of the
// quota window we are in.
Deadline stage_deadline(const JobConfig& cfg, const RunOptions& o, const Allocation& alloc, double now) {
  if (now <= 0) now = unix_now();
  std::vector<Deadline> ds;
  if (alloc.end_time_unix > 0)
    ds.push_back(
        {static_cast<double>(alloc.end_time_unix), scheduler_name(alloc.scheduler) + std::string(" end time")});
  double limit = cfg.schedule.time_limit_s;
  if (!o.time_limit.empty()) limit = parse_duration(o.time_limit, "--time-limit");
  if (limit > 0) ds.push_back({now + limit, o.time_limit.empty() ? "schedule.time_limit_s" : "--time-limit"});
  std::vector<Window> windows;
  for (size_t i = 0; i < cfg.schedule.window.size(); ++i) {
    windows.push_back(parse_window(cfg.schedule.window[i], "schedule.window[" + std::to_string(i) + "]"));
  }
  if (const double end = window_stretch_end(windows, now); end > 0) {
    ds.push_back({end, "quota window"});
  } else if (!windows.empty() && window_end(windows, now) == 0) {
    std::cerr << "gtrain: warning: started outside every [[schedule.window]]: no quota window bounds this stage "
                 "(gtrain submit starts stages at window openings)"
              << std::endl;
  }
  return earliest(ds);
}

// The longest save an earlier stage of this run measured (stages.jsonl's save_s), 0 when none did.
double longest_recorded_save(const std::string& run_dir) {
  double longest = 0;
  for (const auto& rec : read_stage_records(run_dir)) longest = std::max(longest, rec.save_s);
  return longest;
}

void refuse_step_longer_than_stage(const Plan& plan, const Deadline& deadline, const std::string& run_dir) {
  if (deadline.unix_time <= 0 || plan.est_step_seconds <= 0) return;
  const double save = std::max(1.0, longest_recorded_save(run_dir));
  const double left = deadline.unix_time - unix_now();
  const std::string why = first_step_cannot_fit(plan.est_step_seconds, save, left, deadline.source);
  if (why.empty()) return;
  throw ConfigError("gtrain run: " + why + " (plan " + plan.summary() + ", profile " + plan.profile + ")",
                    str("give the stage at least ", static_cast<int64_t>(std::ceil(plan.est_step_seconds + save)),
                        " s (--time-limit, schedule.time_limit_s, submit --time), or shorten a step: more GPUs, a "
                        "smaller train.global_batch; if the estimate is off, gtrain plan --calibrate"));
}

nlohmann::json allocation_record(const Allocation& alloc, int ranks) {
  nlohmann::json rec = {{"scheduler", alloc.scheduler},
                        {"job_id", alloc.job_id},
                        {"nodes", alloc.nodes.size()},
                        {"gpus", alloc.total_gpus()},
                        {"ranks", ranks}};
  if (ranks < alloc.world_size()) rec["idle"] = idle_slots(alloc, ranks);
  return rec;
}

std::vector<std::string> idle_slots(const Allocation& alloc, int ranks) {
  // mpirun fills the hosts' slots in order (a GPU a slot), so the idle ones are the last.
  std::vector<std::string> idle;
  int slot = 0;
  for (const auto& n : alloc.nodes) {
    const int slots = n.gpus.empty() ? std::max(1, n.tasks) : static_cast<int>(n.gpus.size());
    for (int i = 0; i < slots; ++i, ++slot) {
      if (slot < ranks) continue;
      idle.push_back(n.host + (n.gpus.empty() ? ":slot " + std::to_string(i) : ":gpu " + std::to_string(n.gpus[i])));
    }
  }
  // --ranks beyond the hosts' slots (CPU ranks on one machine): the rest by number.
  for (; slot < alloc.world_size(); ++slot) {
    if (slot >= ranks) idle.push_back("rank " + std::to_string(slot));
  }
  return idle;
}

bool stage_prepared(const std::map<std::string, std::string>& env, const std::string& run_dir) {
  return StageHandoff::from_env(env).locked_run_dir == run_dir;
}

namespace {

// The mpirun launch of `ranks` workers over the allocation's nodes (a hostfile and forwarded
// variables for several hosts), with the stop and outcome files this stage uses.
LaunchSpec mpirun_spec(const RunOptions& o, const JobConfig& cfg, const std::map<std::string, std::string>& env,
                       const std::string& worker, const Allocation& alloc, const std::string& run_dir, int ranks,
                       bool pin_hosts = false) {
  LaunchSpec spec;
  spec.ranks = ranks;
  spec.executable = worker;
  spec.args = o.argv;
  for (const auto& n : alloc.nodes) {
    spec.hosts.push_back({n.host, n.gpus.empty() ? std::max(1, n.tasks) : static_cast<int>(n.gpus.size())});
  }
  spec.pin_hosts = pin_hosts;
  if (spec.hosts.size() > 1 || pin_hosts) {
    spec.hostfile = (fs::path(run_dir) / "hostfile").string();
    for (const auto& kv : env) {
      // Ours, and LibTorch's log levels (--quiet sets them: main.cpp).
      if (kv.first.rfind("GTRAIN_", 0) == 0 || kv.first == "GLOG_minloglevel" || kv.first == "TORCH_CPP_LOG_LEVEL" ||
          kv.first == "KINETO_LOG_LEVEL") {
        spec.forward_env.push_back(kv.first);
      }
    }
    spec.forward_env.insert(spec.forward_env.end(), {"PATH", "LD_LIBRARY_PATH"});
    for (const auto& name : StageHandoff::variables()) spec.forward_env.push_back(name);
  } else {
    spec.hosts.clear();
  }
  // One rank here: no mpirun in between (launch.h).
  spec.direct = ranks == 1 && spec.hosts.empty();
  // This process stays mpirun's parent and turns stop signals into a stop request (launch.h).
  spec.stop_signals = stop_signal_numbers(cfg.schedule.stop_signals);
  spec.quiet = o.quiet;
  spec.stop_file = (fs::path(run_dir) / ".stop-request").string();
  // Rank 0 writes "resumable" here when the stage ends early, and the ranks exit 0 (cli/).
  spec.outcome_file = RunDir(run_dir).path(RunFile::stage_outcome);
  return spec;
}

// A stage's ranks across its attempts: what starts them, where they run (the granted hosts less those
// left out), the allocation record the records carry, and the ledger as the stage found it.
struct StageRanks {
  const RunOptions& o;
  const JobConfig& cfg;
  const std::map<std::string, std::string>& env;
  const std::string& worker;
  const std::string& run_dir;
  const std::function<Plan(const Allocation&)>& plan_ranks;
  StageHandoff& handoff;
  Allocation alloc;           // the granted hosts, less those left out
  int ranks = 0;              // the ranks the next attempt starts
  nlohmann::json allocation;  // the allocation record of stages.jsonl and restarts.jsonl
  LaunchSpec spec;            // the next attempt's launch
  HostHealth health;
  fs::path ledger;          // stages.jsonl
  size_t ledger_lines = 0;  // its records before this stage
  double start_unix = 0;    // when the stage started
};

// Leaves `host` out of the stage: re-plans onto the remaining hosts' GPUs with the same global batch
// and points the next attempt, the hand-off and the allocation record there, noting it in the restart
// `record`. Returns the end of the restart line saying where the ranks go instead, or why the host stays.
std::string leave_out(StageRanks& s, const std::string& host, RestartRecord& record) {
  Allocation rest = s.alloc;
  rest.nodes.erase(
      std::remove_if(rest.nodes.begin(), rest.nodes.end(), [&](const NodeAllocation& n) { return n.host == host; }),
      rest.nodes.end());
  int slots = 0;
  for (const auto& n : rest.nodes) slots += n.gpus.empty() ? std::max(1, n.tasks) : static_cast<int>(n.gpus.size());
  if (rest.ranks_override > slots) rest.ranks_override = slots;
  try {
    // The planner keeps the global batch (uneven shares where it must); the ranks re-plan the
    // same way for the world they start in, and the checkpoint reshards onto it.
    const Plan plan = s.plan_ranks ? s.plan_ranks(rest) : Plan{};
    const int next = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(plan.world, rest.world_size())));
    s.health.left_out.push_back(host);
    const std::string moved = "; leaving out " + host + " (" +
                              (s.health.failures[host] >= 2 ? std::string("its ranks failed twice")
                                                            : "its rank failed before its first step") +
                              "): " + std::to_string(next) + " rank" + (next == 1 ? "" : "s") + " on the other host" +
                              (rest.nodes.size() == 1 ? "" : "s") + ", " + plan.summary() + ", global batch " +
                              std::to_string(plan.global_batch()) + " kept";
    s.alloc = std::move(rest);
    s.ranks = next;
    s.allocation = allocation_record(s.alloc, s.ranks);
    s.allocation["left_out"] = s.health.left_out;
    s.handoff.allocation_json = s.allocation.dump();
    s.handoff.granted.clear();
    for (const auto& n : s.alloc.nodes) s.handoff.granted.emplace_back(n.host, n.gpus);
    LaunchSpec next_spec = mpirun_spec(s.o, s.cfg, s.env, s.worker, s.alloc, s.run_dir, s.ranks, /*pin_hosts=*/true);
    next_spec.args = s.spec.args;
    s.spec = std::move(next_spec);
    record.left_out = host;
    record.ranks = s.ranks;
    record.plan = plan.summary();
    return moved;
  } catch (const std::exception& e) {
    return "; " + host + " stays: the other hosts cannot take the job (" + e.what() + ")";
  }
}

// The restart after attempt `restarts` failed: its record in restarts.jsonl and its line, the failed
// rank's host left out when leave_out_host says so, and the next attempt's arguments (from the newest
// committed checkpoint once this stage committed one: `committed_before` is the newest before it).
void restart_ranks(StageRanks& s, const AttemptEnd& end, const AttemptWatch& watch, int restarts, bool gained,
                   int64_t committed_before) {
  const int64_t reached = watch.reached();
  const int64_t from = newest_committed_step(s.cfg, s.run_dir);
  const int64_t lost = std::max<int64_t>(0, reached - std::max<int64_t>(0, from));
  RestartRecord record;
  record.restart = restarts + 1;
  record.unix = unix_now();
  record.detected_unix = end.hung ? watch.detected_unix() : unix_now();
  record.cause = end.cause;
  record.step_reached = reached;
  record.resume_step = std::max<int64_t>(0, from);
  record.steps_lost = lost;
  record.step_gained = gained;
  record.allocation = s.allocation;
  const std::string host = host_of_rank(s.alloc, end.failed_rank);
  record.host = host;
  std::string moved;  // the line saying where the ranks go instead
  if (leave_out_host(s.health, s.alloc, host, end.failed_phase)) moved = leave_out(s, host, record);
  append_json_line_or_warn(RunDir(s.run_dir).restarts(), record_to_json(record));
  std::cerr << "gtrain: restarting the ranks (restart " << restarts + 1 << " of " << s.cfg.schedule.max_restarts
            << ", schedule.max_restarts) from "
            << (from >= 0 ? "the checkpoint at step " + std::to_string(from) : std::string("the start")) << ": "
            << end.cause << "; " << lost << (lost == 1 ? " step" : " steps") << " to train again" << moved << std::endl;
  if (from > committed_before) s.spec.args = restart_args(s.spec.args);
  s.handoff.restarts = restarts + 1;
  export_env(s.handoff);
}

// The stage's end after its last attempt (`restarts` restarts before it): the ledger record the ranks
// did not write (a stop that abandoned the step under way, a failure), the line for a failure after
// restarts, and the stage's exit code.
int end_stage(const StageRanks& s, const MpirunResult& ran, const AttemptEnd& end, int restarts, bool gained) {
  const JobConfig& cfg = s.cfg;
  if (!ran.abandoned.empty()) {
    const int64_t from = newest_committed_step(cfg, s.run_dir);
    if (count_lines(s.ledger) == s.ledger_lines)
      record_unreported_stage(s.run_dir, s.start_unix, s.ranks, s.allocation, cfg.train.steps,
                              "resumable: stop request; the step under way was abandoned (" + ran.abandoned +
                                  "); resumes from " +
                                  (from >= 0 ? "step " + std::to_string(from) : std::string("the start")));
    return kExitResumable;
  }
  if (ran.exit_code != kExitOk && count_lines(s.ledger) == s.ledger_lines) {
    record_unreported_stage(s.run_dir, s.start_unix, s.ranks, s.allocation, cfg.train.steps,
                            !end.said_why.empty() ? end.said_why
                            : ran.aborted_by      ? "aborted: signal " + std::to_string(ran.aborted_by)
                            : end.hung            ? "failed: " + end.cause
                            : end.rank_signal     ? "failed: a rank ended by signal " + std::to_string(end.rank_signal)
                                                  : "failed: " + end.cause);
  }
  if (end.failed && restarts > 0) {
    std::cerr << "gtrain: error: the ranks failed again after " << restarts << " restart" << (restarts == 1 ? "" : "s")
              << " (schedule.max_restarts = " << cfg.schedule.max_restarts
              << (gained ? "" : "; no step gained since the last one") << "): " << end.cause << std::endl;
  }
  if (end.hung) return kExitFailure;  // the line above (run_mpirun's) named the rank
  return stage_exit_code(ran, s.spec, end.said, end.rank_signal);
}

// The ranks under this process (mpirun over the workers; one rank: the worker itself, LaunchSpec::direct);
// returns the stage's exit code.
// A rank that fails or hangs (no progress by heartbeat.h's rule: the line names it) ends the
// attempt; the ranks then start again from the newest committed checkpoint, at most
// schedule.max_restarts times, each restart a line of restarts.jsonl. A host whose ranks failed
// twice (or once before their first step) is left out while others remain: the stage re-plans onto
// the remaining hosts' GPUs with the same global batch (`plan_ranks`) and resumes there.
int launch_ranks(const RunOptions& o, const JobConfig& cfg, const std::map<std::string, std::string>& env,
                 const std::string& worker, const Allocation& granted, const std::string& run_dir, int ranks,
                 StageHandoff& handoff, nlohmann::json allocation,
                 const std::function<Plan(const Allocation&)>& plan_ranks) {
  // Here, as the one-rank exec would say it: mpirun's own report of a missing executable ends in an
  // exit code (132) that reads as a rank's signal.
  if (::access(worker.c_str(), X_OK) != 0) throw worker_start_error(worker, errno);
  StageRanks s{o,  cfg, env, worker, run_dir, plan_ranks, handoff, granted, ranks, std::move(allocation),
               {}, {},  {},  0,      0};
  s.spec = mpirun_spec(o, cfg, env, worker, s.alloc, run_dir, ranks, /*pin_hosts=*/!o.include.empty());
  std::error_code ec;
  fs::remove(s.spec.stop_file, ec);  // a request left by an earlier stage is not this stage's
  fs::remove(s.spec.outcome_file, ec);
  handoff.stop_file = s.spec.stop_file;
  handoff.outcome_file = s.spec.outcome_file;
  const fs::path beats = RunDir(run_dir).path(RunFile::heartbeats);
  handoff.heartbeat_dir = beats.string();
  export_env(handoff);
  // From here the signals wait, blocked, for run_mpirun, which acts on each (launch.h).
  install_stop_signals(cfg.schedule.stop_signals);
  block_stop_signals(true);
  if (const int sig = stop_signal_received()) {
    std::cerr << "gtrain: " << strsignal(sig) << " before the ranks started: nothing to save; exit 3 (run the same "
              << "command to continue)" << std::endl;
    return kExitResumable;
  }
  // Samples of the partition for gtrain cluster's profile, every cluster.sample_minutes while the
  // ranks run (a thread of its own; signals stay with this one).
  const auto sampler = start_cluster_sampler(scheduler_backend(granted.scheduler), env, cfg.cluster.sample_minutes);
  s.ledger = RunDir(run_dir).stages();
  s.ledger_lines = count_lines(s.ledger);
  make_disk_reserve(run_dir);  // room for this stage's records should the disk fill
  s.start_unix = unix_now();
  HangRule rule;
  rule.fixed_s = cfg.parallel.collective_timeout_s;
  rule.startup_timeout_s = cfg.schedule.startup_timeout_s;
  const int64_t committed_before = newest_committed_step(cfg, run_dir);
  int64_t best_step = -1;  // the furthest step any attempt reached
  for (int restarts = 0;; ++restarts) {
    AttemptWatch watch(beats, run_dir, restarts, s.ranks, rule);
    s.spec.watch = [&watch]() { return watch.poll(); };
    // A step that a stop request finds under way and that cannot end and save within the save lead
    // is abandoned: the ranks end at once, the last committed checkpoint stays.
    s.spec.after_stop = [&](double requested_unix) {
      return abandoned_step(read_heartbeats(beats.string()), requested_unix, unix_now(), cfg.schedule.save_safety,
                            cfg.schedule.min_lead_s);
    };
    const MpirunResult ran = run_mpirun(s.spec);
    const AttemptEnd end = attempt_end(ran, s.spec, watch);
    const bool gained = watch.reached() > best_step;
    best_step = std::max(best_step, watch.reached());
    // "fatal": a rank's error repeats from the same checkpoint by construction (errors.h): no restart.
    if (!end.failed || end.said == "fatal" || restarts >= cfg.schedule.max_restarts)
      return end_stage(s, ran, end, restarts, gained);
    restart_ranks(s, end, watch, restarts, gained, committed_before);
  }
}

}  // namespace

bool repeats_finished_run(const RunOptions& o, const JobConfig& cfg, const std::string& run_dir, const Plan& plan) {
  const bool fresh = o.no_resume || (o.resume.empty() &&
                                     committed_checkpoint_dirs(checkpoint_directory(cfg.checkpoint, run_dir)).empty());
  const auto kept = read_run_identity(run_dir);
  if (!fresh && kept) return false;  // a resume keeps the identity its run started with
  const RunIdentity id = run_identity(cfg, identity_layout(plan));
  // A profiling run is for its measurements, which the finished run does not have.
  if (fresh && !o.force && cfg.log.profile_start == 0) {
    if (const auto other = finished_run_like(run_dir, id)) {
      std::cerr << "gtrain: " << *other << " finished this run already (identity " << id.id()
                << ": the same config, data, initial weights, layout and gtrain " << id.version
                << "); nothing trained. Its results are there; `gtrain runs diff " << *other << " " << run_dir
                << "` compares two runs, and --force trains it again (to measure noise)" << std::endl;
      return true;
    }
  }
  write_run_identity(run_dir, id);
  return false;
}

StageLaunch launch_stage(const RunOptions& o, const JobConfig& cfg, const std::map<std::string, std::string>& env,
                         const std::string& worker, const std::function<Plan(const Allocation&)>& plan_ranks) {
  if (!o.time_limit.empty()) parse_duration(o.time_limit, "--time-limit");  // reject bad input early
  const auto include = o.include.empty() ? std::vector<HostInclude>{} : parse_include(o.include);
  const std::string run_dir = resolve_run_dir(cfg, o);
  // A fresh start's weights (a resume reads its own checkpoint instead): there before ranks start.
  if (!cfg.checkpoint.init_from.empty() &&
      (o.no_resume ||
       (o.resume.empty() && committed_checkpoint_dirs(checkpoint_directory(cfg.checkpoint, run_dir)).empty())))
    check_init_from(cfg.checkpoint.init_from);
  // One rank per granted GPU (CPU ranks stand in without CUDA), or --ranks.
  DiscoveryOptions dopt;
  dopt.ranks = o.ranks;
  dopt.read_limits = false;
  dopt.read_end_time = true;  // the stage's deadline: Slurm before 23.02 exports no end time
  Allocation alloc = discover_allocation(env, system_command_runner(), dopt);
  IncludedAllocation narrowed;
  if (!include.empty()) {
    narrowed = include_only(alloc, include);
    alloc = narrowed.alloc;
  }
  StageLaunch out;
  out.lock = acquire_stage_lock(run_dir, cfg);
  // A stage of a chain gtrain cancel cancelled (its request may have come before this job's script or
  // gtrain run was up, and the scheduler does not keep it): nothing starts.
  if (const std::string why = cancelled_chain_stage(env, run_dir); !why.empty()) {
    std::cerr << "gtrain: " << why << ": nothing to save; exit 3 (gtrain submit starts a new chain)" << std::endl;
    out.exit_code = kExitResumable;
    return out;
  }
  const Deadline deadline = stage_deadline(cfg, o, alloc);
  // Ranks learn the stage's facts from the launching process (launcher/launch/stage_handoff.h).
  StageHandoff handoff;
  handoff.locked_run_dir = run_dir;
  handoff.has_deadline = true;
  handoff.deadline_unix = deadline.unix_time;
  handoff.deadline_source = deadline.source;
  handoff.has_granted = true;
  for (const auto& n : alloc.nodes) handoff.granted.emplace_back(n.host, n.gpus);
  handoff.positions = narrowed.positions;
  export_env(handoff);
  // The plan: bad input fails here, once, before any rank starts; it may leave granted ranks idle.
  Plan plan;
  plan.world = alloc.world_size();
  if (plan_ranks) plan = plan_ranks(alloc);
  refuse_step_longer_than_stage(plan, deadline, run_dir);
  out.ranks = static_cast<int>(std::min<int64_t>(plan.world, alloc.world_size()));
  const nlohmann::json allocation = allocation_record(alloc, out.ranks);
  handoff.allocation_json = allocation.dump();
  export_env(handoff);
  if (repeats_finished_run(o, cfg, run_dir, plan)) {
    out.exit_code = kExitOk;
    return out;
  }
  if (out.ranks < alloc.world_size()) {
    std::cout << "gtrain: starting " << out.ranks << " of the " << alloc.world_size() << " granted ranks ("
              << join(idle_slots(alloc, out.ranks)) << " idle): " << plan.summary() << "; " << plan.reason << std::endl;
  }
  // Several ranks: mpirun. One: supervised too (restarts, the hang watch) unless
  // schedule.max_restarts = 0, where the worker replaces this process (main.cpp).
  // (--include may name other hosts: mpirun starts even one rank there.)
  if (out.ranks > 1 || cfg.schedule.max_restarts > 0 || !include.empty()) {
    out.exit_code = launch_ranks(o, cfg, env, worker, alloc, run_dir, out.ranks, handoff, allocation, plan_ranks);
  } else if (cfg.cluster.sample_minutes > 0 && scheduler_backend(alloc.scheduler).can_submit()) {
    // The worker replaces this process: the stage's one sample of its partition, taken now.
    record_cluster_samples(scheduler_backend(alloc.scheduler), env, static_cast<int64_t>(unix_now()), 2.0,
                           cfg.cluster.sample_minutes * 60 * 0.9);
  }
  return out;
}

std::string gtrain_executable() {
  const fs::path self = self_executable();
  const fs::path launcher = self.parent_path() / "gtrain";
  std::error_code ec;
  return fs::exists(launcher, ec) ? launcher.string() : self.string();
}

std::string worker_executable() {
  if (const char* w = std::getenv("GTRAIN_WORKER"); w && *w) return w;
  return (fs::path(self_executable()).parent_path() / "gtrain-worker").string();
}

void exec_worker(int argc, char** argv) {
  const std::string worker = worker_executable();
  // A stop signal caught so far stays pending for the worker, which unblocks it once its handlers are in.
  block_stop_signals(true);
  hand_on_stop_signal();
  std::vector<char*> args(argv, argv + argc);
  args.push_back(nullptr);
  std::fflush(stdout);
  std::fflush(stderr);
  ::execv(worker.c_str(), args.data());
  const int exec_errno = errno;
  block_stop_signals(false);
  throw worker_start_error(worker, exec_errno);
}

}  // namespace gtrain
