// data_parallel_state.cpp: the data-parallel engine's checkpoint pieces (parameters and optimizer
// state by parameter name, each rank its own part) and the resharding load into any ZeRO stage.
#include "runtime/common/torch_compat.h"
#include "runtime/core/errors.h"
#include "strategies/data_parallel.h"

namespace gtrain {

void DataParallelEngine::add_shards(std::vector<TensorShard>& out, int64_t i, const std::string& name, int64_t begin,
                                    const torch::Tensor& data, bool write) const {
  const auto& p = params_[i].second;
  auto pl = opt_.placements.find(params_[i].first);
  if (pl == opt_.placements.end()) {
    const std::vector<int64_t> whole(p.sizes().begin(), p.sizes().end());
    out.push_back({name, whole, std::vector<int64_t>(p.dim(), 0), whole, begin, data, write});
    return;
  }
  // A tensor-parallel slice: its local flattening is the concatenation of its regions.
  const int64_t end = begin + data.numel();
  int64_t at = 0;
  for (const auto& r : pl->second.regions) {
    int64_t n = 1;
    for (auto d : r.shape) n *= d;
    const int64_t s0 = std::max(begin, at), s1 = std::min(end, at + n);
    if (s0 < s1)
      out.push_back(
          {name, pl->second.global_shape, r.offsets, r.shape, s0 - at, data.narrow(0, s0 - begin, s1 - s0), write});
    at += n;
  }
}

torch::Tensor DataParallelEngine::local_part(int64_t i, const torch::Tensor& global) const {
  const auto& p = params_[i].second;
  auto pl = opt_.placements.find(params_[i].first);
  if (pl == opt_.placements.end()) {
    if (global.numel() != p.numel()) {
      throw CheckpointError("'" + params_[i].first + "' has shape " + c10::str(global.sizes()) +
                            " in the checkpoint, " + c10::str(p.sizes()) + " in the model");
    }
    return global.reshape(p.sizes());
  }
  if (!global.sizes().equals(pl->second.global_shape)) {
    throw CheckpointError("'" + params_[i].first + "' has shape " + c10::str(global.sizes()) + " in the checkpoint, " +
                          c10::str(pl->second.global_shape) + " in the model");
  }
  std::vector<torch::Tensor> parts;
  for (const auto& r : pl->second.regions) {
    auto t = global;
    for (size_t d = 0; d < r.shape.size(); ++d) t = t.narrow(static_cast<int64_t>(d), r.offsets[d], r.shape[d]);
    parts.push_back(t.reshape({-1}));
  }
  return torch::cat(parts).view(p.sizes());
}

std::vector<std::pair<std::string, std::vector<int64_t>>> DataParallelEngine::frozen_parameters() const {
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  for (const auto& [name, p] : params_) {
    if (p.requires_grad() || p.numel() == 0) continue;
    auto pl = opt_.placements.find(name);
    out.emplace_back(name, pl != opt_.placements.end() ? pl->second.global_shape : p.sizes().vec());
  }
  return out;
}

void DataParallelEngine::load_frozen(const GlobalTensorReader& read) {
  torch::NoGradGuard ng;
  if (!frozen_.empty()) {  // ZeRO-3: each frozen unit's values, then this rank's shard of them
    for (auto& f : frozen_) {
      const bool was = f.gathered;
      compat::restore_storage(f.param, static_cast<size_t>(f.padded) * f.param.element_size());
      for (const auto& s : f.segments) {
        auto& p = params_[static_cast<size_t>(s.param)].second;
        p.copy_(local_part(s.param, read(params_[static_cast<size_t>(s.param)].first)));
      }
      f.shard.copy_(f.param.narrow(0, comm_->rank() * f.chunk, f.chunk));
      if (!was) compat::release_storage(f.param);
    }
    return;
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    auto& p = params_[i].second;
    if (p.requires_grad() || p.numel() == 0) continue;
    p.copy_(local_part(static_cast<int64_t>(i), read(params_[i].first)));
  }
}

std::vector<TensorShard> DataParallelEngine::state_shards() {
  std::vector<TensorShard> out;
  const bool replica_writer = comm_->rank() == 0;
  // Parameters: replicated on every dp rank; rank 0 writes them (unless another rank of the
  // replica holds the same elements).
  // ZeRO-3 holds only its chunks of the trained parameters: each rank writes those (below).
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& kv = params_[i];
    if (opt_.zero_stage == 3 && bucket_of_[i] >= 0) continue;
    if (!kv.second.requires_grad()) continue;  // a frozen base (LoRA): not training state, see load_frozen
    add_shards(out, static_cast<int64_t>(i), kv.first, 0, kv.second.detach().reshape({-1}),
               replica_writer && !opt_.mirrored.count(kv.first));
  }
  // Optimizer state: this rank's chunk of each bucket, split at parameter boundaries.
  auto add_state = [&](Bucket& b, const torch::Tensor& chunk, const std::string& suffix) {
    const int64_t lo = owner_rank_ * b.chunk, hi = lo + b.chunk;
    for (const auto& seg : b.segments) {
      const int64_t s0 = std::max(lo, seg.offset), s1 = std::min(hi, seg.offset + seg.numel);
      if (s0 >= s1) continue;
      const auto& name = params_[seg.param].first;
      add_shards(out, seg.param, suffix.empty() ? name : name + "." + suffix, s0 - seg.offset,
                 chunk.narrow(0, s0 - lo, s1 - s0), (owners_ > 1 || replica_writer) && !opt_.mirrored.count(name));
    }
  };
  for (auto& b : buckets_) {
    if (opt_.zero_stage == 3) add_state(b, owned_param(b), "");
    if (b.exp_avg.defined()) {
      add_state(b, b.exp_avg, "exp_avg");
      add_state(b, b.exp_avg_sq, "exp_avg_sq");
    }
    if (opt_.optimizer.name == "sgd" && opt_.optimizer.momentum != 0) {
      add_state(b, b.momentum.defined() ? b.momentum : torch::zeros({b.chunk}, fopts_), "momentum_buffer");
    }
  }
  const bool step_writer = replica_writer && (!opt_.model_comm || opt_.model_comm->rank() == 0);
  out.push_back({"optimizer.step", {1}, {0}, {1}, 0, torch::tensor({step_count_}, torch::kLong), step_writer});
  return out;
}

