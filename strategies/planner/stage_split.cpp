// stage_split.cpp: the cost-balanced split of blocks into pipeline stages (dynamic programming over
// contiguous splits), and the FLOP costs of a model's blocks and output layer.
#include "strategies/planner/stage_split.h"

#include <algorithm>
#include <limits>
#include <string>

#include "runtime/core/errors.h"

namespace gtrain {

std::vector<int64_t> balance_stages(const std::vector<double>& cost, double first_extra, double last_extra,
                                    int64_t pp) {
  const int64_t n = static_cast<int64_t>(cost.size());
  if (pp < 1 || pp > n) {
    throw ConfigError("pp = " + std::to_string(pp) + " must be between 1 and the " + std::to_string(n) +
                      " blocks of the model");
  }
  std::vector<double> prefix(n + 1, 0);
  for (int64_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + cost[i];
  // best[s][j]: least max-stage cost placing blocks [0, j) on stages [0, s).
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(pp + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int64_t>> from(pp + 1, std::vector<int64_t>(n + 1, 0));
  best[0][0] = 0;
  for (int64_t s = 1; s <= pp; ++s) {
    for (int64_t j = s; j <= n - (pp - s); ++j) {
      for (int64_t i = s - 1; i < j; ++i) {
        double c = prefix[j] - prefix[i] + (s == 1 ? first_extra : 0) + (s == pp ? last_extra : 0);
        const double v = std::max(best[s - 1][i], c);
        if (v < best[s][j] - 1e-12) best[s][j] = v, from[s][j] = i;
      }
    }
  }
  std::vector<int64_t> bounds(pp + 1, n);
  for (int64_t s = pp, j = n; s >= 1; --s) {
    bounds[s] = j;
    j = from[s][j];
    bounds[s - 1] = j;
  }
  return bounds;
}

std::vector<int64_t> pipeline_stage_bounds(const ModelStats& m, int64_t blocks, int64_t pp) {
  const double block = m.blocks > 0 ? m.flops_per_sample / static_cast<double>(m.blocks) : 1.0;
  const double head = 6.0 * static_cast<double>(m.hidden * m.vocab * m.seq_len);
  return balance_stages(std::vector<double>(static_cast<size_t>(blocks), block), 0.0, head, pp);
}

int64_t max_stage_blocks(const std::vector<int64_t>& bounds) {
  int64_t most = 0;
  for (size_t s = 0; s + 1 < bounds.size(); ++s) most = std::max(most, bounds[s + 1] - bounds[s]);
  return most;
}

}  // namespace gtrain
