// trainer.cpp: the training loop.
#include "runtime/train/trainer.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include <ATen/record_function.h>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/common/cuda_device.h"
#include "runtime/common/torch_compat.h"
#include "runtime/core/errors.h"
#include "runtime/core/schedule.h"
#include "runtime/core/startup.h"
#include "runtime/data/rng.h"
#include "runtime/metrics/step_profiler.h"
#include "runtime/train/lr_schedule.h"
#include "runtime/train/thread_choice.h"

namespace gtrain {
namespace {

// The files that differ between two Dataset::identity() lists: "s_0.bin added, s_2.bin changed".
std::string data_files_changed(const nlohmann::json& was, const nlohmann::json& now) {
  if (!was.is_array() || !now.is_array()) return "";
  std::map<std::string, nlohmann::json> before, after;
  for (const auto& f : was)
    if (f.is_object() && f.contains("file") && f["file"].is_string()) before[f["file"].get<std::string>()] = f;
  for (const auto& f : now)
    if (f.is_object() && f.contains("file") && f["file"].is_string()) after[f["file"].get<std::string>()] = f;
  std::vector<std::string> changes;
  for (const auto& [name, f] : after) {
    const auto it = before.find(name);
    if (it == before.end())
      changes.push_back(name + " added");
    else if (it->second != f)
      changes.push_back(name + " changed");
  }
  for (const auto& [name, f] : before)
    if (!after.count(name)) changes.push_back(name + " removed");
  std::string out;
  for (size_t i = 0; i < changes.size() && i < 3; ++i) out += (i ? ", " : "") + changes[i];
  if (changes.size() > 3) out += " and " + std::to_string(changes.size() - 3) + " more";
  return out;
}

// Settings a resume may change that change the trajectory from the resumed step on, each with what
// it changes. The model's keys, train.seed and precision.dtype are the resume check's own (drift).
struct TrajectoryKey {
  const char* key;
  bool schedule;  // the learning rate at the resumed step is recomputed from it
  const char* effect;
};
constexpr TrajectoryKey kTrajectoryKeys[] = {
    {"optimizer.learning_rate", true, "the peak learning rate"},
    {"train.steps", true, "the run's length (the learning-rate schedule is stretched or squeezed to it)"},
    {"train.epochs", true, "the run's length (the learning-rate schedule is stretched or squeezed to it)"},
    {"train.tokens", true, "the run's length (the learning-rate schedule is stretched or squeezed to it)"},
    {"train.warmup_steps", true, "the warmup of the learning-rate schedule"},
    {"train.lr_schedule", true, "the decay of the learning rate"},
    {"train.min_lr_ratio", true, "the final learning rate of the decay"},
    {"optimizer.weight_decay", false, "the weight decay of every update"},
    {"optimizer.beta1", false, "the optimizer's first-moment decay"},
    {"optimizer.beta2", false, "the optimizer's second-moment decay"},
    {"optimizer.eps", false, "the optimizer's epsilon"},
    {"optimizer.momentum", false, "sgd's momentum"},
    {"optimizer.nesterov", false, "sgd's Nesterov momentum"},
    {"train.grad_clip", false, "gradient clipping"},
    {"precision.loss_scale_init", false, "fp16's loss scaling"},
    {"precision.loss_scale_window", false, "fp16's loss scaling"},
};

}  // namespace
int64_t compute_total_steps(const TrainConfig& t, int64_t train_size, int64_t tokens_per_sample) {
  if (t.steps > 0) return t.steps;
  const bool by_epochs = t.epochs > 0;
  const double steps = by_epochs
                           ? std::ceil(t.epochs * static_cast<double>(train_size) / static_cast<double>(t.global_batch))
                           : std::ceil(static_cast<double>(t.tokens) /
                                       (static_cast<double>(t.global_batch) * static_cast<double>(tokens_per_sample)));
  // 2^62 steps: far past any run, and within int64 with room for step x global_batch.
  if (!(steps <= 4.6e18)) {
    char what[160];
    if (by_epochs)
      std::snprintf(what, sizeof(what), "train.epochs = %g makes %g optimizer steps", t.epochs, steps);
    else
      std::snprintf(what, sizeof(what), "train.tokens = %lld makes %g optimizer steps", (long long)t.tokens, steps);
    throw ConfigError(std::string(what) + " (more than 2^62); give a realistic length");
  }
  return std::max<int64_t>(1, static_cast<int64_t>(steps));
}

Trainer::Trainer(const JobConfig& config, const Plan& plan, std::shared_ptr<Communicator> comm,
                 std::shared_ptr<Model> model, DataSplits data, std::unique_ptr<ParallelEngine> engine,
                 TrainerPaths paths, torch::Device device)
    : config_(config),
      plan_(plan),
      comm_(std::move(comm)),
      model_(std::move(model)),
      data_(std::move(data)),
      paths_(std::move(paths)),
      device_(device),
      engine_(std::move(engine)) {
  if (plan_.dp * plan_.tp * plan_.pp != comm_->size() || plan_.global_batch() != config_.train.global_batch) {
    throw ConfigError("plan " + plan_.summary() + " does not match world size " + std::to_string(comm_->size()) +
                      " and train.global_batch " + std::to_string(config_.train.global_batch));
  }
  compat::set_deterministic(config_.train.deterministic);
  if (device_.is_cuda()) {
    cuda::set_device(device_.index());
    cuda::reset_peak_memory(device_.index());
    nvml_index_ = cuda::nvml_index_for(device_.index(), process_environment());
  }
  GT_CHECK(engine_ != nullptr, "Trainer needs a ParallelEngine");
  model_->train();
  precision_ = std::make_unique<Precision>(config_.precision, device_);

  const DataSpec spec = data_.train->spec();
  tokens_per_sample_ = spec.tokens_per_sample();
  layout_ = {config_.train.global_batch, plan_.dp, plan_.micro_batch, plan_.grad_accum};
  order_ = std::make_unique<SampleOrder>(data_.train->size(), static_cast<uint64_t>(config_.train.seed),
                                         data_.train->random_windows());
  total_steps_ = compute_total_steps(config_.train, data_.train->size(), tokens_per_sample_);

  const bool main_rank = comm_->rank() == 0;
  metrics_ = std::make_unique<MetricsLog>(main_rank ? paths_.metrics : std::string(), paths_.append_metrics);
  writer_ = std::make_unique<CheckpointWriter>(config_.checkpoint.async);
  stage_start_unix_ = unix_now();
  progress_ = std::make_unique<Progress>(config_.log, total_steps_, main_rank);
  const std::string run_dir =
      paths_.metrics.empty() ? std::string() : std::filesystem::path(paths_.metrics).parent_path().string();
  if (main_rank && config_.log.profile_start > total_steps_) {
    std::cerr << "gtrain: warning: log.profile_start = " << config_.log.profile_start
              << " is after the run's last step (" << total_steps_ << "): nothing will be profiled" << std::endl;
  }
  profiler_ = std::make_unique<StepProfiler>(config_.log.profile_start, config_.log.profile_steps,
                                             run_dir.empty() ? run_dir : run_dir + "/profile", comm_->rank(),
                                             device_.is_cuda());
  start_ = std::chrono::steady_clock::now();
}

Trainer::~Trainer() = default;

std::vector<int64_t> Trainer::probe_indices() const {
  const int64_t n = std::min<int64_t>(8, data_.train->size());
  std::vector<int64_t> idx;
  for (int64_t g = 0; g < n; ++g) idx.push_back(order_->dataset_index(g));
  return idx;
}

double Trainer::probe_loss(const std::vector<int64_t>& idx) {
  // A collective: every rank takes part (tensor / pipeline parallel forward), the ranks that own
  // the loss report it, and replicas agree.
  torch::NoGradGuard ng;
  const auto n = static_cast<int64_t>(idx.size());
  Batch b = data_.train->collate(idx);
  model_->eval();
  auto sums = torch::zeros({2}, torch::kDouble);
  {
    auto scope = precision_->autocast();
    auto out = engine_->forward_only(*model_, b.input.to(device_));
    if (out.defined()) {
      const double l = model_->loss_sum(out, b.target.to(device_)).item<double>();
      if (engine_->reports_loss()) sums[0] = l, sums[1] = 1;
    }
  }
  model_->train();
  if (comm_->size() > 1) comm_->allreduce(sums, ReduceOp::kSum);
  return sums[0].item<double>() / std::max(1.0, sums[1].item<double>()) / static_cast<double>(n);
}

void Trainer::set_thread_tuning(int most, int local_ranks) {
  thread_tuner_ = std::make_unique<ThreadTuner>(most, local_ranks);
}

nlohmann::json Trainer::checkpoint_meta() {
  nlohmann::json model = nlohmann::json::object();
  const int64_t data_vocab = data_.train->spec().vocab;
  for (const auto& f : cfg::list_fields(config_.model)) {
    if (f.key == "plugin") continue;
    // model.vocab = 0 is recorded as the vocabulary the data gave, so a resume sees it change.
    const bool from_data = f.key == "vocab" && f.value == "0" && data_vocab > 0;
    model[f.key] = from_data ? std::to_string(data_vocab) : f.value;
  }
  nlohmann::json ledger = nlohmann::json::array();
  if (!stage_.ledger.empty()) {
    std::ifstream in(stage_.ledger);
    std::string line;
    while (std::getline(in, line)) {
      if (!line.empty()) ledger.push_back(nlohmann::json::parse(line, nullptr, false));
    }
  }
  return {{"model", model},
          {"config", flat_fields(config_)},
          {"lr_next", lr_at(config_.train, config_.optimizer.learning_rate, step_, total_steps_)},
          {"global_batch", layout_.global_batch},
          {"seed", config_.train.seed},
          {"total_steps", total_steps_},
          {"precision", config_.precision.dtype},
          {"optimizer", config_.optimizer.name},
          {"plan", plan_.summary()},
          {"world", comm_->size()},
          {"train_samples", data_.train->size()},
          {"vocab_from_data", config_.model.vocab <= 0},
          {"train_data", data_.train->identity()},
          {"stage_ledger", ledger}};
}

double Trainer::save_checkpoint_now() {
  const auto t0 = std::chrono::steady_clock::now();
  const double before_write = writer_->last_write_seconds();
  SaveRequest r;
  r.dir = paths_.checkpoints;
  r.step = step_;
  last_saved_step_ = step_;
  r.consumed_samples = step_ * layout_.global_batch;
  r.shards = engine_->state_shards();
  r.rank = comm_->rank();
  r.world = comm_->size();
  r.keep = config_.checkpoint.keep;
  r.token = stage_.save_token.empty() ? "0" : stage_.save_token;
  const std::vector<int64_t> probe_idx = probe_indices();
  const double probe = probe_loss(probe_idx);
  if (r.rank == 0) {
    r.meta = checkpoint_meta();
    r.meta["probe_loss"] = probe;
    r.meta["probe_indices"] = probe_idx;  // the windows a resume on changed data probes again
  }
  writer_->save(std::move(r));
  const double stall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  save_stall_total_ += stall;
  nlohmann::json rec = {
      {"kind", "checkpoint"}, {"step", step_}, {"stall_s", stall}, {"async", config_.checkpoint.async}};
  if (writer_->last_write_seconds() != before_write || !config_.checkpoint.async) {
    rec["previous_write_s"] = writer_->last_write_seconds();
  }
  metrics_->write(rec);
  max_save_seconds_ = std::max(max_save_seconds_, stall + writer_->last_write_seconds());
  return stall;
}

void Trainer::finish_saves() {
  const auto t0 = std::chrono::steady_clock::now();
  writer_->wait();
  save_stall_total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  max_save_seconds_ = std::max(max_save_seconds_, writer_->last_write_seconds());
}

void Trainer::resume(const std::string& path) {
  CheckpointReader ck(path);
  const auto& m = ck.manifest();
  for (const char* key : {"global_batch", "probe_loss"}) {
    if (!m.contains(key)) {
      throw CheckpointError(path + "/manifest.json: key '" + key + "' is missing (not written by a training run)");
    }
  }
  // The model must be the one that was saved: name every key that shapes its parameters and
  // changed. Keys this model does not read may change; model.vocab = 0 means the data's vocabulary.
  // Settings that change the trajectory (not the tensors) are named in the resume check's verdict.
  std::string changed, drift;
  const int64_t data_vocab = data_.train->spec().vocab;
  const auto resolved = [data_vocab](const std::string& key, const std::string& value) {
    return key == "vocab" && value == "0" && data_vocab > 0 ? std::to_string(data_vocab) : value;
  };
  bool data_vocab_changed = false;
  for (const auto& f : cfg::list_fields(config_.model)) {
    if (f.key == "plugin" || !m.at("model").contains(f.key)) continue;
    const std::string was = m.at("model").at(f.key).get<std::string>();
    if (resolved(f.key, was) == resolved(f.key, f.value)) continue;
    std::string change = "model." + f.key + " " + was + " -> " + f.value;
    if (f.key == "vocab" && f.value == "0") {
      change =
          "model.vocab " + was + " -> " + resolved(f.key, f.value) + " (model.vocab = 0: the data's largest id + 1)";
      data_vocab_changed = m.value("vocab_from_data", false);
    }
    if (model_key_shapes_parameters(config_.model.name, f.key)) {
      changed += (changed.empty() ? "" : ", ") + change;
    } else if (f.key == "dropout") {
      drift = change;
    }
  }
  if (!changed.empty()) {
    throw ResumeMismatchError(path + " was written for a different model (" + changed + ")",
                              data_vocab_changed ? "the data's largest id changed (data.path / data.eval_path): "
                                                   "restore the files the run trained with, or --no-resume to start "
                                                   "over"
                                                 : "use the model config the run started with, or --no-resume to "
                                                   "start over");
  }
  if (m.at("global_batch").get<int64_t>() != layout_.global_batch) {
    throw ResumeMismatchError(
        path + " was written with train.global_batch = " + std::to_string(m.at("global_batch").get<int64_t>()) +
            ", this run has " + std::to_string(layout_.global_batch),
        "keep the global batch across stages (the planner keeps it on any GPU count)");
  }
  // The optimizer's state cannot carry over to another optimizer: say so before reading any tensor.
  const auto text_of = [&m](const char* key) {
    return m.contains(key) && m.at(key).is_string() ? m.at(key).get<std::string>() : std::string();
  };
  const std::string saved_optimizer = text_of("optimizer");
  if (!saved_optimizer.empty() && saved_optimizer != config_.optimizer.name) {
    throw ResumeMismatchError(
        path + " was written with optimizer.name = " + saved_optimizer + ", this run has " + config_.optimizer.name,
        "its optimizer state cannot carry over: use optimizer.name = " + saved_optimizer +
            ", or --no-resume to start over");
  }
  if (m.contains("seed") && m.at("seed").is_number_integer() && m.at("seed").get<int64_t>() != config_.train.seed) {
    drift += (drift.empty() ? "" : ", ") + std::string("train.seed ") + std::to_string(m.at("seed").get<int64_t>()) +
             " -> " + std::to_string(config_.train.seed);
  }
  const std::string saved_dtype = text_of("precision");
  if (!saved_dtype.empty() && saved_dtype != config_.precision.dtype) {
    drift +=
        (drift.empty() ? "" : ", ") + std::string("precision.dtype ") + saved_dtype + " -> " + config_.precision.dtype;
  }
  // Other training data (shards added, a file replaced): the sample order from here differs, and
  // the probe batch is taken by its saved window indices where they still exist.
  const int64_t saved_samples = m.value("train_samples", data_.train->size());
  const std::string files_changed =
      m.contains("train_data") ? data_files_changed(m.at("train_data"), data_.train->identity()) : "";
  if (saved_samples != data_.train->size() || !files_changed.empty()) {
    drift += (drift.empty() ? "" : ", ") + std::string("the training data (") + config_.data.kind + " " +
             (saved_samples == data_.train->size()
                  ? std::to_string(saved_samples)
                  : std::to_string(saved_samples) + " -> " + std::to_string(data_.train->size())) +
             " samples" + (files_changed.empty() ? "" : "; " + files_changed) +
             (data_.eval && config_.data.eval_path.empty() &&
                      (config_.data.kind == "tokens" || config_.data.kind == "text_bytes")
                  ? "; data.eval_fraction's held-out tail moved with it, data.eval_path would keep it fixed)"
                  : ")");
  }
  // validate_manifest checked the shape (a non-empty array of counts); the data may have shrunk.
  std::vector<int64_t> probe_idx = probe_indices();
  if (m.contains("probe_indices")) {
    const auto saved_idx = m.at("probe_indices").get<std::vector<int64_t>>();
    const int64_t n = data_.train->size();
    if (std::all_of(saved_idx.begin(), saved_idx.end(), [n](int64_t i) { return i >= 0 && i < n; }))
      probe_idx = saved_idx;
  }
  engine_->load_state(ck.reader());
  step_ = ck.step();
  if (ck.consumed_samples() != step_ * layout_.global_batch) {
    throw CheckpointError(path + ": consumed_samples " + std::to_string(ck.consumed_samples()) +
                          " is not step x global_batch");
  }
  prefetch_.reset();  // restart the data stream at the resumed step
  // Guard against silently wrong resumes: the probe batch must give the saved loss.
  const double saved = m.at("probe_loss").get<double>(), now = probe_loss(probe_idx);
  const double rel = std::abs(now - saved) / std::max(std::abs(saved), 1e-12);
  if (!(rel <= config_.checkpoint.probe_tolerance)) {
    const std::string what = "resume check failed: the probe batch's loss is " + std::to_string(now) +
                             " after loading " + path + " on plan " + plan_.summary() + ", " + std::to_string(saved) +
                             " at save (relative " + std::to_string(rel) + " > checkpoint.probe_tolerance " +
                             std::to_string(config_.checkpoint.probe_tolerance) + ")";
    if (!drift.empty()) {
      throw ResumeMismatchError(what + "; changed since the checkpoint: " + drift,
                                "restore those settings, raise checkpoint.probe_tolerance to accept the change, or "
                                "--no-resume to start over");
    }
    throw CheckpointError(what, "the checkpoint did not load into this layout correctly; report it, or --no-resume");
  }
  // A complete run trains no further: its trajectory cannot differ, so nothing to warn of.
  if (!drift.empty() && comm_->rank() == 0 && step_ < total_steps_) {
    std::cerr << "gtrain: warning: resumed with " << drift << " changed since " << path
              << ": the trajectory differs from an uninterrupted run" << std::endl;
  }
  note_config_changes(m, path);
  // Written when the stage runs: until then a refused start leaves metrics.jsonl as it was.
  pending_resume_record_ = {{"kind", "resume"},          {"step", step_},          {"path", path}, {"probe_loss", now},
                            {"probe_loss_saved", saved}, {"plan", plan_.summary()}};
}

void Trainer::note_config_changes(const nlohmann::json& manifest, const std::string& path) {
  config_changes_ = nlohmann::json::object();
  if (!manifest.contains("config") || !manifest.at("config").is_object()) return;  // written before gtrain recorded it
  const auto& was = manifest.at("config");
  for (const auto& [key, value] : flat_fields(config_)) {
    if (!was.contains(key) || !was.at(key).is_string()) continue;
    const std::string before = was.at(key).get<std::string>();
    // The global batch the plan gives within parallel.batch_tolerance is the resume check's.
    if (before != value && key != "train.global_batch") config_changes_[key] = {before, value};
  }
  // The stage's ledger line records every change; the console names those that change the
  // trajectory, one line each with what they change.
  if (comm_->rank() != 0 || step_ >= total_steps_) return;
  const double lr_now = lr_at(config_.train, config_.optimizer.learning_rate, step_, total_steps_);
  char lr_text[160] = "";
  if (manifest.contains("lr_next") && manifest.at("lr_next").is_number()) {
    std::snprintf(lr_text, sizeof(lr_text), "; the learning rate at step %lld goes %.6g -> %.6g",
                  static_cast<long long>(step_), manifest.at("lr_next").get<double>(), lr_now);
  }
  for (const auto& k : kTrajectoryKeys) {
    if (!config_changes_.contains(k.key)) continue;
    const auto& c = config_changes_.at(k.key);
    std::cerr << "gtrain: warning: " << k.key << " " << c[0].get<std::string>() << " -> " << c[1].get<std::string>()
              << " since " << path << ": changes " << k.effect << " from step " << step_ << " on"
              << (k.schedule ? lr_text : "") << std::endl;
  }
}

bool Trainer::final_recorded() {
  auto flag = torch::zeros({1}, torch::kLong);
  if (comm_->rank() == 0) {
    std::ifstream in(paths_.metrics);
    std::string line;
    while (std::getline(in, line)) {
      const auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_object() && j.contains("kind") && j["kind"] == "final" && j.contains("step") &&
          j["step"].is_number_integer() && j["step"].get<int64_t>() == step_)
        flag[0] = 1;
    }
  }
  if (comm_->size() > 1) comm_->broadcast(flag, 0);
  return flag[0].item<int64_t>() == 1;
}

