// data_parallel_zero3.cpp: ZeRO-3 in the data-parallel engine: one bucket per block, parameters
// gathered before each use and freed after it, the forward driven block by block (data_parallel.h).
#include <ATen/record_function.h>

#include <map>
#include <unordered_map>

#include "runtime/common/torch_compat.h"
#include "runtime/core/errors.h"
#include "runtime/core/heartbeat.h"
#include "runtime/models/model.h"
#include "runtime/precision/precision.h"
#include "strategies/data_parallel.h"

namespace gtrain {

void DataParallelEngine::build_units() {
  std::unordered_map<std::string, int64_t> index;
  for (size_t i = 0; i < params_.size(); ++i) index[params_[i].first] = static_cast<int64_t>(i);
  std::vector<int64_t> unit_of(params_.size(), -1);
  const auto nunits = static_cast<int64_t>(opt_.units.size());
  for (int64_t u = 0; u < nunits; ++u) {
    for (const auto& name : opt_.units[static_cast<size_t>(u)]) {
      auto it = index.find(name);
      if (it == index.end())
        throw Error("ZeRO-3: block " + std::to_string(u) + " names parameter '" + name +
                    "', which the model does not have");
      if (unit_of[static_cast<size_t>(it->second)] >= 0) {
        throw Error("ZeRO-3: parameter '" + name + "' is in two blocks");
      }
      unit_of[static_cast<size_t>(it->second)] = u;
    }
  }
  // Backward order: the last block first, the outer unit (embedding, final norm, head) last.
  unit_bucket_.assign(static_cast<size_t>(nunits + 1), -1);
  for (int64_t u = nunits - 1; u >= -1; --u) {
    Bucket b;
    b.unit = u;
    for (size_t i = 0; i < params_.size(); ++i) {
      const auto& p = params_[i].second;
      if (!p.requires_grad() || unit_of[i] != u) continue;
      b.segments.push_back({static_cast<int64_t>(i), b.numel, p.numel()});
      b.numel += p.numel();
      bucket_of_[i] = static_cast<int64_t>(buckets_.size());
    }
    unit_bucket_[static_cast<size_t>(u + 1)] = static_cast<int64_t>(buckets_.size());
    // A block without trained parameters is an empty unit: gathered and reduced at no cost.
    buckets_.push_back(std::move(b));
  }
  build_frozen_units(unit_of);
}

void DataParallelEngine::build_frozen_units(const std::vector<int64_t>& unit_of) {
  torch::NoGradGuard ng;
  const int64_t dp = comm_->size();
  for (int64_t u = -1; u < static_cast<int64_t>(opt_.units.size()); ++u) {
    std::map<c10::ScalarType, FrozenUnit> by_type;
    for (size_t i = 0; i < params_.size(); ++i) {
      const auto& p = params_[i].second;
      if (p.requires_grad() || p.numel() == 0 || unit_of[i] != u) continue;
      auto& f = by_type[p.scalar_type()];
      f.unit = u;
      f.segments.push_back({static_cast<int64_t>(i), f.numel, p.numel()});
      f.numel += p.numel();
    }
    for (auto& [type, f] : by_type) {
      f.padded = (f.numel + dp - 1) / dp * dp;
      f.chunk = f.padded / dp;
      f.param = torch::zeros({f.padded}, torch::TensorOptions().dtype(type).device(fopts_.device()));
      for (const auto& s : f.segments) {
        auto& p = params_[static_cast<size_t>(s.param)].second;
        auto view = f.param.narrow(0, s.offset, s.numel);
        view.copy_(p.detach().reshape({-1}));
        p.set_data(view.view(p.sizes()));
      }
      f.shard = f.param.narrow(0, comm_->rank() * f.chunk, f.chunk).clone();
      compat::release_storage(f.param);
      f.gathered = false;
      frozen_.push_back(std::move(f));
    }
  }
}

void DataParallelEngine::frozen_gather(int64_t unit, bool wait) {
  for (auto& f : frozen_) {
    if (f.unit != unit) continue;
    if (!f.gathered) {
      compat::restore_storage(f.param, static_cast<size_t>(f.padded) * f.param.element_size());
      f.gathered = true;
      f.gather_work = comm_->allgather_async(f.shard, f.param);
    }
    if (wait && f.gather_work) {
      f.gather_work->wait();
      f.gather_work.reset();
    }
  }
}

void DataParallelEngine::frozen_release(int64_t unit) {
  for (auto& f : frozen_) {
    if (f.unit != unit || !f.gathered) continue;
    if (f.gather_work) {
      f.gather_work->wait();
      f.gather_work.reset();
    }
    compat::release_storage(f.param);
    f.gathered = false;
  }
}

void DataParallelEngine::start_gather(int64_t k) {
  auto& b = buckets_[static_cast<size_t>(k)];
  if (!frozen_.empty()) frozen_gather(b.unit, false);
  if (b.gathered) return;
  compat::restore_storage(b.param, static_cast<size_t>(b.padded) * sizeof(float));
  b.gathered = true;
  if (b.padded == 0) return;
  b.gather_work = comm_->allgather_async(b.shard, b.param);
}

void DataParallelEngine::wait_gathered(int64_t k) {
  start_gather(k);
  auto& b = buckets_[static_cast<size_t>(k)];
  if (b.gather_work) {
    b.gather_work->wait();
    b.gather_work.reset();
  }
  if (!frozen_.empty()) frozen_gather(b.unit, true);
}

void DataParallelEngine::release(int64_t k, bool frozen) {
  auto& b = buckets_[static_cast<size_t>(k)];
  if (frozen && !frozen_.empty()) frozen_release(b.unit);
  if (!b.gathered) return;
  if (b.gather_work) {  // a prefetch nobody used: it must land before its memory goes
    b.gather_work->wait();
    b.gather_work.reset();
  }
  compat::release_storage(b.param);
  b.gathered = false;
}

void DataParallelEngine::finish_reductions(bool all) {
  torch::NoGradGuard ng;
  for (int64_t k = 0; k < next_launch_; ++k) {
    auto& b = buckets_[static_cast<size_t>(k)];
    if (!b.work) continue;
    if (all) {
      b.work->wait();
    } else if (!b.work->test()) {
      continue;
    }
    b.work.reset();
    if (bitwise()) {
      push_rows(b);
      b.grad = torch::Tensor();
      continue;
    }
    if (b.grad_shard.defined()) {
      b.grad_shard.add_(b.reduced);
    } else {
      b.grad_shard = b.reduced;
    }
    b.reduced = torch::Tensor();
    b.grad = torch::Tensor();  // the unit's whole gradients: gone once reduced
  }
}

void DataParallelEngine::finish_micro_batch(bool last) {
  {
    // Parameters that got no gradient in this micro-batch (unused in forward) count as zero.
    torch::NoGradGuard ng;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (bucket_of_[i] < 0 || got_grad_[i]) continue;
      auto& b = buckets_[static_cast<size_t>(bucket_of_[i])];
      if (!b.grad.defined()) b.grad = torch::zeros({b.padded}, fopts_);
      const auto& seg = segment(static_cast<int64_t>(i));
      b.grad.narrow(0, seg.offset, seg.numel).zero_();
      got_grad_[i] = true;
      ++b.ready;
    }
  }
  launch_ready_buckets();
  finish_reductions(true);
  for (int64_t k = 0; k < num_buckets(); ++k) {
    if (buckets_[static_cast<size_t>(k)].unit >= 0 || last) release(k);
  }
  for (auto& kv : params_) kv.second.mutable_grad() = torch::Tensor();
  if (bitwise()) ++round_;
}