void DataParallelEngine::load_state(const GlobalTensorReader& read) {
  torch::NoGradGuard ng;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (opt_.zero_stage == 3 && bucket_of_[i] >= 0) continue;  // released: the chunks are set below
    if (!params_[i].second.requires_grad()) continue;          // a frozen base: load_frozen
    params_[i].second.copy_(local_part(static_cast<int64_t>(i), read(params_[i].first)));
  }
  step_count_ = read("optimizer.step").reshape({-1})[0].item<int64_t>();
  // This rank's chunk of bucket b of the tensors named <parameter>.<suffix> (the parameters: ""),
  // into `chunk`'s memory when it exists (host or device), else a new tensor beside the parameters.
  auto fill = [&](Bucket& b, torch::Tensor& chunk, const std::string& suffix) {
    auto full = torch::zeros({b.padded}, fopts_);
    for (const auto& seg : b.segments) {
      const auto& name = params_[seg.param].first;
      auto g = local_part(seg.param, read(suffix.empty() ? name : name + "." + suffix));
      full.narrow(0, seg.offset, seg.numel).copy_(g.reshape({-1}));
    }
    auto mine = full.narrow(0, owner_rank_ * b.chunk, b.chunk);
    if (!chunk.defined()) chunk = torch::empty({b.chunk}, suffix.empty() || !opt_.offload_optimizer ? fopts_ : hopts_);
    chunk.copy_(mine);
  };
  for (auto& b : buckets_) {
    if (opt_.zero_stage == 3) fill(b, b.shard, "");
    if (b.host_param.defined()) b.host_param.copy_(owned_param_on_device(b));
    if (opt_.optimizer.name == "adamw") {
      fill(b, b.exp_avg, "exp_avg");
      fill(b, b.exp_avg_sq, "exp_avg_sq");
    } else if (opt_.optimizer.momentum != 0 && step_count_ > 0) {
      fill(b, b.momentum, "momentum_buffer");
    }
  }
}

}  // namespace gtrain