std::string Trainer::stop_check(double last_step_seconds, bool before_first_step) {
  int code = 0;
  std::string reason;
  if (const int sig = stop_signal_received()) code = 1, reason = "signal " + std::to_string(sig);
  if (!code && comm_->rank() == 0 && !stage_.stop_file.empty()) {
    std::ifstream f(stage_.stop_file);  // the launcher's stop request: "signal N"
    if (f && std::getline(f, reason) && !reason.empty()) code = 1;
  }
  if (!code && stage_.deadline_unix > 0 && comm_->rank() == 0) {
    // Before the first step only a deadline already past counts: every stage that starts in time
    // makes progress (one step and a save) however short its limit.
    const double save = std::max(max_save_seconds_, 1.0);
    const double lead =
        before_first_step ? 0.0 : last_step_seconds + save * config_.schedule.save_safety + config_.schedule.min_lead_s;
    const double left = stage_.deadline_unix - unix_now();
    if (left <= lead) {
      code = 2, reason = "deadline (" + stage_.deadline_source + ")";
      // Why now: a stop well before the limit is the lead it keeps for the next step and the save.
      char why[320];
      if (before_first_step) {
        std::snprintf(why, sizeof(why), "the deadline (%s) passed %.1f s before the first step",
                      stage_.deadline_source.c_str(), -left);
      } else {
        std::snprintf(why, sizeof(why),
                      "%.1f s left before the deadline (%s) < next step %.2f s + %g x save %.1f s "
                      "(schedule.save_safety x the longest save, at least 1 s) + schedule.min_lead_s %g s",
                      left, stage_.deadline_source.c_str(), last_step_seconds, config_.schedule.save_safety, save,
                      config_.schedule.min_lead_s);
      }
      stop_detail_ = why;
    }
  }
  if (comm_->size() > 1) {
    // Every rank stops at the same step: agree on the strongest reason.
    auto t = torch::tensor({code}, torch::kInt);
    comm_->allreduce(t, ReduceOp::kMax);
    const int agreed = t.item<int>();
    if (agreed != code) reason = agreed == 1 ? "signal (on another rank)" : "deadline (" + stage_.deadline_source + ")";
    code = agreed;
  }
  return code ? reason : std::string();
}

