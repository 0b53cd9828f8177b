// trainer.cpp: the training loop.
#include "runtime/train/trainer.h"

#include <filesystem>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/common/errors.h"
#include "runtime/common/torch_compat.h"
#include "runtime/data/rng.h"
#include "runtime/train/lr_schedule.h"
#include "runtime/train/shard_gather.h"

namespace gtrain {

int64_t compute_total_steps(const TrainConfig& t, int64_t train_size, int64_t tokens_per_sample) {
  if (t.steps > 0) return t.steps;
  if (t.epochs > 0) {
    return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(t.epochs * static_cast<double>(train_size) /
                                                               static_cast<double>(t.global_batch))));
  }
  const double per_step = static_cast<double>(t.global_batch) * static_cast<double>(tokens_per_sample);
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(static_cast<double>(t.tokens) / per_step)));
}

Trainer::Trainer(const JobConfig& config, const Plan& plan, std::shared_ptr<Communicator> comm,
                 std::shared_ptr<Model> model, DataSplits data, std::unique_ptr<ParallelEngine> engine,
                 TrainerPaths paths)
    : config_(config), plan_(plan), comm_(std::move(comm)), model_(std::move(model)), data_(std::move(data)),
      paths_(std::move(paths)), engine_(std::move(engine)) {
  if (plan_.dp * plan_.tp * plan_.pp != comm_->size() || plan_.global_batch() != config_.train.global_batch) {
    throw ConfigError("plan " + plan_.summary() + " does not match world size " + std::to_string(comm_->size()) +
                      " and train.global_batch " + std::to_string(config_.train.global_batch));
  }
  compat::set_deterministic(config_.train.deterministic);
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
  metrics_ = std::make_unique<MetricsLog>(main_rank ? paths_.metrics : std::string());
  progress_ = std::make_unique<Progress>(config_.log, total_steps_, main_rank);
  start_ = std::chrono::steady_clock::now();
}

Trainer::~Trainer() = default;

void Trainer::start_prefetch() {
  const int64_t accum = layout_.accum, dp_rank = engine_->dp_rank();
  auto indices = [this, accum, dp_rank](int64_t seq) {
    return micro_batch_indices(*order_, layout_, seq / accum, dp_rank, seq % accum);
  };
  const int64_t first = step_ * accum, count = (total_steps_ - step_) * accum;
  prefetch_ = std::make_unique<Prefetcher>(data_.train, indices, first, count, config_.data.prefetch,
                                           config_.data.workers);
}

