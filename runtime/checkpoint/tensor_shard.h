// tensor_shard.h: the unit of checkpoint state a rank holds. An engine (runtime/train/
// parallel_engine.h) hands its pieces to the checkpoint writer as TensorShards, and takes global
// tensors back from a checkpoint through a GlobalTensorReader.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>
#include <vector>

namespace gtrain {

// A piece of a named global tensor held by this rank, for checkpoints that reshard on load.
// `data` holds elements [flat_begin, flat_begin + data.numel()) of the row-major flattening of the
// region [region_offsets, region_offsets + region_shape) of the global tensor. A whole replicated
// tensor is one region covering everything; a tensor-parallel slice is a smaller region; a ZeRO
// chunk is a flat range inside its region.
struct TensorShard {
  std::string name;  // "h.0.attn.qkv.weight", "h.0.attn.qkv.weight.exp_avg", "optimizer.step"
  std::vector<int64_t> global_shape;
  std::vector<int64_t> region_offsets;
  std::vector<int64_t> region_shape;
  int64_t flat_begin = 0;
  torch::Tensor data;  // 1-D contiguous
  bool write = true;   // false when another rank writes the same elements (replicas)
};

// Produces the full (unsharded) tensor of a name from a checkpoint; throws when it is missing.
using GlobalTensorReader = std::function<torch::Tensor(const std::string& name)>;

}  // namespace gtrain