void Trainer::write_ledger(const TrainSummary& s, int64_t first_step, double productive_s) {
  if (stage_.ledger.empty() || comm_->rank() != 0) return;
  nlohmann::json rec = {{"start", stage_start_unix_},
                        {"end", unix_now()},
                        {"allocation", stage_.allocation},
                        {"world", comm_->size()},
                        {"plan", plan_.summary()},
                        {"step_from", first_step},
                        {"step_to", s.steps},
                        {"total_steps", total_steps_},
                        {"samples", (s.steps - first_step) * layout_.global_batch},
                        {"productive_s", productive_s},
                        {"save_s", save_stall_total_},
                        {"load_s", stage_.load_seconds},
                        {"exit", s.stop_reason.rfind("failed: ", 0) == 0 ? s.stop_reason
                                 : s.stopped_early                       ? "resumable: " + s.stop_reason
                                                                         : std::string("completed")}};
  if (!s.stop_detail.empty()) rec["stop_detail"] = s.stop_detail;
  if (thread_tuner_ && !thread_tuner_->measured().empty()) {
    rec["threads"] = thread_tuner_->chosen();
    rec["threads_measured"] = thread_tuner_->measured();
  }
  // What this stage changed in the configuration since the checkpoint it resumed: [was, now].
  if (!config_changes_.empty()) rec["config_changes"] = config_changes_;
  std::ofstream f(stage_.ledger, std::ios::app);
  f << rec.dump() << "\n";
}

