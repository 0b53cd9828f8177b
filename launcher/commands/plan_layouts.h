// plan_layouts.h: how `gtrain plan` writes one candidate layout: its short name ("dp2 tp1 pp1 z0
// mb4x2 rc") and its JSON with the memory and time estimates by component.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "runtime/core/plan.h"
#include "strategies/planner/planner.h"

namespace gtrain {

// "dp2 tp1 pp4 z1 mb2x64 rc offload": the layout in a few words (uneven shares "mb6~", fewer ranks
// than granted "(uses 6)"); "dp2 tp1 pp1" for a layout ruled out by its shape.
std::string short_layout(const Plan& p);

// The memory estimate by component (bytes), the time estimate by component (seconds).
nlohmann::json memory_json(const MemoryEstimate& m);
nlohmann::json time_json(const TimeEstimate& t);

// One candidate: its rank, layout, whether it fits and why, and its estimates.
nlohmann::json candidate_json(const RankedPlan& r);

}  // namespace gtrain
