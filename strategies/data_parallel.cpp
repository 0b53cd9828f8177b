// data_parallel.cpp: bucketed, overlapped gradient synchronisation and ZeRO-1/2 flat optimizers.
#include "strategies/data_parallel.h"

#include <cmath>
#include <cstdio>

#include "runtime/common/torch_compat.h"
#include "runtime/core/errors.h"
#include "runtime/train/fused_adamw.h"

namespace gtrain {

DataParallelEngine::DataParallelEngine(std::shared_ptr<Communicator> dp_comm,
                                       std::vector<std::pair<std::string, torch::Tensor>> params,
                                       DataParallelOptions options)
    : comm_(std::move(dp_comm)), params_(std::move(params)), opt_(std::move(options)) {
  if (opt_.zero_stage < 0 || opt_.zero_stage > 3) {
    throw ConfigError("parallel.zero = " + std::to_string(opt_.zero_stage) + ": ZeRO stage must be 0, 1, 2 or 3");
  }
  const int64_t dp = comm_->size();
  owners_ = opt_.zero_stage > 0 ? dp : 1;
  owner_rank_ = opt_.zero_stage > 0 ? comm_->rank() : 0;

  // Buckets in reverse registration order: gradients of late layers arrive first in backward.
  bucket_of_.assign(params_.size(), -1);
  got_grad_.assign(params_.size(), false);
  const int64_t bucket_elems = std::max<int64_t>(1, opt_.bucket_bytes / 4);
  for (const auto& kv : params_) {
    if (kv.second.requires_grad()) {
      fopts_ = fopts_.device(kv.second.device());
      break;
    }
  }
  const bool kernel =
      fopts_.device().is_cuda() ? compat::kHaveFusedAdamW : opt_.device_step && compat::kHaveFusedAdamWCpu;
  // Offload steps on the host, with the host-side arithmetic.
  // Bitwise mode on the CPU keeps its own element-wise loop (reproducible.h).
  fused_ = kernel && opt_.optimizer.name == "adamw" && opt_.optimizer.fused && !opt_.offload_optimizer &&
           !(opt_.bitwise && !fopts_.device().is_cuda());
  hopts_ = torch::TensorOptions().dtype(torch::kFloat).pinned_memory(fopts_.device().is_cuda());
  for (int64_t i = static_cast<int64_t>(params_.size()) - 1; i >= 0; --i) {
    const auto& p = params_[i].second;
    if (!p.requires_grad()) continue;
    if (p.scalar_type() != torch::kFloat) {
      throw ConfigError("data parallel: parameter " + params_[i].first + " is " +
                        std::string(c10::toString(p.scalar_type())) + "; master weights must be float32");
    }
    if (opt_.zero_stage == 3) continue;  // one bucket per unit: build_units
    if (buckets_.empty() || buckets_.back().numel >= bucket_elems) buckets_.emplace_back();
    auto& b = buckets_.back();
    b.segments.push_back({i, b.numel, p.numel()});
    b.numel += p.numel();
    bucket_of_[i] = static_cast<int64_t>(buckets_.size()) - 1;
  }
  if (opt_.zero_stage == 3) build_units();

  torch::NoGradGuard ng;
  for (auto& b : buckets_) {
    b.padded = (b.numel + dp - 1) / dp * dp;
    b.chunk = b.padded / owners_;
    b.param = torch::zeros({b.padded}, fopts_);
    for (const auto& s : b.segments) {
      auto& p = params_[s.param].second;
      auto view = b.param.narrow(0, s.offset, s.numel);
      view.copy_(p.detach().reshape({-1}));
      p.set_data(view.view(p.sizes()));
    }
    // Every rank starts from rank 0's parameters.
    if (dp > 1) comm_->broadcast(b.param, 0);
    if (opt_.zero_stage == 3) b.shard = b.param.narrow(0, owner_rank_ * b.chunk, b.chunk).clone();
    if (opt_.offload_optimizer) {
      b.host_param = torch::empty({b.chunk}, hopts_);
      b.host_param.copy_(b.param.narrow(0, owner_rank_ * b.chunk, b.chunk));
      b.host_grad = torch::empty({b.chunk}, hopts_);
    }
    if (opt_.zero_stage < 2) b.grad = torch::zeros({b.padded}, fopts_);
    // Weight decay applies to parameters of 2 or more dimensions only (nanoGPT's rule: matrices,
    // kernels, embeddings; not biases or norm gains); mirrored parameters are counted in the norm by
    // another rank.
    for (const auto& s : b.segments) {
      if (params_[s.param].second.dim() >= 2) add_owned_range(b, b.decayed, s);
      if (opt_.mirrored.count(params_[s.param].first)) add_owned_range(b, b.mirrored, s);
    }
    if (opt_.optimizer.name == "adamw") {
      const auto& so = opt_.offload_optimizer ? hopts_ : fopts_;
      b.exp_avg = torch::zeros({b.chunk}, so);
      b.exp_avg_sq = torch::zeros({b.chunk}, so);
    }
    if (fused_) {
      // The owned part of each parameter, by weight-decay class; adjacent ranges of a class merge.
      const int64_t lo = owner_rank_ * b.chunk, hi = lo + b.chunk;
      for (const auto& s : b.segments) {
        const int64_t s0 = std::max(lo, s.offset), s1 = std::min(hi, s.offset + s.numel);
        if (s0 >= s1) continue;
        auto& r = b.ranges[params_[s.param].second.dim() >= 2 && opt_.optimizer.weight_decay != 0 ? 1 : 0];
        if (!r.empty() && r.back().first + r.back().second == s0 - lo) {
          r.back().second += s1 - s0;
        } else {
          r.emplace_back(s0 - lo, s1 - s0);
        }
      }
    }
  }
  if (fused_) fused_step_ = torch::zeros({}, fopts_);
  // ZeRO-3: between uses only the shards exist.
  for (int64_t k = 0; k < num_buckets(); ++k) {
    if (opt_.zero_stage == 3) release(k);
  }

  // A hook after each parameter's AccumulateGrad (not before it, as Tensor::register_hook would): on
  // the last micro-batch the gradient is then already where autograd put it, and nothing else adds
  // it anywhere. The nodes are held here (a node nothing holds would be rebuilt without the hook),
  // and the hooks go with the engine (another engine may take over the same parameters).
  struct AfterAccumulate : torch::autograd::FunctionPostHook {
    AfterAccumulate(DataParallelEngine* e, int64_t i) : engine(e), index(i) {}
    torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                              const torch::autograd::variable_list&) override {
      engine->on_gradient(index);
      return outputs;
    }
    DataParallelEngine* engine;
    int64_t index;
  };
  for (size_t i = 0; i < params_.size(); ++i) {
    if (bucket_of_[i] < 0) continue;
    auto node = torch::autograd::impl::grad_accumulator(params_[i].second);
    const uintptr_t key = node->add_post_hook(std::make_unique<AfterAccumulate>(this, static_cast<int64_t>(i)));
    accumulators_.emplace_back(std::move(node), key);
  }
}