torch::Tensor DataParallelEngine::forward_units(Model& model, const torch::Tensor& input, const torch::Tensor* target) {
  // Autocast's cache of cast weights would keep every block's 16-bit copy alive until the step.
  at::autocast::set_autocast_cache_enabled(false);
  wait_gathered(bucket_of_unit(-1));
  const int64_t n = num_units();
  if (n == 0) {  // one unit: the whole model, gathered for the micro-batch
    return target ? model.train_loss_sum(input, *target) : model.forward(input);
  }
  const bool train = target != nullptr && torch::GradMode::is_enabled();
  auto x = model.pipeline_embed(input);
  start_gather(bucket_of_unit(0));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = bucket_of_unit(i);
    wait_gathered(k);
    if (i + 1 < n) start_gather(bucket_of_unit(i + 1));  // prefetch: overlaps block i's compute
    x = model.pipeline_block(i, x);
    if (train && x.requires_grad()) {
      // Backward reaches block i when this output's gradient is ready: gather it again (unless
      // prefetched) and start on block i - 1. The last block stays for its backward, next.
      if (i + 1 < n) release(k);
      x.register_hook([this, i, n](const torch::Tensor&) {
        // Block i + 1's backward is done (this is its input's gradient): its frozen weights may go.
        if (i + 1 < n && !frozen_.empty()) frozen_release(i + 1);
        wait_gathered(bucket_of_unit(i));
        if (i > 0) start_gather(bucket_of_unit(i - 1));
      });
    } else {
      release(k);
    }
  }
  return target ? model.pipeline_head_loss_sum(x, *target) : model.pipeline_head(x);
}