void Trainer::start_prefetch() {
  const int64_t accum = layout_.accum, dp_rank = engine_->dp_rank();
  auto indices = [this, accum, dp_rank](int64_t seq) {
    return micro_batch_indices(*order_, layout_, seq / accum, dp_rank, seq % accum);
  };
  const int64_t first = step_ * accum, count = (total_steps_ - step_) * accum;
  prefetch_ = std::make_unique<Prefetcher>(data_.train, indices, first, count, config_.data.prefetch,
                                           config_.data.workers, /*pin=*/device_.is_cuda());
}

StepResult Trainer::train_step() {
  GT_CHECK(step_ < total_steps_, "train_step past the last step");
  if (!prefetch_) start_prefetch();
  profiler_->before_step(step_ + 1);
  const auto t0 = std::chrono::steady_clock::now();
  StepResult r;
  r.lr = lr_at(config_.train, config_.optimizer.learning_rate, step_, total_steps_);
  engine_->zero_grad();
  // The built-in models' dropout masks depend only on (seed, global sample, site)
  // (work.first_samples below): the same on any layout. Other random draws (a plugin's own
  // torch::dropout) depend on (seed, step, data-parallel replica): reproducible, resumable at any
  // step, and the same on the tensor-parallel ranks of a replica.
  torch::manual_seed(rng::hash(static_cast<uint64_t>(config_.train.seed), static_cast<uint64_t>(step_),
                               static_cast<uint64_t>(engine_->dp_rank())));

  DynamicLossScaler* scaler = precision_->scaler();
  MicroBatchWork work;
  work.model = model_.get();
  work.precision = precision_.get();
  work.count = layout_.accum;
  work.inv_batch = 1.0 / static_cast<double>(layout_.global_batch);
  work.loss_scale = scaler ? scaler->scale() : 1.0;
  work.dropout_seed = static_cast<uint64_t>(config_.train.seed);
  for (int64_t i = 0; i < layout_.accum; ++i) {
    work.first_samples.push_back(first_sample(layout_, step_, engine_->dp_rank(), i));
  }
  work.next = [this]() {
    Batch b = prefetch_->next();
    return std::make_pair(b.input.to(device_, /*non_blocking=*/true), b.target.to(device_, /*non_blocking=*/true));
  };
  torch::Tensor loss_acc = engine_->run_micro_batches(work);
  r.data_wait_s = prefetch_->take_wait_seconds();
  if (comm_->size() > 1) comm_->allreduce(loss_acc, ReduceOp::kSum);

  bool ok = true;
  if (scaler) {
    ok = engine_->unscale_gradients(1.0 / scaler->scale());
    scaler->update(!ok);
  }
  torch::Tensor norm;
  if (ok) {
    RECORD_USER_SCOPE("gtrain::optimizer");
    norm = engine_->clip_and_step(r.lr, config_.train.grad_clip);
  }
  r.skipped = !ok;
  ++step_;
  r.step = step_;
  r.values_read = values_needed(step_);
  if (r.values_read) {
    // One read of both values (on CUDA the only wait for the GPU this step).
    auto host = (norm.defined() ? torch::cat({loss_acc.to(torch::kDouble), norm.to(torch::kDouble)}) : loss_acc)
                    .to(torch::kCPU);
    r.loss = host[0].item<double>();
    if (norm.defined()) r.grad_norm = host[1].item<double>();
  }
  const auto now = std::chrono::steady_clock::now();
  r.seconds = std::chrono::duration<double>(now - t0).count();
  if (device_.is_cuda() && r.values_read) {
    // The host ran ahead of the GPU since the last read: the steps in between share the time.
    if (last_read_step_ >= 0 && step_ > last_read_step_) {
      r.seconds =
          std::chrono::duration<double>(now - last_read_time_).count() / static_cast<double>(step_ - last_read_step_);
    }
    last_read_time_ = now;
    last_read_step_ = step_;
  }
  data_wait_total_ += r.data_wait_s;
  const std::string profile = profiler_->after_step(step_, /*stage_ends=*/step_ == total_steps_);
  if (!profile.empty() && comm_->rank() == 0) progress_->message(profile);
  if (r.values_read && !std::isfinite(r.loss)) {
    throw Error(std::string("training diverged: loss is ") + (std::isnan(r.loss) ? "nan" : std::to_string(r.loss)) +
                    " at step " + std::to_string(step_),
                "lower optimizer.learning_rate, add train.warmup_steps or set train.grad_clip");
  }
  return r;
}