DataParallelEngine::~DataParallelEngine() {
  for (auto& [node, key] : accumulators_) node->del_post_hook(key);
}

void DataParallelEngine::add_owned_range(const Bucket& b, std::vector<std::pair<int64_t, int64_t>>& ranges,
                                         const Segment& s) const {
  const int64_t lo = owner_rank_ * b.chunk;
  const int64_t begin = std::max<int64_t>(0, s.offset - lo), end = std::min(b.chunk, s.offset + s.numel - lo);
  if (begin >= end) return;
  if (!ranges.empty() && ranges.back().second == begin) {
    ranges.back().second = end;
  } else {
    ranges.emplace_back(begin, end);
  }
}

std::string DataParallelEngine::describe() const {
  char buf[160];
  if (opt_.zero_stage == 3) {
    std::snprintf(buf, sizeof(buf), "data parallel dp=%d zero=3 units=%zu (blocks %lld)%s", comm_->size(),
                  buckets_.size(), (long long)num_units(), opt_.offload_optimizer ? " optimizer offloaded" : "");
  } else {
    std::snprintf(buf, sizeof(buf), "data parallel dp=%d zero=%lld buckets=%zu (%.1f MB each at most)%s", comm_->size(),
                  (long long)opt_.zero_stage, buckets_.size(), opt_.bucket_bytes / 1e6,
                  opt_.offload_optimizer ? " optimizer offloaded" : "");
  }
  return buf;
}

int64_t DataParallelEngine::owned_elements() const {
  int64_t n = 0;
  for (const auto& b : buckets_) n += b.chunk;
  return n;
}

namespace {
double bytes_of(const torch::Tensor& t) {
  return t.defined() ? static_cast<double>(t.storage().nbytes()) : 0.0;
}
}  // namespace