torch::Tensor DataParallelEngine::run_micro_batches(const MicroBatchWork& w) {
  if (opt_.zero_stage != 3) return ParallelEngine::run_micro_batches(w);
  if (num_units() > 0 && static_cast<int64_t>(w.model->blocks().size()) != num_units()) {
    throw Error("ZeRO-3: the model has " + std::to_string(w.model->blocks().size()) + " blocks, the engine " +
                std::to_string(num_units()));
  }
  prepare_step(w);
  torch::Tensor loss_acc;
  // Bitwise mode: every rank runs every exchange round; one with fewer chunks repeats its last batch
  // as a filler whose gradients nobody adds (the gathers and exchanges are collectives).
  const int64_t rounds = bitwise() ? rounds_ : w.count;
  DeviceBatch batch;
  for (int64_t i = 0; i < rounds; ++i) {
    const bool filler = i >= w.count;
    if (!filler) batch = w.next();
    GT_CHECK(batch.input.defined(), "ZeRO-3: a rank without a micro-batch");
    const bool last = i == rounds - 1;
    begin_micro_batch(last);
    torch::Tensor loss;
    {
      RECORD_USER_SCOPE("gtrain::forward");
      Heartbeat::get().phase(RankPhase::forward);
      auto scope = w.precision->autocast();
      DropoutRowsScope rows(w.rows(i));
      TokenLayoutScope layout(batch.layout);
      loss = forward_units(*w.model, batch.input, &batch.target) * (filler ? 0.0 : w.inv_batch);
    }
    {
      RECORD_USER_SCOPE("gtrain::backward");
      Heartbeat::get().phase(RankPhase::backward);
      (w.loss_scale != 1.0 ? loss * w.loss_scale : loss).backward();
    }
    {
      RECORD_USER_SCOPE("gtrain::grad_sync");
      Heartbeat::get().phase(RankPhase::grad_sync);
      finish_micro_batch(last);
    }
    if (!filler) w.add_loss(loss_acc, i, loss);
  }
  end_backward();
  if (!reports_loss()) loss_acc.zero_();
  return loss_acc;
}

torch::Tensor DataParallelEngine::forward_only(Model& model, const torch::Tensor& input) {
  if (opt_.zero_stage != 3) return ParallelEngine::forward_only(model, input);
  auto out = forward_units(model, input, nullptr);
  release(bucket_of_unit(-1));
  return out;
}

}  // namespace gtrain
