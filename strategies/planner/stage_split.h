// stage_split.h: how a model's blocks split into pipeline stages (torch-free): the cost-balanced
// contiguous split the pipeline engine runs and the cost model prices, for any pp up to the number
// of blocks, whether or not pp divides it (4 blocks on 3 stages: 2/1/1 or as the costs balance).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/core/model_stats.h"

namespace gtrain {

// Contiguous stages of `block_cost.size()` blocks minimising the most expensive stage; the first
// stage also pays `first_extra` (embedding), the last `last_extra` (output layer and loss). Each
// stage gets at least one block. Returns pp + 1 boundaries (stage s has blocks [b[s], b[s+1])).
// ConfigError when pp is not between 1 and the number of blocks.
std::vector<int64_t> balance_stages(const std::vector<double>& block_cost, double first_extra, double last_extra,
                                    int64_t pp);

// balance_stages for every pp from 1 to the number of blocks at once: element pp - 1 equals
// balance_stages(block_cost, first_extra, last_extra, pp), from one dynamic program (the stages
// before the last are the same for every pp): O(blocks^3) for them all, not O(blocks^4).
std::vector<std::vector<int64_t>> balance_stages_each_pp(const std::vector<double>& block_cost, double first_extra,
                                                         double last_extra);

// The stages of `m`'s `blocks` uniform blocks balanced by FLOPs: the output layer (2 x hidden x vocab
// per token, x3 for backward) on the last stage. What the pipeline engine runs and the planner prices.
std::vector<int64_t> pipeline_stage_bounds(const ModelStats& m, int64_t blocks, int64_t pp);
// The same for every pp from 1 to `blocks` (element pp - 1), at once.
std::vector<std::vector<int64_t>> pipeline_stage_bounds_each_pp(const ModelStats& m, int64_t blocks);

// The most blocks any stage of `bounds` holds (what sets the slowest stage of uniform blocks).
int64_t max_stage_blocks(const std::vector<int64_t>& bounds);

}  // namespace gtrain
