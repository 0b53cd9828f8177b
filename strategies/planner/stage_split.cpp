// stage_split.cpp: the cost-balanced split of blocks into pipeline stages (dynamic programming over
// contiguous splits), and the FLOP costs of a model's blocks and output layer.
#include "strategies/planner/stage_split.h"

#include <algorithm>
#include <limits>
#include <string>
#include <utility>

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

std::vector<std::vector<int64_t>> balance_stages_each_pp(const std::vector<double>& cost, double first_extra,
                                                         double last_extra) {
  const int64_t n = static_cast<int64_t>(cost.size());
  std::vector<double> prefix(n + 1, 0);
  for (int64_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + cost[i];
  // The stages before the last are balance_stages' rows for any pp (only the last stage pays
  // last_extra, and a row reads only the states every pp's bounds on it keep): one table serves all.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(std::max<int64_t>(n, 1), std::vector<double>(n + 1, inf));
  std::vector<std::vector<int64_t>> from(std::max<int64_t>(n, 1), std::vector<int64_t>(n + 1, 0));
  best[0][0] = 0;
  for (int64_t s = 1; s < n; ++s) {
    for (int64_t j = s; j < n; ++j) {
      for (int64_t i = s - 1; i < j; ++i) {
        const double v = std::max(best[s - 1][i], prefix[j] - prefix[i] + (s == 1 ? first_extra : 0));
        if (v < best[s][j] - 1e-12) best[s][j] = v, from[s][j] = i;
      }
    }
  }
  std::vector<std::vector<int64_t>> out;
  for (int64_t pp = 1; pp <= n; ++pp) {
    double least = inf;  // the last stage: blocks [last, n)
    int64_t last = 0;
    for (int64_t i = pp - 1; i < n; ++i) {
      const double v = std::max(best[pp - 1][i], prefix[n] - prefix[i] + (pp == 1 ? first_extra : 0) + last_extra);
      if (v < least - 1e-12) least = v, last = i;
    }
    std::vector<int64_t> bounds(pp + 1, n);
    bounds[pp - 1] = last;
    for (int64_t s = pp - 1; s >= 1; --s) bounds[s - 1] = from[s][bounds[s]];
    out.push_back(bounds);
  }
  return out;
}

namespace {
// A model's uniform blocks by FLOPs, and its output layer's cost (the last stage's extra).
std::pair<double, double> block_and_head_cost(const ModelStats& m) {
  const double block = m.blocks > 0 ? m.flops_per_sample / static_cast<double>(m.blocks) : 1.0;
  const double head = 6.0 * static_cast<double>(m.hidden * m.vocab * m.seq_len);
  return {block, head};
}
}  // namespace

std::vector<int64_t> pipeline_stage_bounds(const ModelStats& m, int64_t blocks, int64_t pp) {
  const auto [block, head] = block_and_head_cost(m);
  return balance_stages(std::vector<double>(static_cast<size_t>(blocks), block), 0.0, head, pp);
}

std::vector<std::vector<int64_t>> pipeline_stage_bounds_each_pp(const ModelStats& m, int64_t blocks) {
  const auto [block, head] = block_and_head_cost(m);
  return balance_stages_each_pp(std::vector<double>(static_cast<size_t>(blocks), block), 0.0, head);
}

int64_t max_stage_blocks(const std::vector<int64_t>& bounds) {
  int64_t most = 0;
  for (size_t s = 0; s + 1 < bounds.size(); ++s) most = std::max(most, bounds[s + 1] - bounds[s]);
  return most;
}

}  // namespace gtrain