StateBytes DataParallelEngine::state_bytes() const {
  StateBytes s;
  // A frozen base (LoRA): its ZeRO-3 shards and gathered units, else the parameters themselves.
  for (const auto& f : frozen_) s.params += bytes_of(f.shard) + (f.gathered ? bytes_of(f.param) : 0.0);
  if (frozen_.empty()) {
    for (const auto& [name, p] : params_) {
      if (!p.requires_grad()) s.params += bytes_of(p);
    }
  }
  for (const auto& b : buckets_) {
    s.params += bytes_of(b.param) + bytes_of(b.shard);
    s.grads += bytes_of(b.grad) + bytes_of(b.grad_shard) + bytes_of(b.accum);
    const double state = bytes_of(b.exp_avg) + bytes_of(b.exp_avg_sq) + bytes_of(b.momentum);
    if (opt_.offload_optimizer) {
      s.host += state + bytes_of(b.host_param) + bytes_of(b.host_grad);
    } else {
      s.optimizer += state;
    }
  }
  return s;
}

void DataParallelEngine::attach_accumulators() {
  torch::NoGradGuard ng;
  for (auto& b : buckets_) {
    // Allocated at the first step with more than one micro-batch: one micro-batch needs none.
    if (b.accum.defined()) {
      b.accum.zero_();
    } else {
      b.accum = torch::zeros({b.numel}, fopts_);
    }
    for (const auto& s : b.segments) {
      auto& p = params_[s.param].second;
      p.mutable_grad() = b.accum.narrow(0, s.offset, s.numel).view(p.sizes());
    }
  }
}

// Every element of a bucket's `grad` is written each step (a gradient, an accumulator, or zeros
// for a parameter that got none) and its padding stays zero, so nothing is zeroed here: with one
// micro-batch the gradients take one pass, the copy into the buckets.
void DataParallelEngine::zero_grad() {
  for (auto& kv : params_) kv.second.mutable_grad() = torch::Tensor();
  for (auto& b : buckets_) {
    b.ready = 0;
    b.work.reset();
    if (opt_.zero_stage == 3) b.grad_shard = torch::Tensor();  // summed over this step's micro-batches
  }
  std::fill(got_grad_.begin(), got_grad_.end(), false);
  next_launch_ = 0;
  accumulated_ = false;
}

void DataParallelEngine::begin_micro_batch(bool last) {
  if (opt_.zero_stage == 3) {
    // Every micro-batch's gradients are reduce-scattered as its blocks finish.
    sync_ = true;
    for (auto& b : buckets_) b.ready = 0;
    std::fill(got_grad_.begin(), got_grad_.end(), false);
    next_launch_ = 0;
    return;
  }
  if (bitwise()) {  // every chunk's gradients apart (data_parallel_bitwise.cpp)
    if (chunk_open_) exchange_round(true);
    begin_chunk();
    return;
  }
  sync_ = last;
  if (!last && !accumulated_) {
    attach_accumulators();
    accumulated_ = true;
  }
  if (last && accumulated_) {
    // The accumulators keep the earlier micro-batches' sum; this one's gradients arrive apart.
    for (auto& kv : params_) kv.second.mutable_grad() = torch::Tensor();
  }
}

const DataParallelEngine::Segment& DataParallelEngine::segment(int64_t i) const {
  const auto& b = buckets_[bucket_of_[i]];
  return *std::find_if(b.segments.begin(), b.segments.end(), [&](const Segment& s) { return s.param == i; });
}

void DataParallelEngine::on_gradient(int64_t i) {
  if (!sync_) return;  // accumulated in place into the accumulator view
  auto& p = params_[i].second;
  if (got_grad_[i]) return;  // a second backward through the parameter in one micro-batch: not supported
  const auto g = p.grad();   // this micro-batch's gradient, as autograd produced it (.grad was empty)
  if (!g.defined()) return;
  torch::NoGradGuard ng;
  auto& b = buckets_[bucket_of_[i]];
  if (!b.grad.defined()) b.grad = torch::zeros({b.padded}, fopts_);  // stage 2: allocated per step
  const auto& seg = segment(i);
  auto dst = b.grad.narrow(0, seg.offset, seg.numel);
  if (accumulated_) {
    torch::add_out(dst, b.accum.narrow(0, seg.offset, seg.numel), g.reshape({-1}));
  } else {
    dst.copy_(g.reshape({-1}));
  }
  p.mutable_grad() = torch::Tensor();  // freed now, not at the end of backward
  got_grad_[i] = true;
  ++b.ready;
  launch_ready_buckets();
  progress();
}

