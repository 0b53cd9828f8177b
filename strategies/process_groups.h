// process_groups.h: ProcessGroups, the sub-communicators of one rank for a ParallelLayout
// (runtime/core/parallel_layout.h: tp adjacent, then pp, then dp), built in one place with
// Communicator::split.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/comm/communicator.h"
#include "runtime/core/parallel_layout.h"

namespace gtrain {

struct ProcessGroups {
  ParallelLayout layout;
  std::shared_ptr<Communicator> world;
  std::shared_ptr<Communicator> tp;     // same dp and pp index, ordered by tp index
  std::shared_ptr<Communicator> pp;     // same dp and tp index, ordered by stage
  std::shared_ptr<Communicator> dp;     // same pp and tp index, ordered by replica
  std::shared_ptr<Communicator> model;  // one replica: its tp x pp ranks (gradient norm, overflow)
  int64_t dp_rank = 0, pp_rank = 0, tp_rank = 0;
};

// Collective over `world`: every rank calls it with the same layout (validated here: ConfigError
// naming every factor when dp*tp*pp is not the world size).
ProcessGroups make_process_groups(std::shared_ptr<Communicator> world, const ParallelLayout& layout);

}  // namespace gtrain