StepResult Trainer::train_step() {
  GT_CHECK(step_ < total_steps_, "train_step past the last step");
  if (!prefetch_) start_prefetch();
  const auto t0 = std::chrono::steady_clock::now();
  StepResult r;
  r.lr = lr_at(config_.train, config_.optimizer.learning_rate, step_, total_steps_);
  engine_->zero_grad();
  // Random draws (dropout) depend only on (seed, step, data-parallel replica): reproducible,
  // resumable at any step, and the same on the tensor-parallel ranks of a replica.
  torch::manual_seed(rng::hash(static_cast<uint64_t>(config_.train.seed), static_cast<uint64_t>(step_),
                               static_cast<uint64_t>(engine_->dp_rank())));

  DynamicLossScaler* scaler = precision_->scaler();
  MicroBatchWork work;
  work.model = model_.get();
  work.precision = precision_.get();
  work.count = layout_.accum;
  work.inv_batch = 1.0 / static_cast<double>(layout_.global_batch);
  work.loss_scale = scaler ? scaler->scale() : 1.0;
  work.next = [this]() {
    Batch b = prefetch_->next();
    return std::make_pair(b.input.to(device_), b.target.to(device_));
  };
  torch::Tensor loss_acc = engine_->run_micro_batches(work);
  r.data_wait_s = prefetch_->take_wait_seconds();
  if (comm_->size() > 1) comm_->allreduce(loss_acc, ReduceOp::kSum);

  bool ok = true;
  if (scaler) {
    ok = engine_->unscale_gradients(1.0 / scaler->scale());
    scaler->update(!ok);
  }
  if (ok) {
    r.grad_norm = engine_->grad_norm();
    const double clip = config_.train.grad_clip;
    const double coef = (clip > 0 && r.grad_norm > clip) ? clip / (r.grad_norm + 1e-6) : 1.0;
    engine_->step(r.lr, coef);
  }
  r.skipped = !ok;
  r.loss = loss_acc.item<double>();
  ++step_;
  r.step = step_;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  data_wait_total_ += r.data_wait_s;
  if (!std::isfinite(r.loss)) {
    throw Error("training diverged: loss is " + std::to_string(r.loss) + " at step " + std::to_string(step_),
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

void Trainer::log_step(const StepResult& r) {
  const double samples = static_cast<double>(layout_.global_batch);
  const double rate = samples / std::max(r.seconds, 1e-9);
  const bool tokens = tokens_per_sample_ > 0;
  const double unit_rate = tokens ? rate * static_cast<double>(tokens_per_sample_) : rate;
  progress_->update(r.step - 1, r.loss, unit_rate, tokens ? "tokens" : "samples", r.lr);
  if (!metrics_->enabled()) return;
  if (r.step % config_.log.metrics_interval != 0 && r.step != total_steps_) return;
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
                        {"time", std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()}};
  if (tokens) rec["tokens_per_s"] = unit_rate;
  if (r.skipped) rec["skipped"] = true;
  if (auto* s = precision_->scaler()) rec["loss_scale"] = s->scale();
  metrics_->write(rec);
}

void Trainer::maybe_checkpoint(bool final) {
  const auto& c = config_.checkpoint;
  if (paths_.checkpoints.empty()) return;
  const bool due = final ? c.at_end : (c.interval > 0 && step_ % c.interval == 0);
  if (!due) return;
  auto t0 = std::chrono::steady_clock::now();
  std::map<std::string, torch::Tensor> state, whole;
  if (plan_.tp > 1 || plan_.pp > 1) {
    // Tensor / pipeline parallel: rank 0 assembles the whole tensors from every rank's shards and
    // writes them in the single-rank format (collective). Stopgap until checkpoints are sharded.
    for (auto& kv : gather_shards(engine_->state_shards(), *comm_, false)) {
      if (kv.first == "optimizer.step") state["step"] = kv.second;
      else if (model_->named_parameters().contains(kv.first)) whole[kv.first] = kv.second;
      else state[kv.first] = kv.second;
    }
  } else {
    state = engine_->optimizer_state();  // collective: gathers ZeRO shards
  }
  if (comm_->rank() == 0) {
    // Rank 0's model holds its slices: lend it the whole tensors while it is written.
    std::map<std::string, torch::Tensor> held;
    for (auto& kv : model_->named_parameters()) {
      auto it = whole.find(kv.key());
      if (it == whole.end()) continue;
      held[kv.key()] = kv.value().data();
      kv.value().set_data(it->second);
    }
    auto info = save_checkpoint(paths_.checkpoints, step_, step_ * layout_.global_batch, *model_, state, c.keep);
    for (auto& kv : model_->named_parameters()) {
      if (held.count(kv.key())) kv.value().set_data(held[kv.key()]);
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    metrics_->write({{"kind", "checkpoint"}, {"step", step_}, {"path", info.path}, {"save_s", secs}});
  }
  if (comm_->size() > 1) comm_->barrier();
}

TrainSummary Trainer::run() {
  TrainSummary s;
  start_ = std::chrono::steady_clock::now();
  progress_->set_start(step_);
  const int64_t first = step_;
  StepResult last;
  while (step_ < total_steps_) {
    last = train_step();
    log_step(last);
    const bool eval_due = config_.train.eval_interval > 0 && step_ % config_.train.eval_interval == 0 &&
                          step_ != total_steps_;
    if (eval_due) {
      auto e = evaluate();
      if (data_.eval) {
        metrics_->write({{"kind", "eval"}, {"step", step_}, {"loss", e.loss}, {"accuracy", e.accuracy}, {"samples", e.samples}});
        char buf[160];
        std::snprintf(buf, sizeof(buf), "eval @ step %lld: loss %.4f  accuracy %.2f%%", (long long)step_, e.loss,
                      100.0 * e.accuracy);
        progress_->message(buf);
      }
    }
    if (step_ != total_steps_) maybe_checkpoint(false);
  }
  progress_->finish();
  s.steps = step_;
  s.final_loss = last.loss;
  s.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  s.samples_per_s = static_cast<double>((step_ - first) * layout_.global_batch) / std::max(s.seconds, 1e-9);
  s.data_wait_s = data_wait_total_;
  s.eval = evaluate();
  if (data_.eval) {
    metrics_->write({{"kind", "eval"}, {"step", step_}, {"loss", s.eval.loss}, {"accuracy", s.eval.accuracy},
                     {"samples", s.eval.samples}});
  }
  maybe_checkpoint(true);
  metrics_->write({{"kind", "final"},
                   {"step", step_},
                   {"train_loss", s.final_loss},
                   {"eval_loss", data_.eval ? nlohmann::json(s.eval.loss) : nlohmann::json()},
                   {"eval_accuracy", data_.eval ? nlohmann::json(s.eval.accuracy) : nlohmann::json()},
                   {"seconds", s.seconds},
                   {"samples_per_s", s.samples_per_s},
                   {"data_wait_s", s.data_wait_s}});
  return s;
}

}  // namespace gtrain