void DataParallelEngine::launch_ready_buckets() {
  while (next_launch_ < num_buckets() &&
         buckets_[next_launch_].ready == static_cast<int64_t>(buckets_[next_launch_].segments.size())) {
    auto& b = buckets_[next_launch_];
    if (opt_.zero_stage == 3) {
      // At most two reductions in flight: each holds a unit's whole gradients until it completes.
      if (next_launch_ >= 2 && buckets_[next_launch_ - 2].work) buckets_[next_launch_ - 2].work->wait();
      finish_reductions(false);
      if (bitwise()) {
        b.work = start_exchange(b);  // the unit's gradients, a slice to each owner
      } else {
        b.reduced = torch::empty({b.chunk}, fopts_);
        b.work = b.padded > 0 ? comm_->reduce_scatter_async(b.grad, b.reduced, ReduceOp::kSum)
                              : std::make_shared<CompletedWork>();
      }
      // The block's backward is over: its gathered parameters go (the outer unit's stay for the step).
      if (b.unit >= 0) release(next_launch_, /*frozen=*/false);
    } else if (opt_.zero_stage == 2) {
      b.grad_shard = torch::empty({b.chunk}, fopts_);
      b.work = comm_->reduce_scatter_async(b.grad, b.grad_shard, ReduceOp::kSum);
    } else {
      b.work = comm_->allreduce_async(b.grad, ReduceOp::kSum);
    }
    ++next_launch_;
  }
}

void DataParallelEngine::progress() {
  for (int64_t k = 0; k < next_launch_; ++k) {
    if (buckets_[k].work) buckets_[k].work->test();
  }
}

void DataParallelEngine::end_backward() {
  if (bitwise()) {
    finish_bitwise();
    return;
  }
  if (opt_.zero_stage == 3) {  // each micro-batch finished its own reductions (finish_micro_batch)
    for (auto& kv : params_) kv.second.mutable_grad() = torch::Tensor();
    return;
  }
  // Parameters that got no gradient this step (unused in forward) count as zero.
  {
    torch::NoGradGuard ng;
    for (size_t i = 0; i < params_.size(); ++i) {
      if (bucket_of_[i] < 0 || got_grad_[i]) continue;
      auto& b = buckets_[bucket_of_[i]];
      if (!b.grad.defined()) b.grad = torch::zeros({b.padded}, fopts_);
      const auto& seg = segment(static_cast<int64_t>(i));
      auto dst = b.grad.narrow(0, seg.offset, seg.numel);
      const auto& prev = params_[i].second.grad();  // the accumulator view, or what an engine put there
      if (prev.defined()) {
        dst.copy_(prev.reshape({-1}));
      } else if (accumulated_) {  // detached for the last micro-batch
        dst.copy_(b.accum.narrow(0, seg.offset, seg.numel));
      } else {
        dst.zero_();
      }
      got_grad_[i] = true;
      ++b.ready;
    }
  }
  launch_ready_buckets();
  for (auto& b : buckets_) {
    b.work->wait();
    b.work.reset();
    if (opt_.zero_stage == 2) b.grad = torch::Tensor();  // only this rank's shard is kept
  }
  // Gradients now live in the buckets; drop the per-parameter copies.
  for (auto& kv : params_) kv.second.mutable_grad() = torch::Tensor();
}

torch::Tensor DataParallelEngine::owned_grad(Bucket& b) {
  if (opt_.zero_stage >= 2) return b.grad_shard;
  return b.grad.narrow(0, owner_rank_ * b.chunk, b.chunk);
}

bool DataParallelEngine::unscale_gradients(double inv_scale) {
  torch::NoGradGuard ng;
  std::vector<torch::Tensor> finite;
  for (auto& b : buckets_) finite.push_back(torch::isfinite(owned_grad(b)).all());
  auto ok = torch::stack(finite).all().to(torch::kInt).reshape({1});
  if (owners_ > 1) comm_->allreduce(ok, ReduceOp::kMin);
  if (opt_.model_comm && opt_.model_comm->size() > 1) opt_.model_comm->allreduce(ok, ReduceOp::kMin);
  if (ok.item<int>() == 0) return false;
  for (auto& b : buckets_) owned_grad(b).mul_(inv_scale);
  return true;
}

