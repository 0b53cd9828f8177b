// probe_command.h: `gtrain probe [--json]`: what the scheduler granted, what limits bind, and how
// many ranks gtrain will start; plus the Allocation's text and JSON forms other commands reuse.
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "launcher/scheduler/allocation.h"

namespace gtrain {

struct ProbeOptions {
  bool json = false;
  bool read_limits = true;  // run squeue / scontrol / sacctmgr / qstat
};

// JSON: every field of the allocation; unknown values are null. `now_unix` dates "remaining_s".
nlohmann::json allocation_to_json(const Allocation& a, int64_t now_unix);

// The human-readable report.
std::string allocation_to_text(const Allocation& a, int64_t now_unix);

// Discovers the allocation from `env` and `run` and prints it. Returns the exit code.
int run_probe(const ProbeOptions& options, const std::map<std::string, std::string>& env, const CommandRunner& run,
              std::ostream& out);

}  // namespace gtrain
