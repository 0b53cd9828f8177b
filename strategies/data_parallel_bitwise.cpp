// data_parallel_bitwise.cpp: bitwise mode in the data-parallel engine (train.reproducible =
// "bitwise"): every micro-batch is one chunk of the step (chunk c on dp rank c % dp, its micro-step
// c / dp), its gradients are produced fresh, split into dp slices and sent to the slices' owners
// (all-to-all), and each owner pushes the step's chunks into a ChunkTree in chunk order. Round k of
// the exchange carries chunks k*dp .. k*dp + dp - 1; a rank without a chunk in the last round sends
// zeros that nobody adds. The trees' roots are the step's gradients: whole on every rank (ZeRO-0:
// all-gathered), or the owned slice (ZeRO 1-3). ZeRO-3 runs the exchange per unit as backward
// frees it (launch_ready_buckets), in place of the reduce-scatter.
#include "strategies/data_parallel.h"

#include "runtime/core/errors.h"

namespace gtrain {

void DataParallelEngine::prepare_step(const MicroBatchWork& w) {
  if (!w.bitwise()) {
    GT_CHECK(!opt_.bitwise, "bitwise data-parallel engine run without the step's chunks");
    total_chunks_ = 0;
    return;
  }
  GT_CHECK(opt_.bitwise, "a bitwise step on an engine built without train.reproducible = \"bitwise\"");
  const int64_t dp = comm_->size();
  if (w.total_chunks < dp) {
    throw ConfigError("bitwise mode: " + std::to_string(w.total_chunks) + " chunks cannot feed " + std::to_string(dp) +
                      " data-parallel ranks");
  }
  total_chunks_ = w.total_chunks;
  rounds_ = (total_chunks_ + dp - 1) / dp;
  round_ = 0;
  chunk_open_ = false;
  for (auto& b : buckets_) b.tree.reset();
}

void DataParallelEngine::begin_chunk() {
  torch::NoGradGuard ng;
  sync_ = true;
  accumulated_ = false;
  for (auto& kv : params_) kv.second.mutable_grad() = torch::Tensor();
  for (auto& b : buckets_) {
    b.ready = 0;
    b.work.reset();
    b.grad = torch::zeros({b.padded}, fopts_);  // unused parameters and the padding stay zero
  }
  std::fill(got_grad_.begin(), got_grad_.end(), false);
  next_launch_ = num_buckets();  // nothing starts during backward: the exchange follows it
  chunk_open_ = true;
}

std::shared_ptr<Work> DataParallelEngine::start_exchange(Bucket& b) {
  if (comm_->size() == 1 || b.padded == 0) {
    b.rows = b.grad;
    return std::make_shared<CompletedWork>();
  }
  b.rows = torch::empty({b.padded}, fopts_);
  return comm_->alltoall_async(b.grad, b.rows);
}

void DataParallelEngine::push_rows(Bucket& b) {
  const int64_t dp = comm_->size(), slice = b.padded / dp;
  for (int64_t r = 0; r < dp; ++r) {
    const int64_t c = round_ * dp + r;
    if (c < total_chunks_) b.tree.push(c, b.rows.narrow(0, r * slice, slice));
  }
  b.rows = torch::Tensor();
}

void DataParallelEngine::end_micro_batch() {
  if (!bitwise() || opt_.zero_stage == 3) return;  // ZeRO-3 exchanges per unit (finish_micro_batch)
  exchange_round(true);
}

void DataParallelEngine::exchange_round(bool have_chunk) {
  torch::NoGradGuard ng;
  if (!have_chunk) begin_chunk();  // zeros to send: the owners skip them
  for (auto& b : buckets_) b.work = start_exchange(b);
  for (auto& b : buckets_) {
    b.work->wait();
    b.work.reset();
    push_rows(b);
  }
  for (auto& kv : params_) kv.second.mutable_grad() = torch::Tensor();
  ++round_;
  chunk_open_ = false;
}

void DataParallelEngine::finish_bitwise() {
  torch::NoGradGuard ng;
  if (opt_.zero_stage != 3) {
    if (chunk_open_) exchange_round(true);
    while (round_ < rounds_) exchange_round(false);  // this rank ran fewer chunks than some
  }
  GT_CHECK(round_ == rounds_,
           "bitwise mode: " + std::to_string(round_) + " exchange rounds of " + std::to_string(rounds_));
  const int64_t dp = comm_->size();
  for (auto& b : buckets_) {
    auto root = b.tree.fold();
    const int64_t slice = b.padded / dp;
    if (!root.defined()) root = torch::zeros({slice}, fopts_);
    if (opt_.zero_stage >= 2) {
      b.grad_shard = root;
      b.grad = torch::Tensor();
    } else if (opt_.zero_stage == 1) {
      if (!b.grad.defined()) b.grad = torch::zeros({b.padded}, fopts_);
      b.grad.narrow(0, owner_rank_ * b.chunk, b.chunk).copy_(root);
    } else if (dp > 1) {
      if (!b.grad.defined()) b.grad = torch::zeros({b.padded}, fopts_);
      comm_->allgather(root, b.grad);
    } else {
      b.grad = root;
    }
  }
  for (auto& kv : params_) kv.second.mutable_grad() = torch::Tensor();
}

int64_t DataParallelEngine::param_index(const std::string& name) const {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (params_[i].first == name && bucket_of_[i] >= 0) return static_cast<int64_t>(i);
  }
  throw Error("data parallel: no trained parameter named '" + name + "'");
}

torch::Tensor DataParallelEngine::chunk_grad(const std::string& name) {
  const int64_t i = param_index(name);
  auto& b = buckets_[static_cast<size_t>(bucket_of_[static_cast<size_t>(i)])];
  GT_CHECK(b.grad.defined(), "chunk_grad outside a bitwise micro-batch");
  const auto& s = segment(i);
  return b.grad.narrow(0, s.offset, s.numel).view(params_[static_cast<size_t>(i)].second.sizes());
}

torch::Tensor DataParallelEngine::reduced_grad(const std::string& name) {
  torch::NoGradGuard ng;
  const int64_t i = param_index(name);
  auto& b = buckets_[static_cast<size_t>(bucket_of_[static_cast<size_t>(i)])];
  const auto& s = segment(i);
  torch::Tensor whole = owned_grad(b);
  if (owners_ > 1) {
    auto all = torch::empty({b.padded}, fopts_);
    comm_->allgather(whole.contiguous(), all);
    whole = all;
  }
  return whole.narrow(0, s.offset, s.numel).view(params_[static_cast<size_t>(i)].second.sizes()).clone();
}

void DataParallelEngine::set_reduced_grad(const std::string& name, const torch::Tensor& value) {
  torch::NoGradGuard ng;
  const int64_t i = param_index(name);
  auto& b = buckets_[static_cast<size_t>(bucket_of_[static_cast<size_t>(i)])];
  const auto& s = segment(i);
  const int64_t lo = owners_ > 1 ? owner_rank_ * b.chunk : 0;
  const int64_t s0 = std::max(lo, s.offset), s1 = std::min(lo + b.chunk, s.offset + s.numel);
  if (s0 >= s1) return;
  owned_grad(b).narrow(0, s0 - lo, s1 - s0).copy_(value.reshape({-1}).narrow(0, s0 - s.offset, s1 - s0));
}

}  // namespace gtrain