double DataParallelEngine::grad_norm() {
  if (opt_.bitwise) return grad_norm_tensor().to(torch::kCPU).item<double>();
  torch::NoGradGuard ng;
  auto sq = torch::zeros({1}, fopts_.dtype(torch::kDouble));
  // Squares in double, a slice at a time: a whole bucket in double would be twice its size again.
  constexpr int64_t kSlice = 1 << 20;
  for (auto& b : buckets_) {
    auto g = owned_grad(b);
    for (int64_t at = 0; at < b.chunk; at += kSlice) {
      const int64_t n = std::min(kSlice, b.chunk - at);
      auto g2 = g.narrow(0, at, n).to(torch::kDouble).pow_(2);
      for (const auto& r : b.mirrored) {
        const int64_t lo = std::max(r.first, at), hi = std::min(r.second, at + n);
        if (lo < hi) g2.narrow(0, lo - at, hi - lo).zero_();
      }
      sq += g2.sum();
    }
  }
  if (owners_ > 1) comm_->allreduce(sq, ReduceOp::kSum);
  // Each element once over the replica: tp slices and pp stages add up, mirrored copies were left out.
  if (opt_.model_comm && opt_.model_comm->size() > 1) opt_.model_comm->allreduce(sq, ReduceOp::kSum);
  return std::sqrt(sq.item<double>());
}

torch::Tensor DataParallelEngine::grad_norm_tensor() {
  torch::NoGradGuard ng;
  std::vector<torch::Tensor> gs;
  for (auto& b : buckets_) {
    if (b.mirrored.empty()) {
      gs.push_back(owned_grad(b));
      continue;
    }
    auto g = owned_grad(b).clone();  // mirrored elements are counted by another rank
    for (const auto& r : b.mirrored) g.narrow(0, r.first, r.second - r.first).zero_();
    gs.push_back(g);
  }
  if (opt_.bitwise) {  // an exact sum of squares: the same bits however the elements are split
    return exact_norm(gs, {owners_ > 1 ? comm_.get() : nullptr, opt_.model_comm.get()}, fopts_);
  }
  // One multi-tensor kernel for every bucket's norm (float accumulation per bucket), summed in double.
  auto sq = torch::stack(at::_foreach_norm(gs)).to(torch::kDouble).pow(2).sum().reshape({1});
  if (owners_ > 1) comm_->allreduce(sq, ReduceOp::kSum);
  if (opt_.model_comm && opt_.model_comm->size() > 1) opt_.model_comm->allreduce(sq, ReduceOp::kSum);
  return sq.sqrt();
}

torch::Tensor DataParallelEngine::clip_and_step(double lr, double clip) {
  if (!fopts_.device().is_cuda() && !opt_.device_step) return ParallelEngine::clip_and_step(lr, clip);
  torch::NoGradGuard ng;
  auto norm = grad_norm_tensor();
  if (fused_ && fopts_.device().is_cuda() && fused_adamw_clip_enabled()) {
    step_on_device(lr, torch::Tensor(), norm, clip);  // the divisor computed inside the AdamW kernel
    return norm;
  }
  torch::Tensor divisor;  // gradients are divided by it: (norm + 1e-6) / clip when norm > clip, else 1
  if (clip > 0) {
    divisor = torch::where(norm > clip, (norm + 1e-6) / clip, torch::ones_like(norm)).to(torch::kFloat).reshape({});
  }
  step_on_device(lr, divisor);
  return norm;
}

void DataParallelEngine::step_on_device(double lr, const torch::Tensor& divisor, const torch::Tensor& norm,
                                        double clip) {
  torch::NoGradGuard ng;
  if (!fused_) {  // SGD, or a LibTorch without the fused kernel: the flat update on the device
    for (auto& b : buckets_) {
      if (divisor.defined()) owned_grad(b).div_(divisor);
    }
    step(lr, 1.0);
    return;
  }
  ++step_count_;
  const auto& o = opt_.optimizer;
  std::vector<torch::Tensor> p[2], g[2], m[2], v[2];
  for (auto& b : buckets_) {
    auto bp = owned_param(b), bg = owned_grad(b);
    for (int k = 0; k < 2; ++k) {
      for (const auto& r : b.ranges[k]) {
        p[k].push_back(bp.narrow(0, r.first, r.second));
        g[k].push_back(bg.narrow(0, r.first, r.second));
        m[k].push_back(b.exp_avg.narrow(0, r.first, r.second));
        v[k].push_back(b.exp_avg_sq.narrow(0, r.first, r.second));
      }
    }
  }
  fused_step_.fill_(static_cast<double>(step_count_));  // a device write: no wait
  for (int k = 0; k < 2; ++k) {
    if (p[k].empty()) continue;
    if (norm.defined()) {  // gtrain's kernel, the clip folded in (fused_adamw.h)
      fused_adamw_clip(p[k], g[k], m[k], v[k], step_count_, lr, o.beta1, o.beta2, k == 1 ? o.weight_decay : 0.0, o.eps,
                       norm, clip);
      continue;
    }
    const std::vector<torch::Tensor> steps(p[k].size(), fused_step_);
    compat::fused_adamw(p[k], g[k], m[k], v[k], steps, lr, o.beta1, o.beta2, k == 1 ? o.weight_decay : 0.0, o.eps,
                        divisor);
  }
  for (auto& b : buckets_) publish(b);
}

