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
#include "runtime/core/disk_space.h"
#include "runtime/core/errors.h"
#include "runtime/core/heartbeat.h"
#include "runtime/core/lr_schedule.h"
#include "runtime/core/machine_notes.h"
#include "runtime/core/run_dir/run_files.h"
#include "runtime/core/run_dir/run_records.h"
#include "runtime/core/run_dir/stage_records.h"
#include "runtime/core/schedule.h"
#include "runtime/core/startup.h"
#include "runtime/core/stop_policy.h"
#include "runtime/data/rng.h"
#include "runtime/metrics/step_profiler.h"
#include "runtime/models/keyed_dropout.h"
#include "runtime/train/thread_choice.h"

namespace gtrain {
namespace {
// Bitwise mode's step loss: the [N] chunk losses added in chunk order, as a [1] double tensor on
// their device (a host loop: a device reduction picks its own order).
torch::Tensor ordered_sum(const torch::Tensor& values) {
  const auto host = values.to(torch::kCPU, torch::kDouble).contiguous();
  const auto* v = host.data_ptr<double>();
  double s = 0;
  for (int64_t i = 0; i < host.numel(); ++i) s += v[i];
  return torch::full({1}, s, values.options().dtype(torch::kDouble));
}

// A collated batch on the device (non-blocking from pinned memory), with its token layout.
DeviceBatch on_device(const Batch& b, const torch::Device& device) {
  auto to = [&](const torch::Tensor& t) { return t.defined() ? t.to(device, /*non_blocking=*/true) : t; };
  return {to(b.input), to(b.target), TokenLayout(to(b.positions), to(b.trained), b.sample_ids)};
}
}  // namespace

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
  const bool bitwise = plan_.chunk > 0;
  compat::set_deterministic(config_.train.deterministic || bitwise, /*strict=*/bitwise);
  if (device_.is_cuda()) {
    cuda::set_device(device_.index());
    cuda::reset_peak_memory(device_.index());
  }
  const PlannedMemory est{plan_.est_tensor_bytes, plan_.est_memory_bytes};
  device_metrics_ = device_.is_cuda() ? DeviceMetrics(device_.index(),
                                                      cuda::nvml_index_for(device_.index(), process_environment()), est)
                                      : DeviceMetrics(-1, -1, est);
  GT_CHECK(engine_ != nullptr, "Trainer needs a ParallelEngine");
  if (bitwise) {
    if (!engine_->supports_bitwise()) {
      throw ConfigError("train.reproducible = \"bitwise\": the engine " + engine_->describe() +
                        " does not support bitwise mode");
    }
  }
  model_->train();
  precision_ = std::make_unique<Precision>(config_.precision, device_);

  const DataSpec spec = data_.train->spec();
  tokens_per_sample_ = spec.tokens_per_sample();
  layout_ = plan_;  // its global batch is train.global_batch (run_job made them equal)
  order_ = std::make_unique<SampleOrder>(data_.train->size(), static_cast<uint64_t>(config_.train.seed),
                                         data_.train->random_windows());
  total_steps_ = compute_total_steps(config_.train, data_.train->size(), tokens_per_sample_);

  const bool main_rank = comm_->rank() == 0;
  metrics_ = std::make_unique<MetricsLog>(main_rank ? paths_.metrics : std::string(), paths_.append_metrics);
  writer_ = std::make_unique<CheckpointWriter>(config_.checkpoint.async);
  stage_start_unix_ = unix_now();
  // A full disk's error names what holds the space, whichever writer meets it first.
  set_disk_usage_context(
      {paths_.metrics.empty() ? std::string() : std::filesystem::path(paths_.metrics).parent_path().string(),
       paths_.checkpoints, config_.checkpoint.keep});
  progress_ = std::make_unique<Progress>(config_.log, total_steps_, main_rank);
  const std::string run_dir =
      paths_.metrics.empty() ? std::string() : std::filesystem::path(paths_.metrics).parent_path().string();
  if (main_rank && config_.log.profile_start > total_steps_) {
    std::cerr << "gtrain: warning: log.profile_start = " << config_.log.profile_start
              << " is after the run's last step (" << total_steps_ << "): nothing will be profiled" << std::endl;
  }
  profiler_ = std::make_unique<StepProfiler>(config_.log.profile_start, config_.log.profile_steps,
                                             run_dir.empty() ? run_dir : RunDir(run_dir).path(RunFile::profile),
                                             comm_->rank(), device_.is_cuda());
  start_ = std::chrono::steady_clock::now();
}

