// scheduler_kind.h: SchedulerKind, the schedulers gtrain knows, in the one ordered detection list
// (GTRAIN_SCHEDULER_BACKENDS), and their one name table (the strings in every output and JSON).
#pragma once

#include <optional>
#include <ostream>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace gtrain {

// The ordered detection list: discovery asks each backend in turn whether the environment is its own,
// and the first that says yes reads the allocation (so local, which takes any machine, comes last).
// A new scheduler (Flux, a Kubernetes job) is one file, launcher/scheduler/NAME_backend.cpp defining
// `const SchedulerBackend& NAME_backend()`, and one line here: the line gives its SchedulerKind, its
// name (the line's word) and its place in the list.
#define GTRAIN_SCHEDULER_BACKENDS(X) \
  X(slurm)                           \
  X(pbs)                             \
  X(lsf)                             \
  X(cuda_env)                        \
  X(local)

enum class SchedulerKind {
#define GTRAIN_SCHEDULER_KIND(name) name,
  GTRAIN_SCHEDULER_BACKENDS(GTRAIN_SCHEDULER_KIND)
#undef GTRAIN_SCHEDULER_KIND
};

// "slurm", "pbs", "lsf", "cuda_env", "local".
const char* scheduler_name(SchedulerKind kind);
// The kind named `name`; nullopt for any other string.
std::optional<SchedulerKind> scheduler_from_name(const std::string& name);

inline std::ostream& operator<<(std::ostream& out, SchedulerKind kind) {
  return out << scheduler_name(kind);
}
// JSON holds the name, never the number.
void to_json(nlohmann::json& j, SchedulerKind kind);

}  // namespace gtrain
