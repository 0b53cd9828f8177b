// prefetcher.cpp: ordered multi-threaded batch preparation.
#include "runtime/data/prefetcher.h"

#include <chrono>

#include "runtime/core/errors.h"

namespace gtrain {

Prefetcher::Prefetcher(std::shared_ptr<const Dataset> dataset, IndexFn indices, int64_t first, int64_t count,
                       int64_t depth, int64_t workers, bool pin)
    : dataset_(std::move(dataset)),
      indices_(std::move(indices)),
      end_(first + count),
      depth_(std::max<int64_t>(1, depth)),
      pin_(pin),
      next_claim_(first),
      next_deliver_(first) {
  for (int64_t i = 0; i < std::max<int64_t>(1, workers); ++i) threads_.emplace_back([this] { work(); });
}

Prefetcher::~Prefetcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void Prefetcher::work() {
  for (;;) {
    int64_t seq;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || next_claim_ >= end_ || next_claim_ < next_deliver_ + depth_; });
      if (stop_ || next_claim_ >= end_) return;
      seq = next_claim_++;
    }
    Batch b;
    std::exception_ptr err;
    try {
      b = collate_samples(*dataset_, indices_(seq));
      if (pin_) {
        b.input = b.input.pin_memory();
        b.target = b.target.pin_memory();
        if (b.positions.defined()) b.positions = b.positions.pin_memory();
        if (b.trained.defined()) b.trained = b.trained.pin_memory();
      }
    } catch (...) {
      err = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (err)
        errors_.emplace(seq, err);
      else
        ready_.emplace(seq, std::move(b));
    }
    cv_.notify_all();
  }
}

Batch Prefetcher::next() {
  auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  GT_CHECK(next_deliver_ < end_, "Prefetcher: read past the last batch");
  cv_.wait(lock, [&] { return ready_.count(next_deliver_) > 0 || errors_.count(next_deliver_) > 0; });
  auto failed = errors_.find(next_deliver_);
  if (failed != errors_.end()) std::rethrow_exception(failed->second);
  auto it = ready_.find(next_deliver_);
  Batch b = std::move(it->second);
  ready_.erase(it);
  ++next_deliver_;
  wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  lock.unlock();
  cv_.notify_all();
  return b;
}

double Prefetcher::take_wait_seconds() {
  std::lock_guard<std::mutex> lock(mu_);
  double w = wait_s_;
  wait_s_ = 0;
  return w;
}

}  // namespace gtrain
