// process_groups.cpp: the sub-communicator splits of a parallel layout.
#include "strategies/process_groups.h"

namespace gtrain {

ProcessGroups make_process_groups(std::shared_ptr<Communicator> world, const ParallelLayout& dims) {
  dims.validate(world->size(), dims.global_batch());
  ProcessGroups g;
  g.layout = dims;
  g.world = world;
  const int64_t r = world->rank();
  g.dp_rank = dims.dp_index(r), g.pp_rank = dims.pp_index(r), g.tp_rank = dims.tp_index(r);
  auto split = [&](int64_t color, int64_t key) {
    if (world->size() == 1) return world;
    return world->split(static_cast<int>(color), static_cast<int>(key));
  };
  // Every rank takes part in every split, in the same order.
  g.tp = split(g.dp_rank * dims.pp + g.pp_rank, g.tp_rank);
  g.pp = split(g.dp_rank * dims.tp + g.tp_rank, g.pp_rank);
  g.dp = split(g.pp_rank * dims.tp + g.tp_rank, g.dp_rank);
  g.model = split(g.dp_rank, g.pp_rank * dims.tp + g.tp_rank);
  return g;
}

}  // namespace gtrain