EvalResult Trainer::evaluate() {
  EvalResult res;
  if (!data_.eval) return res;
  torch::NoGradGuard ng;
  model_->eval();
  int64_t n = data_.eval->size();
  if (config_.train.eval_batches > 0) n = std::min(n, config_.train.eval_batches * config_.train.global_batch);
  const int64_t chunk = std::max<int64_t>(plan_.micro_batch, 64);
  const int64_t dp_rank = engine_->dp_rank();
  auto sums = torch::zeros({3}, torch::kDouble);  // loss sum, correct, count
  double loss_sum = 0, correct = 0, count = 0;
  for (int64_t start = dp_rank * chunk; start < n; start += chunk * plan_.dp) {
    std::vector<int64_t> idx;
    for (int64_t i = start; i < std::min(n, start + chunk); ++i) idx.push_back(i);
    Batch b = data_.eval->collate(idx);
    auto scope = precision_->autocast();
    auto out = engine_->forward_only(*model_, b.input.to(device_));
    if (!out.defined()) continue;  // a pipeline stage before the last
    auto target = b.target.to(device_);
    const double l = model_->loss_sum(out, target).item<double>(), k = model_->correct(out, target).item<double>();
    if (!engine_->reports_loss()) continue;  // another rank of the tensor-parallel group counts it
    loss_sum += l;
    correct += k;
    count += static_cast<double>(target.numel());
  }
  sums[0] = loss_sum, sums[1] = correct, sums[2] = count;
  if (comm_->size() > 1) comm_->allreduce(sums, ReduceOp::kSum);
  const int64_t samples = n;
  res.samples = samples;
  res.loss = sums[0].item<double>() / static_cast<double>(std::max<int64_t>(1, samples));
  res.accuracy = sums[1].item<double>() / std::max(1.0, sums[2].item<double>());
  model_->train();
  return res;
}

