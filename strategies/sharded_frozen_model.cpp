// sharded_frozen_model.cpp: a frozen model's units sharded over dp and gathered for its forward.
#include "strategies/sharded_frozen_model.h"

#include <map>
#include <unordered_map>

#include "runtime/common/torch_compat.h"
#include "runtime/core/errors.h"

namespace gtrain {

ShardedFrozenModel::ShardedFrozenModel(std::shared_ptr<Communicator> dp, std::shared_ptr<Model> model,
                                       torch::Device device)
    : comm_(std::move(dp)), model_(std::move(model)) {
  GT_CHECK(comm_ && model_, "ShardedFrozenModel: a communicator and a model are needed");
  torch::NoGradGuard ng;
  const auto blocks = model_->blocks();
  blocks_ = static_cast<int64_t>(blocks.size());
  // Each distinct parameter once (a tied embedding is one tensor), in registration order, with its unit.
  std::unordered_map<const void*, int64_t> unit_of;
  for (int64_t b = 0; b < blocks_; ++b) {
    for (const auto& p : blocks[static_cast<size_t>(b)]->parameters()) unit_of[p.unsafeGetTensorImpl()] = b;
  }
  std::vector<std::pair<torch::Tensor, int64_t>> params;
  std::unordered_map<const void*, bool> seen;
  for (auto& p : model_->parameters()) {
    if (p.numel() == 0 || !seen.emplace(p.unsafeGetTensorImpl(), true).second) continue;
    const auto it = unit_of.find(p.unsafeGetTensorImpl());
    params.emplace_back(p, it == unit_of.end() ? -1 : it->second);
  }
  const int64_t n = comm_->size(), rank = comm_->rank();
  for (int64_t u = -1; u < blocks_; ++u) {
    std::map<c10::ScalarType, std::vector<torch::Tensor>> by_type;
    for (auto& [p, unit] : params) {
      if (unit == u) by_type[p.scalar_type()].push_back(p);
    }
    for (auto& [type, tensors] : by_type) {
      Flat f;
      f.unit = u;
      for (const auto& p : tensors) f.numel += p.numel();
      f.padded = (f.numel + n - 1) / n * n;
      // The whole unit on the host once (where the model was built), this rank's chunk to the device.
      auto whole = torch::zeros({f.padded}, torch::TensorOptions().dtype(type));
      int64_t offset = 0;
      for (const auto& p : tensors) {
        whole.narrow(0, offset, p.numel()).copy_(p.detach().reshape({-1}));
        offset += p.numel();
      }
      const int64_t chunk = f.padded / n;
      f.shard = whole.narrow(0, rank * chunk, chunk).to(device).clone();
      f.param = torch::empty({f.padded}, torch::TensorOptions().dtype(type).device(device));
      offset = 0;
      for (auto& p : tensors) {
        p.set_data(f.param.narrow(0, offset, p.numel()).view(p.sizes()));
        p.set_requires_grad(false);
        offset += p.numel();
      }
      compat::release_storage(f.param);
      flats_.push_back(std::move(f));
    }
  }
  for (auto& b : model_->buffers()) b.set_data(b.to(device));
  model_->eval();
}

void ShardedFrozenModel::start_gather(int64_t unit) {
  for (auto& f : flats_) {
    if (f.unit != unit || f.gathered) continue;
    compat::restore_storage(f.param, static_cast<size_t>(f.padded) * f.param.element_size());
    f.gathered = true;
    f.work = comm_->allgather_async(f.shard, f.param);
  }
}

void ShardedFrozenModel::wait_gathered(int64_t unit) {
  start_gather(unit);
  for (auto& f : flats_) {
    if (f.unit != unit || !f.work) continue;
    f.work->wait();
    f.work.reset();
  }
}

void ShardedFrozenModel::release(int64_t unit) {
  for (auto& f : flats_) {
    if (f.unit != unit || !f.gathered) continue;
    if (f.work) {  // a gather nobody waited for must land before its memory goes
      f.work->wait();
      f.work.reset();
    }
    compat::release_storage(f.param);
    f.gathered = false;
  }
}

torch::Tensor ShardedFrozenModel::forward(const torch::Tensor& input) {
  torch::NoGradGuard ng;
  wait_gathered(-1);
  torch::Tensor out;
  if (blocks_ == 0) {
    out = model_->forward(input);
  } else {
    auto x = model_->pipeline_embed(input);
    start_gather(0);
    for (int64_t i = 0; i < blocks_; ++i) {
      wait_gathered(i);
      if (i + 1 < blocks_) start_gather(i + 1);  // overlaps block i's compute
      x = model_->pipeline_block(i, x);
      release(i);
    }
    out = model_->pipeline_head(x);
  }
  release(-1);
  return out;
}

int64_t ShardedFrozenModel::shard_bytes() const {
  int64_t bytes = 0;
  for (const auto& f : flats_) bytes += f.shard.numel() * static_cast<int64_t>(f.shard.element_size());
  return bytes;
}

int64_t ShardedFrozenModel::total_bytes() const {
  int64_t bytes = 0;
  for (const auto& f : flats_) bytes += f.numel * static_cast<int64_t>(f.shard.element_size());
  return bytes;
}

}  // namespace gtrain