Trainer::~Trainer() {
  // A save still waiting for its probe fails (broken promise): nothing half-known is committed.
  pending_probe_.reset();
}

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
  const DeviceBatch b = on_device(collate_samples(*data_.train, idx), device_);
  model_->eval();
  auto sums = torch::zeros({2}, torch::kDouble);
  {
    auto scope = precision_->autocast();
    TokenLayoutScope layout(b.layout);
    auto out = engine_->forward_only(*model_, b.input);
    if (out.defined()) {
      const double l = model_->train_loss_of(out, b.input, b.target).item<double>();
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

CheckpointMeta Trainer::checkpoint_meta() {
  CheckpointMeta meta;
  const int64_t data_vocab = data_.train->spec().vocab;
  for (const auto& f : cfg::list_fields(config_.model)) {
    if (f.key == "plugin") continue;
    // model.vocab = 0 is recorded as the vocabulary the data gave, so a resume sees it change.
    const bool from_data = f.key == "vocab" && f.value == "0" && data_vocab > 0;
    meta.model[f.key] = from_data ? std::to_string(data_vocab) : f.value;
  }
  meta.config = flat_fields(config_);
  meta.lr_next = lr_at(config_.train, config_.optimizer.learning_rate, step_, total_steps_);
  meta.global_batch = layout_.global_batch();
  meta.seed = config_.train.seed;
  meta.total_steps = total_steps_;
  meta.precision = config_.precision.dtype;
  meta.optimizer = config_.optimizer.name;
  meta.plan = plan_.summary();
  meta.chunk = plan_.chunk;  // bitwise mode: the chunk this plan runs (the config may leave it to the planner)
  meta.train_samples = data_.train->size();
  meta.vocab_from_data = config_.model.vocab <= 0;
  meta.train_data = data_.train->identity();
  meta.stage_ledger = StageLedger(stage_.ledger).records();
  if (!base_model_.is_null()) meta.base_model = base_model_;
  if (!teacher_.is_null()) meta.teacher = teacher_;
  return meta;
}

double Trainer::loss_multiplier(int64_t step) const {
  const int64_t g = layout_.global_batch();
  if (!data_.train->weighted()) return 1.0 / static_cast<double>(g);
  double weight = 0;  // integers well below 2^53: the sum is exact in any order
  for (int64_t i = 0; i < g; ++i) weight += data_.train->weight(order_->dataset_index(step * g + i));
  GT_CHECK(weight > 0, "step " + std::to_string(step + 1) + ": no sample of the global batch trains a target");
  const auto spec = data_.train->spec();
  return (spec.tokens ? static_cast<double>(spec.tokens_per_sample()) : 1.0) / weight;
}

std::vector<int64_t> Trainer::step_batch_indices(int64_t step) const {
  std::vector<int64_t> idx;
  const int64_t g = layout_.global_batch();
  for (int64_t i = 0; i < g; ++i) idx.push_back(order_->dataset_index(step * g + i));
  return idx;
}

double Trainer::next_step_probe_loss(const std::vector<int64_t>& idx, int64_t step) {
  // The replicas share the batch in chunks of a micro-batch, round robin; each chunk draws the
  // dropout masks its samples drew in the step (keyed by their place in the run).
  torch::NoGradGuard ng;
  const auto n = static_cast<int64_t>(idx.size());
  const int64_t chunk = std::max<int64_t>(1, plan_.micro_batch), dp = std::max<int64_t>(1, plan_.dp);
  const int64_t rounds = (n + chunk * dp - 1) / (chunk * dp);
  const bool collective = engine_->collective_forward();
  auto sums = torch::zeros({2}, torch::kDouble);
  for (int64_t round = 0; round < rounds; ++round) {
    const int64_t start = (round * dp + engine_->dp_rank()) * chunk;
    if (start >= n && !collective) break;
    const bool filler = start >= n;  // ZeRO-3's forward is a collective: every replica runs each round
    const int64_t from = filler ? 0 : start, to = filler ? 1 : std::min(n, start + chunk);
    const std::vector<int64_t> part(idx.begin() + from, idx.begin() + to);
    const DeviceBatch b = on_device(collate_samples(*data_.train, part), device_);
    DropoutRowsScope rows(static_cast<uint64_t>(config_.train.seed), step * layout_.global_batch() + from);
    TokenLayoutScope layout(b.layout);
    auto scope = precision_->autocast();
    auto out = engine_->forward_only(*model_, b.input);
    if (!out.defined() || filler) continue;  // a pipeline stage before the last, or the filler
    // The loss is a collective of the tensor-parallel group: all its ranks compute it, one counts it.
    const double l = model_->train_loss_of(out, b.input, b.target).item<double>();
    if (!engine_->reports_loss()) continue;
    sums[0] += l;
    sums[1] += static_cast<double>(to - from);
  }
  if (comm_->size() > 1) comm_->allreduce(sums, ReduceOp::kSum);
  // Weighted samples: the step's own divisor (train_step's), so the probe equals the step's loss.
  if (data_.train->weighted()) return sums[0].item<double>() * loss_multiplier(step);
  return sums[0].item<double>() / std::max(1.0, sums[1].item<double>());
}

bool Trainer::final_recorded() {
  auto flag = torch::zeros({1}, torch::kLong);
  if (comm_->rank() == 0 && has_final_record(paths_.metrics, step_)) flag[0] = 1;
  if (comm_->size() > 1) comm_->broadcast(flag, 0);
  return flag[0].item<int64_t>() == 1;
}

std::string Trainer::stop_check(double last_step_seconds, bool before_first_step) {
  const StopPolicy policy({stage_.stop_file, stage_.deadline_unix, stage_.deadline_source, config_.schedule.save_safety,
                           config_.schedule.min_lead_s},
                          comm_->rank() == 0);
  const auto mine =
      policy.decide(stop_signal_received(), unix_now(), last_step_seconds, max_save_seconds_, before_first_step);
  if (!mine.detail.empty()) stop_detail_ = mine.detail;
  return agree_on_stop(policy, mine, *comm_);  // every rank stops at the same step
}

std::string agree_on_stop(const StopPolicy& policy, const StopPolicy::Decision& mine, Communicator& comm) {
  // The strongest code, and with it the largest signal number any rank got (code x 1024 + signal).
  int agreed = mine.code * 1024 + std::clamp(mine.signal, 0, 1023);
  if (comm.size() > 1) {
    auto t = torch::tensor({agreed}, torch::kInt);
    comm.allreduce(t, ReduceOp::kMax);
    agreed = t.item<int>();
  }
  return policy.agreed_reason(mine, agreed / 1024, agreed % 1024);
}

void Trainer::write_ledger(const TrainSummary& s, int64_t first_step, double productive_s) {
  if (stage_.ledger.empty() || comm_->rank() != 0) return;
  StageRecord rec;
  rec.start = stage_start_unix_;
  rec.end = unix_now();
  rec.allocation = stage_.allocation;
  rec.world = comm_->size();
  rec.plan = plan_.summary();
  rec.step_from = first_step;
  rec.step_to = s.steps;
  rec.total_steps = total_steps_;
  rec.samples = (s.steps - first_step) * layout_.global_batch();
  rec.productive_s = productive_s;
  rec.save_s = save_stall_total_;
  rec.load_s = stage_.load_seconds;
  rec.prepare_s = stage_.prepare_seconds;
  rec.data = stage_.data_counts;
  rec.exit = stage_exit(s.stop_reason, s.stopped_early);
  rec.stop_detail = s.stop_detail;
  if (thread_tuner_ && !thread_tuner_->measured().empty()) {
    rec.threads = thread_tuner_->chosen();
    rec.threads_measured = thread_tuner_->measured();
  }
  rec.config_changes = config_changes_;
  rec.restarts = stage_.restarts;
  StageLedger(stage_.ledger).append(rec);
}

void Trainer::start_prefetch() {
  const int64_t dp_rank = engine_->dp_rank(), accum = layout_.micro_batches(dp_rank);
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
  const int64_t dp_rank = engine_->dp_rank();
  work.count = layout_.micro_batches(dp_rank);
  work.inv_batch = loss_multiplier(step_);
  work.loss_scale = scaler ? scaler->scale() : 1.0;
  work.dropout_seed = static_cast<uint64_t>(config_.train.seed);
  for (int64_t i = 0; i < work.count; ++i) {
    work.first_samples.push_back(first_sample(layout_, step_, dp_rank, i));
    // Bitwise mode: micro-step i of replica r is chunk i * dp + r (parallel_layout.h).
    if (layout_.chunk > 0) work.chunks.push_back(i * layout_.dp + dp_rank);
  }
  work.total_chunks = layout_.chunks();
  work.next = [this]() { return on_device(prefetch_->next(), device_); };
  // CPU ranks meter the tensors of the steps metrics.jsonl records (the hook costs a lookup per
  // allocation; every CPU step reads its values, so values_needed would meter them all).
  const bool metered = !device_.is_cuda() && metrics_->enabled() && recorded_step(step_ + 1) && tensor_meter_.start();
  torch::Tensor loss_acc = engine_->run_micro_batches(work);
  r.data_wait_s = prefetch_->take_wait_seconds();
  // Bitwise mode: one rank holds each chunk's loss, the others zeros (an exact sum), then the chunks
  // are added in their order.
  if (comm_->size() > 1) comm_->allreduce(loss_acc, ReduceOp::kSum);
  if (work.bitwise()) loss_acc = ordered_sum(loss_acc);
  if (pending_probe_) {
    // The save before this step awaits its loss (the weights it saved gave it).
    pending_probe_->set_value(loss_acc.to(torch::kCPU).item<double>());
    pending_probe_.reset();
  }
  // The optimizer changes the weights and its state next: the save must have read them by then.
  save_stall_total_ += writer_->release_sources();
  writer_->rethrow_if_failed();  // a background save that failed ends the stage now

  bool ok = true;
  if (scaler) {
    ok = engine_->unscale_gradients(1.0 / scaler->scale());
    scaler->update(!ok);
  }
  torch::Tensor norm;
  if (ok) {
    RECORD_USER_SCOPE("gtrain::optimizer");
    Heartbeat::get().phase(RankPhase::optimizer);
    norm = engine_->clip_and_step(r.lr, config_.train.grad_clip);
  }
  if (metered) r.tensor_peak_bytes = tensor_meter_.stop();
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
  Heartbeat::get().step_done(step_, r.seconds);
  const std::string profile = profiler_->after_step(step_, /*stage_ends=*/step_ == total_steps_);
  if (!profile.empty() && comm_->rank() == 0) progress_->message(profile);
  if (r.values_read && !std::isfinite(r.loss)) {
    throw DeterministicError(std::string("training diverged: loss is ") +
                                 (std::isnan(r.loss) ? "nan" : std::to_string(r.loss)) + " at step " +
                                 std::to_string(step_),
                             "lower optimizer.learning_rate, add train.warmup_steps or set train.grad_clip");
  }
  return r;
}

EvalResult Trainer::evaluate(double last_step_s) {
  EvalResult res;
  if (!data_.eval) return res;
  Heartbeat::get().phase(RankPhase::eval);
  const auto eval_t0 = std::chrono::steady_clock::now();
  torch::NoGradGuard ng;
  model_->eval();
  int64_t n = data_.eval->size();
  if (config_.train.eval_batches > 0) n = std::min(n, config_.train.eval_batches * config_.train.global_batch);
  const int64_t chunk = std::max<int64_t>(plan_.micro_batch, 64);
  const int64_t dp_rank = engine_->dp_rank();
  auto sums = torch::zeros({3}, torch::kDouble);  // loss sum, correct, count
  const bool weighted = data_.eval->weighted();
  double loss_sum = 0, correct = 0, count = 0;
  // ZeRO-3's forward gathers parameters over the replicas: each runs every round, a replica past the
  // end on one uncounted sample.
  const bool collective = engine_->collective_forward();
  // Every rank runs every round when the forward is a collective (ZeRO-3) or when the rounds end
  // with a stop check (a collective too); otherwise a replica stops at its last batch.
  const bool interruptible = last_step_s >= 0;
  const int64_t rounds = (n + chunk * plan_.dp - 1) / (chunk * plan_.dp);
  for (int64_t start = dp_rank * chunk, round = 0; start < n || ((collective || interruptible) && round < rounds);
       start += chunk * plan_.dp, ++round) {
    if (interruptible && round > 0) {
      res.stopped = stop_check(last_step_s);
      if (!res.stopped.empty()) {
        model_->train();
        return res;
      }
    }
    std::vector<int64_t> idx;
    for (int64_t i = start; i < std::min(n, start + chunk); ++i) idx.push_back(i);
    const bool filler = idx.empty();
    if (filler && !collective) continue;  // this replica is done; it only keeps the stop checks company
    if (filler) idx.push_back(0);
    const Batch host = data_.eval->collate(idx);
    const DeviceBatch b = on_device(host, device_);
    auto scope = precision_->autocast();
    TokenLayoutScope layout(b.layout);
    auto out = engine_->forward_only(*model_, b.input);
    if (!out.defined() || filler) continue;  // a pipeline stage before the last, or the filler
    const double l = model_->loss_sum(out, b.target).item<double>(), k = model_->correct(out, b.target).item<double>();
    if (!engine_->reports_loss()) continue;  // another rank of the tensor-parallel group counts it
    loss_sum += l;
    correct += k;
    // The targets that count: every one of plain rows, the trained ones of weighted data.
    count += weighted ? host.weight : static_cast<double>(b.target.numel());
  }
  sums[0] = loss_sum, sums[1] = correct, sums[2] = count;
  if (comm_->size() > 1) comm_->allreduce(sums, ReduceOp::kSum);
  const int64_t samples = n;
  res.samples = samples;
  // The mean over the targets that count, as the training loss (the models' loss_sum divides by
  // the tokens of a row); for plain rows that is the mean over samples.
  const auto spec = data_.eval->spec();
  res.loss = weighted ? sums[0].item<double>() * (spec.tokens ? static_cast<double>(spec.tokens_per_sample()) : 1.0) /
                            std::max(1.0, sums[2].item<double>())
                      : sums[0].item<double>() / static_cast<double>(std::max<int64_t>(1, samples));
  res.accuracy = sums[1].item<double>() / std::max(1.0, sums[2].item<double>());
  model_->train();
  Heartbeat::get().measured(RankPhase::eval,
                            std::chrono::duration<double>(std::chrono::steady_clock::now() - eval_t0).count());
  return res;
}

bool Trainer::recorded_step(int64_t step) const {
  // The first step too: where the loss starts is worth knowing.
  return step == 1 || step % config_.log.metrics_interval == 0 || step == total_steps_;
}

bool Trainer::values_needed(int64_t step) const {
  if (!device_.is_cuda()) return true;
  return recorded_step(step) || progress_->prints(step - 1);
}

void Trainer::check_estimate(const StepResult& r) {
  constexpr int64_t kWarmup = 2, kSettled = 5;
  constexpr double kTolerance = 0.25;
  if (estimate_checked_ || plan_.est_step_seconds <= 0 || r.skipped) return;
  if (thread_tuner_ && thread_tuner_->active()) return;  // steps at trial thread counts
  if (r.step <= kWarmup || (device_.is_cuda() && !r.values_read)) return;
  settled_steps_.push_back(r.seconds);
  if (static_cast<int64_t>(settled_steps_.size()) < kSettled) return;
  estimate_checked_ = true;
  std::vector<double> t = settled_steps_;
  std::nth_element(t.begin(), t.begin() + static_cast<long>(t.size() / 2), t.end());
  const double measured = t[t.size() / 2], est = plan_.est_step_seconds;
  const double error = measured / est - 1.0;
  if (std::fabs(error) <= kTolerance) return;
  EstimateRecord rec;
  rec.step = r.step, rec.est_step_s = est, rec.measured_step_s = measured, rec.error = error;
  rec.profile = plan_.profile;
  metrics_->write(record_to_json(rec));
  if (comm_->rank() != 0) return;
  // Said once per machine (every run keeps the record above, and gtrain report lists it): a first
  // run on an uncalibrated machine hears it, later ones do not, until `gtrain plan --calibrate`.
  if (!first_time_on_this_machine(process_environment(), ProcessContext::get().host, kEstimateOffNote)) return;
  char buf[400];
  std::snprintf(buf, sizeof(buf),
                "step time %.4g s (median of steps %lld-%lld) is %.0f%% %s the planner's estimate %.4g s%s%s: "
                "plans here choose from wrong figures; run `gtrain plan --calibrate` on this machine (said once "
                "per machine; metrics.jsonl and gtrain report keep it for each run)",
                measured, (long long)(r.step - kSettled + 1), (long long)r.step, 100.0 * std::fabs(error),
                error > 0 ? "above" : "below", est, plan_.profile.empty() ? "" : " for ", plan_.profile.c_str());
  progress_->message(buf);
}

void Trainer::log_step(const StepResult& r) {
  check_estimate(r);
  if (!r.values_read) return;  // neither printed nor logged (values_needed)
  const double samples = static_cast<double>(layout_.global_batch());
  const double rate = samples / std::max(r.seconds, 1e-9);
  const bool tokens = tokens_per_sample_ > 0;
  const double unit_rate = tokens ? rate * static_cast<double>(tokens_per_sample_) : rate;
  progress_->update(r.step - 1, r.loss, unit_rate, tokens ? "tokens" : "samples", r.lr);
  if (!metrics_->enabled()) return;
  if (!recorded_step(r.step)) return;
  TrainRecord rec;
  rec.step = r.step, rec.loss = r.loss, rec.lr = r.lr;
  if (std::isfinite(r.grad_norm)) rec.grad_norm = r.grad_norm;
  rec.samples_per_s = rate, rec.step_time_s = r.seconds, rec.data_wait_s = r.data_wait_s;
  rec.consumed_samples = r.step * layout_.global_batch();
  rec.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  rec.time = unix_now();
  if (tokens) rec.tokens_per_s = unit_rate;
  rec.skipped = r.skipped;
  if (plan_.est_step_seconds > 0) rec.est_step_s = plan_.est_step_seconds;
  // Model FLOPs utilisation: the planner's FLOPs per step over this step's time at the devices' peak.
  if (plan_.flops_per_step > 0 && plan_.peak_flops > 0)
    rec.mfu = plan_.flops_per_step / (std::max(r.seconds, 1e-9) * plan_.peak_flops);
  // The training state rank 0 holds after the step, measured from the engine's tensors.
  const StateBytes state = engine_->state_bytes();
  constexpr double kMiB = 1024.0 * 1024.0;
  rec.param_mb = state.params / kMiB;
  rec.grad_mb = state.grads / kMiB;
  rec.opt_state_mb = state.optimizer / kMiB;
  if (state.host > 0) rec.host_state_mb = state.host / kMiB;
  if (r.tensor_peak_bytes >= 0) rec.step_tensor_peak_mb = r.tensor_peak_bytes / kMiB;
  device_metrics_.add_to(rec.device);
  if (auto* s = precision_->scaler()) rec.loss_scale = s->scale();
  metrics_->write(record_to_json(rec));
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
  if (config_.log.tensorboard && !paths_.metrics.empty())
    metrics_->tensorboard(
        RunDir(std::filesystem::path(paths_.metrics).parent_path().string()).path(RunFile::tensorboard), step_);
  if (!pending_resume_record_.is_null()) metrics_->write(pending_resume_record_);
  pending_resume_record_ = nullptr;
  try {
    return run_stage();
  } catch (const std::exception& e) {
    // The stage still goes in the ledger, with how it failed (gtrain status shows it); main() reports it.
    TrainSummary failed;
    failed.steps = step_;
    const bool disk_full = dynamic_cast<const DiskFullError*>(&e) != nullptr;
    failed.stop_reason = (disk_full ? "failed: disk full: " : "failed: ") + first_line(e.what());
    write_ledger(failed, first, productive_s_);
    throw;
  }
}

namespace {

// The eval record of step `step`'s evaluation `e`, which took `eval_s` seconds.
EvalRecord eval_record(int64_t step, const EvalResult& e, double eval_s) {
  EvalRecord r;
  r.step = step, r.loss = e.loss, r.accuracy = e.accuracy, r.samples = e.samples, r.eval_s = eval_s;
  r.time = unix_now();
  return r;
}

}  // namespace

std::string Trainer::interval_evaluation(double last_step_s) {
  const auto e0 = std::chrono::steady_clock::now();
  auto e = evaluate(last_step_s);
  const double eval_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - e0).count();
  if (!e.stopped.empty()) {
    EvalStoppedRecord stopped;
    stopped.step = step_, stopped.reason = e.stopped;
    metrics_->write(record_to_json(stopped));
    return e.stopped;
  }
  if (data_.eval) {
    metrics_->write(record_to_json(eval_record(step_, e, eval_s)));
    char buf[160];
    std::snprintf(buf, sizeof(buf), "eval @ step %lld: loss %.4f  accuracy %.2f%%", (long long)step_, e.loss,
                  100.0 * e.accuracy);
    progress_->message(buf);
  }
  return "";
}

void Trainer::final_evaluation(TrainSummary& s) {
  const auto e0 = std::chrono::steady_clock::now();
  s.eval = evaluate();
  if (data_.eval)
    metrics_->write(record_to_json(
        eval_record(step_, s.eval, std::chrono::duration<double>(std::chrono::steady_clock::now() - e0).count())));
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
    s.samples_per_s = static_cast<double>((step_ - first) * layout_.global_batch()) / std::max(s.seconds, 1e-9);
    if (plan_.flops_per_step > 0 && plan_.peak_flops > 0)
      s.mfu = s.samples_per_s / static_cast<double>(layout_.global_batch()) * plan_.flops_per_step / plan_.peak_flops;
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
    StageEndRecord end;
    end.step = step_, end.reason = stop, end.detail = s.stop_detail;
    metrics_->write(record_to_json(end));
    write_ledger(s, first, productive);
    return s;
  };
  // schedule.stop_at_step: the stage ends once that step is done, evaluated (a sweep's rung result)
  // and saved; a stage that starts there (its evaluation lost to a kill) evaluates again.
  const int64_t stop_at = config_.schedule.stop_at_step;
  auto stop_at_reached = [&](bool evaluated) {
    if (!evaluated) {
      const std::string stopped = interval_evaluation(last.seconds);
      if (!stopped.empty()) return end_stage(stopped);
    }
    return end_stage("stop_at_step " + std::to_string(stop_at));
  };
  if (stop_at > 0 && step_ >= stop_at && step_ < total_steps_) return stop_at_reached(false);
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
      ThreadsRecord threads;
      threads.step = step_, threads.threads = n, threads.measured = thread_tuner_->measured();
      metrics_->write(record_to_json(threads));
      if (comm_->rank() == 0)
        progress_->message("threads/rank " + std::to_string(n) + ", the fastest of steps at " +
                           thread_tuner_->measured() + " (train.threads = 0; set it to choose)");
    }
    if (step_ == total_steps_) break;
    if (!saves_prepared_ && !(thread_tuner_ && thread_tuner_->active())) prepare_saves();
    // The interval checkpoint comes before the interval evaluation: an error while evaluating loses no step.
    maybe_checkpoint(false);
    const bool interval_eval = config_.train.eval_interval > 0 && step_ % config_.train.eval_interval == 0;
    if (interval_eval) {
      const std::string stopped = interval_evaluation(last.seconds);
      if (!stopped.empty()) return end_stage(stopped);
    }
    if (stop_at > 0 && step_ >= stop_at) return stop_at_reached(interval_eval);
    const std::string stop = stop_check(last.seconds);
    if (!stop.empty()) return end_stage(stop);
  }
  progress_->finish();
  summarise();
  // The training is saved before the final evaluation reads anything: an error there loses no step.
  if (step_ > first || first == 0) maybe_checkpoint(true);
  finish_saves();
  final_evaluation(s);
  FinalRecord fin;
  fin.step = step_, fin.train_loss = s.final_loss;
  if (data_.eval) fin.eval_loss = s.eval.loss, fin.eval_accuracy = s.eval.accuracy;
  fin.seconds = s.seconds, fin.samples_per_s = s.samples_per_s, fin.data_wait_s = s.data_wait_s;
  fin.save_stall_s = save_stall_total_;
  metrics_->write(record_to_json(fin));
  write_ledger(s, first, productive);
  return s;
}

}  // namespace gtrain
