// prefetcher.h: background threads that collate the next micro-batches while the trainer computes,
// delivered strictly in order; the time the trainer waited is measured.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "runtime/data/dataset.h"

namespace gtrain {

class Prefetcher {
 public:
  // Produces item `seq` (0, 1, ... < count): the dataset indices to collate.
  using IndexFn = std::function<std::vector<int64_t>(int64_t seq)>;

  // `pin`: batches come in page-locked memory, so copies to a CUDA device can be non-blocking.
  Prefetcher(std::shared_ptr<const Dataset> dataset, IndexFn indices, int64_t first, int64_t count, int64_t depth,
             int64_t workers, bool pin = false);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // The next batch in order; blocks until it is ready. Rethrows the exception of the worker that
  // failed to prepare this batch.
  Batch next();
  // Seconds next() spent waiting since the last call to take_wait_seconds().
  double take_wait_seconds();

 private:
  void work();
  std::shared_ptr<const Dataset> dataset_;
  IndexFn indices_;
  int64_t end_, depth_;
  bool pin_ = false;
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t next_claim_;    // next seq a worker will produce
  int64_t next_deliver_;  // next seq next() returns
  std::map<int64_t, Batch> ready_;
  std::map<int64_t, std::exception_ptr> errors_;  // by seq: rethrown when that batch is due
  bool stop_ = false;
  double wait_s_ = 0;
  std::vector<std::thread> threads_;
};

}  // namespace gtrain
