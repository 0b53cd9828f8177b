// sharded_frozen_model.h: ShardedFrozenModel, a frozen model that only runs forward (distillation's
// teacher) sharded over the data-parallel ranks as ZeRO-3 shards a trained one: each unit (a block,
// or the parameters outside the blocks) keeps this rank's 1/dp chunk of one flat buffer per dtype,
// and forward gathers a unit just before it runs (the next block's gather started meanwhile) and
// frees it after, so a rank holds its shards, the outer unit and at most two blocks at once.
#pragma once

#include <memory>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/models/model.h"

namespace gtrain {

class ShardedFrozenModel {
 public:
  // `model` whole with the same values on every rank of `dp` (on the host, or on `device`); its
  // parameters move into per-unit flat buffers on `device` of which this rank keeps its chunk, and
  // its buffers move to `device`. The model must run block by block (Model::blocks() and the
  // pipeline_* interface) unless it has no blocks (then it is one unit).
  ShardedFrozenModel(std::shared_ptr<Communicator> dp, std::shared_ptr<Model> model, torch::Device device);
  ShardedFrozenModel(const ShardedFrozenModel&) = delete;
  ShardedFrozenModel& operator=(const ShardedFrozenModel&) = delete;

  // The model's output for `input` (no gradients). Collective: every rank of `dp` calls it as often.
  torch::Tensor forward(const torch::Tensor& input);

  int64_t shard_bytes() const;  // the weights this rank keeps between forwards
  int64_t total_bytes() const;  // the whole model's weights (without padding)
  Model& model() { return *model_; }

 private:
  struct Flat {
    int64_t unit = -1;           // block index, -1 = the parameters outside the blocks
    int64_t numel = 0;           // the unit's elements of this dtype
    int64_t padded = 0;          // numel rounded up to a multiple of dp
    torch::Tensor param;         // [padded], the parameters are views of it; storage only while gathered
    torch::Tensor shard;         // [padded / dp], this rank's chunk
    std::shared_ptr<Work> work;  // the gather in flight
    bool gathered = false;
  };
  void start_gather(int64_t unit);
  void wait_gathered(int64_t unit);
  void release(int64_t unit);

  std::shared_ptr<Communicator> comm_;
  std::shared_ptr<Model> model_;
  int64_t blocks_ = 0;
  std::vector<Flat> flats_;
};

}  // namespace gtrain
