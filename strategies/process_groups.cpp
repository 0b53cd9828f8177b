// process_groups.cpp: validation of the parallel dimensions and the sub-communicator splits.
#include "strategies/process_groups.h"

#include "runtime/common/errors.h"

namespace gtrain {

void ParallelDims::validate(int64_t world) const {
  if (dp < 1 || tp < 1 || pp < 1 || dp * tp * pp != world) {
    throw ConfigError("parallel dims dp=" + std::to_string(dp) + " x tp=" + std::to_string(tp) +
                      " x pp=" + std::to_string(pp) + " = " + std::to_string(dp * tp * pp) + " must equal the " +
                      std::to_string(world) + " ranks, each factor at least 1");
  }
}

ProcessGroups make_process_groups(std::shared_ptr<Communicator> world, const ParallelDims& dims) {
  dims.validate(world->size());
  ProcessGroups g;
  g.dims = dims;
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
