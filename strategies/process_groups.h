// process_groups.h: ParallelDims (dp x pp x tp, validated with an error naming every factor) and
// ProcessGroups, the sub-communicators of one rank, built in one place with Communicator::split.
//
// Rank layout (Megatron): tp varies fastest, so a tensor-parallel group is adjacent ranks;
//   rank = (dp_idx * pp + pp_idx) * tp + tp_idx.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/comm/communicator.h"

namespace gtrain {

struct ParallelDims {
  int64_t dp = 1, tp = 1, pp = 1;
  // Throws ConfigError listing every factor when dp*tp*pp != world or a factor is < 1.
  void validate(int64_t world) const;
  int64_t dp_index(int64_t rank) const { return rank / (tp * pp); }
  int64_t pp_index(int64_t rank) const { return (rank / tp) % pp; }
  int64_t tp_index(int64_t rank) const { return rank % tp; }
  int64_t rank_of(int64_t dp_idx, int64_t pp_idx, int64_t tp_idx) const { return (dp_idx * pp + pp_idx) * tp + tp_idx; }
};

struct ProcessGroups {
  ParallelDims dims;
  std::shared_ptr<Communicator> world;
  std::shared_ptr<Communicator> tp;     // same dp and pp index, ordered by tp index
  std::shared_ptr<Communicator> pp;     // same dp and tp index, ordered by stage
  std::shared_ptr<Communicator> dp;     // same pp and tp index, ordered by replica
  std::shared_ptr<Communicator> model;  // one replica: its tp x pp ranks (gradient norm, overflow)
  int64_t dp_rank = 0, pp_rank = 0, tp_rank = 0;
};

// Collective over `world`: every rank calls it with the same dims.
ProcessGroups make_process_groups(std::shared_ptr<Communicator> world, const ParallelDims& dims);

}  // namespace gtrain