void DataParallelEngine::publish(Bucket& b) {
  torch::NoGradGuard ng;
  if (b.host_param.defined()) {  // offload: the updated master chunk back to the device
    owned_param_on_device(b).copy_(b.host_param, /*non_blocking=*/true);
  }
  if (opt_.zero_stage < 3 && owners_ > 1) {
    auto mine = b.param.narrow(0, owner_rank_ * b.chunk, b.chunk).clone();
    comm_->allgather(mine, b.param);
  }
  if (opt_.zero_stage >= 2) b.grad_shard = torch::Tensor();
}

void DataParallelEngine::step(double lr, double grad_coef) {
  torch::NoGradGuard ng;
  ++step_count_;
  const auto& o = opt_.optimizer;
  for (auto& b : buckets_) {
    auto p = owned_param(b);
    auto g = owned_grad(b);
    if (b.host_grad.defined()) g = b.host_grad.copy_(g);  // offload: the step runs on the host
    if (grad_coef != 1.0) g.mul_(grad_coef);
    if (opt_.bitwise && !p.is_cuda()) {  // element by element, wherever the element sits (reproducible.h)
      if (o.name == "adamw") {
        adamw_update_cpu(p, g, b.exp_avg, b.exp_avg_sq, b.decayed,
                         {lr, o.beta1, o.beta2, o.eps, o.weight_decay, step_count_});
      } else {
        sgd_update_cpu(p, g, b.momentum, b.decayed, {lr, o.momentum, o.weight_decay, o.nesterov});
      }
      publish(b);
      continue;
    }
    if (o.name == "adamw") {
      // torch::optim::AdamW, element-wise weight decay (0 for biases and norms).
      for (const auto& r : b.decayed) p.narrow(0, r.first, r.second - r.first).mul_(1.0 - lr * o.weight_decay);
      b.exp_avg.mul_(o.beta1).add_(g, 1.0 - o.beta1);
      b.exp_avg_sq.mul_(o.beta2).addcmul_(g, g, 1.0 - o.beta2);
      const double bc1 = 1.0 - std::pow(o.beta1, static_cast<double>(step_count_));
      const double bc2 = 1.0 - std::pow(o.beta2, static_cast<double>(step_count_));
      // Element-wise, a slice at a time: the temporary stays small enough to reuse freed heap blocks.
      constexpr int64_t kSlice = 1 << 20;
      for (int64_t at = 0; at < b.chunk; at += kSlice) {
        const int64_t n = std::min(kSlice, b.chunk - at);
        auto denom = b.exp_avg_sq.narrow(0, at, n).sqrt().div_(std::sqrt(bc2)).add_(o.eps);
        p.narrow(0, at, n).addcdiv_(b.exp_avg.narrow(0, at, n), denom, -lr / bc1);
      }
    } else {
      // torch::optim::SGD: L2 weight decay added to the gradient, then (Nesterov) momentum.
      auto d = g.clone();
      for (const auto& r : b.decayed) {
        d.narrow(0, r.first, r.second - r.first).add_(p.narrow(0, r.first, r.second - r.first) * o.weight_decay);
      }
      if (o.momentum != 0) {
        if (!b.momentum.defined()) {
          b.momentum = d.clone();
        } else {
          b.momentum.mul_(o.momentum).add_(d);
        }
        d = o.nesterov ? d.add(b.momentum, o.momentum) : b.momentum;
      }
      p.add_(d, -lr);
    }
    publish(b);
  }
}

}  // namespace gtrain