bool Trainer::values_needed(int64_t step) const {
  if (!device_.is_cuda()) return true;
  // The first step too: where the loss starts is worth knowing.
  return step == 1 || step % config_.log.metrics_interval == 0 || step == total_steps_ || progress_->prints(step - 1);
}

void Trainer::add_device_metrics(nlohmann::json& rec) const {
  constexpr double kMb = 1 << 20;
  const auto m = cuda::memory_stats(device_.index());
  rec["cuda_max_allocated_mb"] = m.max_allocated / kMb;
  rec["cuda_reserved_mb"] = m.reserved / kMb;
  rec["cuda_max_reserved_mb"] = m.max_reserved / kMb;
  // The planner's estimate of the tensors is compared with what torch allocated on the device at
  // most; its whole figure (plus the CUDA context, library workspaces and the caching allocator's
  // slack) with what the device had in use.
  rec["peak_mem_mb"] = m.max_allocated / kMb;
  rec["est_mem_mb"] = plan_.est_tensor_bytes / kMb;
  rec["est_device_mem_mb"] = plan_.est_memory_bytes / kMb;
  const auto n = cuda::nvml_sample(nvml_index_);
  if (n.valid) {
    rec["gpu_util"] = n.gpu_util;
    rec["gpu_mem_util"] = n.mem_util;
    rec["gpu_mem_used_mb"] = n.used_bytes / kMb;
    rec["gpu_mem_total_mb"] = n.total_bytes / kMb;
  }
}

