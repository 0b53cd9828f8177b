// shard_gather.h: full tensors from TensorShards: placing a shard into its global tensor, and
// gathering every rank's written shards on rank 0 (for checkpoints from tensor/pipeline-parallel
// runs and for tests that compare a sharded run with a single-rank one).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "runtime/comm/communicator.h"
#include "runtime/train/parallel_engine.h"

namespace gtrain {

// Writes `s` into full[s.name], creating a zero tensor of s.global_shape when missing.
void place_shard(std::map<std::string, torch::Tensor>& full, const TensorShard& s);

// Collective over `world`: rank 0 returns the full tensors assembled from every rank's shards
// with write = true (names without a '.' suffix of optimizer state when `parameters_only`);
// other ranks return an empty map.
std::map<std::string, torch::Tensor> gather_shards(const std::vector<TensorShard>& mine, Communicator& world,
                                                   bool parameters_only);

}  // namespace gtrain
