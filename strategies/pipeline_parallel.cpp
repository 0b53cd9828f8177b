// pipeline_parallel.cpp: stage partition, the 1F1B and GPipe schedules, tied-weight gradients.
#include "strategies/pipeline_parallel.h"

#include <chrono>
#include <cstdio>
#include <deque>
#include <set>

#include "runtime/core/errors.h"
#include "runtime/core/heartbeat.h"
#include "runtime/precision/precision.h"

namespace gtrain {

double pipeline_bubble_fraction(int64_t pp, int64_t m) {
  return static_cast<double>(pp - 1) / static_cast<double>(m + pp - 1);
}

PipelineEngine::PipelineEngine(const ProcessGroups& groups, std::shared_ptr<Model> model, std::vector<int64_t> bounds,
                               DataParallelOptions dpo, PipelineOptions options)
    : groups_(groups), model_(std::move(model)), opt_(std::move(options)) {
  const int64_t pp = groups_.layout.pp, s = groups_.pp_rank;
  GT_CHECK(static_cast<int64_t>(bounds.size()) == pp + 1, "stage bounds do not match pp");
  begin_ = bounds[s], end_ = bounds[s + 1];
  first_ = s == 0, last_ = s == pp - 1;

  // This stage's parameters: its blocks', plus the embedding on the first and the head on the last.
  auto blocks = model_->blocks();
  std::set<const void*> mine;
  for (int64_t b = begin_; b < end_; ++b) {
    for (const auto& p : blocks[b]->parameters()) mine.insert(p.unsafeGetTensorImpl());
  }
  std::set<std::string> embed, head;
  for (const auto& n : model_->pipeline_outer_parameters(false)) embed.insert(n);
  for (const auto& n : model_->pipeline_outer_parameters(true)) head.insert(n);
  std::vector<std::pair<std::string, torch::Tensor>> params;
  std::set<std::string> tied_names;
  for (const auto& kv : model_->named_parameters()) {
    const bool in_embed = embed.count(kv.key()) > 0, in_head = head.count(kv.key()) > 0;
    const bool keep = mine.count(kv.value().unsafeGetTensorImpl()) || (first_ && in_embed) || (last_ && in_head);
    if (!keep) {
      torch::NoGradGuard ng;
      kv.value().set_data(torch::empty({0}, kv.value().options()));  // another stage holds it
      continue;
    }
    params.emplace_back(kv.key(), kv.value());
    if (pp > 1 && in_embed && in_head) {
      tied_.push_back(kv.value());
      tied_names.insert(kv.key());
      tied_names_.push_back(kv.key());
      if (!first_) dpo.mirrored.insert(kv.key());  // the first stage counts and writes it
    }
  }
  // Every rank of the pipeline joins the split; the first and last stage form the tied group.
  if (pp > 1) {
    tied_comm_ = groups_.pp->split(first_ || last_ ? 0 : 1, static_cast<int>(s));
    if (!(first_ || last_)) tied_comm_.reset();
  }
  for (const auto& kv : params) {  // activations travel on the stage's device
    if (kv.second.numel() > 0) {
      act_opts_ = act_opts_.device(kv.second.device());
      break;
    }
  }
  dp_ = std::make_unique<DataParallelEngine>(groups_.dp, std::move(params), std::move(dpo));
}

std::string PipelineEngine::describe() const {
  char buf[200];
  std::snprintf(buf, sizeof(buf), "pipeline pp=%lld stage %lld blocks [%lld, %lld) schedule %s tp=%lld; %s",
                (long long)groups_.layout.pp, (long long)groups_.pp_rank, (long long)begin_, (long long)end_,
                name_of(opt_.schedule), (long long)groups_.layout.tp, dp_->describe().c_str());
  return buf;
}

torch::Tensor PipelineEngine::recv_from(const std::vector<int64_t>& shape, int64_t peer) {
  auto t = torch::empty(shape, act_opts_);
  auto t0 = std::chrono::steady_clock::now();
  groups_.pp->recv(t, static_cast<int>(peer), 0);
  comm_wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return t;
}

torch::Tensor PipelineEngine::stage_forward(const torch::Tensor& input, const torch::Tensor& received) {
  auto x = first_ ? model_->pipeline_embed(input) : received;
  for (int64_t b = begin_; b < end_; ++b) x = model_->pipeline_block(b, x);
  return x;
}

torch::Tensor PipelineEngine::run_micro_batches(const MicroBatchWork& w) {
  const auto start = std::chrono::steady_clock::now();
  comm_wait_s_ = 0;
  const int64_t m = w.count, pp = groups_.layout.pp, s = groups_.pp_rank;
  auto& pcomm = *groups_.pp;
  const int prev = static_cast<int>(s - 1), next = static_cast<int>(s + 1);
  std::vector<DeviceBatch> batches;
  // Each micro-batch's activation shape: with uneven replica shares they differ by one sample.
  std::vector<std::vector<int64_t>> shapes;
  for (int64_t i = 0; i < m; ++i) {
    batches.push_back(w.next());
    shapes.push_back(model_->pipeline_activation_shape(batches.back().input));
  }
  dp_->prepare_step(w);
  bitwise_ = w.bitwise();
  // Gradients accumulate and end_backward reduces them once; in bitwise mode each micro-batch's
  // gradients join the canonical sum apart (begin/end_micro_batch around each backward).
  if (!bitwise_) dp_->begin_micro_batch(false);

  auto loss_acc = torch::zeros({w.bitwise() ? w.total_chunks : 1},
                               torch::TensorOptions().dtype(torch::kDouble).device(act_opts_.device()));
  std::deque<std::pair<torch::Tensor, torch::Tensor>> pending;  // (stage input, stage output) awaiting backward
  int64_t fwd = 0, bwd = 0;                                     // the next micro-batch to run forward, and backward
  auto timed = [&](auto&& f) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    comm_wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  // Forward of the next micro-batch from `received` (undefined on the first stage); returns what
  // goes to the next stage (undefined on the last).
  auto forward = [&](torch::Tensor received) {
    Heartbeat::get().phase(RankPhase::forward);
    DropoutRowsScope rows(w.rows(fwd));
    auto& b = batches[fwd++];
    TokenLayoutScope layout(b.layout);
    if (received.defined()) received.requires_grad_(true);
    torch::Tensor out;
    {
      auto scope = w.precision->autocast();
      if (last_) model_->set_loss_input(b.input);
      out = stage_forward(b.input, received);
      if (last_) {
        auto loss = model_->pipeline_head_loss_sum(out, b.target) * w.inv_batch;
        w.add_loss(loss_acc, fwd - 1, loss);
        out = w.loss_scale != 1.0 ? loss * w.loss_scale : loss;
      }
    }
    pending.emplace_back(received, out);
    return last_ ? torch::Tensor() : out.detach().to(torch::kFloat).contiguous();
  };
  auto backward = [&](const torch::Tensor& grad) {
    ++bwd;
    return backward_oldest(pending, grad);
  };
  auto send_fwd = [&](const torch::Tensor& y) {
    if (!last_) timed([&] { pcomm.send(y, next, 0); });
  };
  auto recv_fwd = [&]() { return first_ ? torch::Tensor() : recv_from(shapes[fwd], s - 1); };
  auto send_bwd = [&](const torch::Tensor& g) {
    if (!first_) timed([&] { pcomm.send(g, prev, 0); });
  };
  auto recv_bwd = [&]() { return last_ ? torch::Tensor() : recv_from(shapes[bwd], s + 1); };

  if (opt_.schedule == PpSchedule::gpipe) {
    for (int64_t i = 0; i < m; ++i) send_fwd(forward(recv_fwd()));
    for (int64_t i = 0; i < m; ++i) send_bwd(backward(recv_bwd()));
  } else {
    const int64_t warmup = std::min(pp - s - 1, m), steady = m - warmup;
    for (int64_t i = 0; i < warmup; ++i) send_fwd(forward(recv_fwd()));
    torch::Tensor x = steady > 0 ? recv_fwd() : torch::Tensor();
    for (int64_t i = 0; i < steady; ++i) {
      auto y = forward(x);
      torch::Tensor g;
      if (!last_) {  // send this activation, receive the gradient of the oldest one
        g = torch::empty(shapes[bwd], act_opts_);
        timed([&] { pcomm.send_recv(y, g, next, 0); });
      }
      auto dx = backward(g);
      if (i == steady - 1) {
        send_bwd(dx);
      } else if (!first_) {  // send this gradient, receive the next activation
        x = torch::empty(shapes[fwd], act_opts_);
        timed([&] { pcomm.send_recv(dx, x, prev, 0); });
      }
    }
    for (int64_t i = 0; i < warmup; ++i) send_bwd(backward(recv_bwd()));
  }
  Heartbeat::get().phase(RankPhase::grad_sync);
  end_backward();
  if (!reports_loss()) loss_acc.zero_();
  step_s_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return loss_acc;
}

torch::Tensor PipelineEngine::backward_oldest(std::deque<std::pair<torch::Tensor, torch::Tensor>>& pending,
                                              const torch::Tensor& grad) {
  Heartbeat::get().phase(RankPhase::backward);
  auto [in, out] = pending.front();
  pending.pop_front();
  if (bitwise_) dp_->begin_micro_batch(true);
  if (last_) {
    out.backward();
  } else {
    torch::autograd::backward({out}, {grad});
  }
  auto dx = first_ ? torch::Tensor() : in.grad().contiguous();
  if (bitwise_) {
    exchange_tied_chunk();
    dp_->end_micro_batch();
  }
  return dx;
}

void PipelineEngine::exchange_tied_chunk() {
  if (!tied_comm_ || tied_comm_->size() < 2) return;
  torch::NoGradGuard ng;
  for (const auto& name : tied_names_) {
    auto g = dp_->chunk_grad(name);
    if (first_) {
      auto part = torch::empty_like(g);
      tied_comm_->recv(part, 1, 1);
      g.add_(part);  // the embedding's use + the output layer's, as autograd adds them unsplit
    } else {
      tied_sends_.push_back(tied_comm_->send_async(g.clone(), 0, 1));
    }
  }
}

void PipelineEngine::finish_tied_bitwise() {
  for (auto& w : tied_sends_) w->wait();
  tied_sends_.clear();
  if (!tied_comm_ || tied_comm_->size() < 2) return;
  torch::NoGradGuard ng;
  for (size_t k = 0; k < tied_names_.size(); ++k) {
    const auto& name = tied_names_[k];
    if (first_) {
      tied_comm_->send(dp_->reduced_grad(name).contiguous(), 1, 2);
    } else {
      auto whole = torch::empty_like(tied_[k].detach());
      tied_comm_->recv(whole, 0, 2);
      dp_->set_reduced_grad(name, whole);
    }
  }
}

void PipelineEngine::end_backward() {
  if (bitwise_) {
    dp_->end_backward();
    finish_tied_bitwise();
    return;
  }
  // The tied weight's gradient: the embedding's use on the first stage plus the output layer's on the last.
  if (tied_comm_ && tied_comm_->size() > 1) {
    torch::NoGradGuard ng;
    for (auto& p : tied_) {
      auto g = p.grad().defined() ? p.grad().contiguous() : torch::zeros_like(p);
      tied_comm_->allreduce(g, ReduceOp::kSum);
      p.mutable_grad() = g;
    }
  }
  dp_->end_backward();
}

torch::Tensor PipelineEngine::forward_only(Model& model, const torch::Tensor& input) {
  (void)model;
  torch::Tensor received =
      first_ ? torch::Tensor() : recv_from(model_->pipeline_activation_shape(input), groups_.pp_rank - 1);
  auto x = stage_forward(input, received);
  if (last_) return model_->pipeline_head(x);
  groups_.pp->send(x.contiguous(), static_cast<int>(groups_.pp_rank + 1), 0);
  return torch::Tensor();
}

}  // namespace gtrain