void Trainer::log_step(const StepResult& r) {
  if (!r.values_read) return;  // neither printed nor logged (values_needed)
  const double samples = static_cast<double>(layout_.global_batch);
  const double rate = samples / std::max(r.seconds, 1e-9);
  const bool tokens = tokens_per_sample_ > 0;
  const double unit_rate = tokens ? rate * static_cast<double>(tokens_per_sample_) : rate;
  progress_->update(r.step - 1, r.loss, unit_rate, tokens ? "tokens" : "samples", r.lr);
  if (!metrics_->enabled()) return;
  if (r.step % config_.log.metrics_interval != 0 && r.step != total_steps_ && r.step != 1) return;
  nlohmann::json rec = {{"kind", "train"},
                        {"step", r.step},
                        {"loss", r.loss},
                        {"lr", r.lr},
                        {"grad_norm", std::isfinite(r.grad_norm) ? nlohmann::json(r.grad_norm) : nlohmann::json()},
                        {"samples_per_s", rate},
                        {"step_time_s", r.seconds},
                        {"data_wait_s", r.data_wait_s},
                        {"consumed_samples", r.step * layout_.global_batch},
                        {"elapsed_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count()},
                        {"time", unix_now()}};
  if (tokens) rec["tokens_per_s"] = unit_rate;
  if (r.skipped) rec["skipped"] = true;
  if (device_.is_cuda()) {
    add_device_metrics(rec);
  } else if (memory_baseline_ > 0) {
    // CPU: the job's resident high-water mark above the baseline.
    rec["peak_mem_mb"] = (peak_resident_bytes() - memory_baseline_) / (1 << 20);
    rec["est_mem_mb"] = plan_.est_memory_bytes / (1 << 20);
  }
  if (auto* s = precision_->scaler()) rec["loss_scale"] = s->scale();
  metrics_->write(rec);
}

void Trainer::maybe_checkpoint(bool final) {
  const auto& c = config_.checkpoint;
  if (paths_.checkpoints.empty()) return;
  const bool due = final ? c.at_end : (c.interval > 0 && step_ % c.interval == 0);
  if (due) save_checkpoint_now();
}

TrainSummary Trainer::run() {
  const int64_t first = step_;
  // A finished run started again leaves its records alone, unless its last stage saved the final
  // checkpoint but failed in the final evaluation: that evaluation runs now.
  if (step_ >= total_steps_ && step_ > 0 && final_recorded()) {
    TrainSummary done;
    done.steps = step_;
    done.already_complete = true;
    return done;
  }
  if (!pending_resume_record_.is_null()) metrics_->write(pending_resume_record_);
  pending_resume_record_ = nullptr;
  try {
    return run_stage();
  } catch (const std::exception& e) {
    // The stage still goes in the ledger, with how it failed (gtrain status shows it); main() reports it.
    TrainSummary failed;
    failed.steps = step_;
    failed.stop_reason = "failed: " + first_line(e.what());
    write_ledger(failed, first, productive_s_);
    throw;
  }
}

TrainSummary Trainer::run_stage() {
  TrainSummary s;
  start_ = std::chrono::steady_clock::now();
  progress_->set_start(step_);
  const int64_t first = step_;
  last_read_step_ = step_;
  last_read_time_ = start_;
  double& productive = productive_s_;
  productive = 0;
  StepResult last;
  // The stage's counts and speed, when it ends either way.
  auto summarise = [&]() {
    s.steps = step_;
    s.stage_steps = step_ - first;
    s.final_loss = last.loss;
    s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    s.samples_per_s = static_cast<double>((step_ - first) * layout_.global_batch) / std::max(s.seconds, 1e-9);
    s.data_wait_s = data_wait_total_;
  };
  // End of stage: save (whatever the interval) unless nothing ran, wait for it to commit, report resumable.
  auto end_stage = [&](const std::string& stop) {
    const std::string profile = profiler_->after_step(step_, /*stage_ends=*/true);
    if (!profile.empty() && comm_->rank() == 0) progress_->message(profile);
    progress_->finish();
    if (step_ > first && last_saved_step_ != step_ && !paths_.checkpoints.empty()) save_checkpoint_now();
    finish_saves();
    mark_stage_saved();
    summarise();
    s.stopped_early = true;
    s.stop_reason = stop;
    if (stop.rfind("deadline", 0) == 0) s.stop_detail = stop_detail_;
    nlohmann::json end = {{"kind", "stage_end"}, {"step", step_}, {"reason", stop}};
    if (!s.stop_detail.empty()) end["detail"] = s.stop_detail;
    metrics_->write(end);
    write_ledger(s, first, productive);
    return s;
  };
  // A deadline already past (a stage that started late) or a stop signal during start-up ends the
  // stage before its first step: nothing new to save.
  if (step_ < total_steps_) {
    const std::string stop = stop_check(0.0, /*before_first_step=*/true);
    if (!stop.empty()) return end_stage(stop);
  }
  while (step_ < total_steps_) {
    const bool tuning = thread_tuner_ && thread_tuner_->active();
    if (tuning) thread_tuner_->before_step();
    last = train_step();
    productive += last.seconds;
    log_step(last);
    if (tuning && thread_tuner_->after_step(last.seconds, *comm_)) {
      const int n = thread_tuner_->chosen();
      metrics_->write({{"kind", "threads"}, {"step", step_}, {"threads", n}, {"measured", thread_tuner_->measured()}});
      if (comm_->rank() == 0)
        progress_->message("threads/rank " + std::to_string(n) + ", the fastest of steps at " +
                           thread_tuner_->measured() + " (train.threads = 0; set it to choose)");
    }
    if (step_ == total_steps_) break;
    // The interval checkpoint comes before the interval evaluation: an error while evaluating loses no step.
    maybe_checkpoint(false);
    if (config_.train.eval_interval > 0 && step_ % config_.train.eval_interval == 0) {
      auto e = evaluate();
      if (data_.eval) {
        metrics_->write(
            {{"kind", "eval"}, {"step", step_}, {"loss", e.loss}, {"accuracy", e.accuracy}, {"samples", e.samples}});
        char buf[160];
        std::snprintf(buf, sizeof(buf), "eval @ step %lld: loss %.4f  accuracy %.2f%%", (long long)step_, e.loss,
                      100.0 * e.accuracy);
        progress_->message(buf);
      }
    }
    const std::string stop = stop_check(last.seconds);
    if (!stop.empty()) return end_stage(stop);
  }
  progress_->finish();
  summarise();
  // The training is saved before the final evaluation reads anything: an error there loses no step.
  if (step_ > first || first == 0) maybe_checkpoint(true);
  finish_saves();
  s.eval = evaluate();
  if (data_.eval) {
    metrics_->write({{"kind", "eval"},
                     {"step", step_},
                     {"loss", s.eval.loss},
                     {"accuracy", s.eval.accuracy},
                     {"samples", s.eval.samples}});
  }
  metrics_->write({{"kind", "final"},
                   {"step", step_},
                   {"train_loss", s.final_loss},
                   {"eval_loss", data_.eval ? nlohmann::json(s.eval.loss) : nlohmann::json()},
                   {"eval_accuracy", data_.eval ? nlohmann::json(s.eval.accuracy) : nlohmann::json()},
                   {"seconds", s.seconds},
                   {"samples_per_s", s.samples_per_s},
                   {"data_wait_s", s.data_wait_s},
                   {"save_stall_s", save_stall_total_}});
  write_ledger(s, first, productive);
  return s;
}

}  // namespace gtrain
