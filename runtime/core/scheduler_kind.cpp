// scheduler_kind.cpp: the scheduler name table (see scheduler_kind.h).
#include "runtime/core/scheduler_kind.h"

#include <iterator>

#include <nlohmann/json.hpp>

namespace gtrain {
namespace {

// The one name table, in SchedulerKind's order.
constexpr const char* kNames[] = {
#define GTRAIN_SCHEDULER_NAME(name) #name,
    GTRAIN_SCHEDULER_BACKENDS(GTRAIN_SCHEDULER_NAME)
#undef GTRAIN_SCHEDULER_NAME
};

}  // namespace

const char* scheduler_name(SchedulerKind kind) {
  return kNames[static_cast<size_t>(kind)];
}

std::optional<SchedulerKind> scheduler_from_name(const std::string& name) {
  for (size_t i = 0; i < std::size(kNames); ++i) {
    if (name == kNames[i]) return static_cast<SchedulerKind>(i);
  }
  return std::nullopt;
}

void to_json(nlohmann::json& j, SchedulerKind kind) {
  j = scheduler_name(kind);
}

}  // namespace gtrain
