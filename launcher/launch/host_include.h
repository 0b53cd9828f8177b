// host_include.h: `gtrain run --include`, the hosts of the allocation a stage runs on and, on each,
// the granted GPUs it uses, in DeepSpeed's launcher syntax ("node1:0,1@node2"): how `gtrain sweep`
// places a trial on one node of a multi-node grant, and how a user keeps a job off some GPUs.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "launcher/scheduler/allocation.h"

namespace gtrain {

struct HostInclude {
  std::string host;       // a host of the allocation (exact or short-name match)
  std::vector<int> gpus;  // its granted GPU indices to use (empty = all of them)
};

// "HOST[:GPU,GPU...][@HOST...]" -> entries. ConfigError naming --include when malformed or when a
// host is listed twice.
std::vector<HostInclude> parse_include(const std::string& text);

// "node2:2,3" for one host and its GPUs (the inverse of parse_include for one entry).
std::string format_include(const HostInclude& h);

struct IncludedAllocation {
  Allocation alloc;  // the allocation with only the included hosts, each with only its included GPUs
  // Per host whose GPUs were narrowed: the positions (0-based) of the included GPUs among the host's
  // granted ones, which are the CUDA ordinals its ranks see when the scheduler sets
  // CUDA_VISIBLE_DEVICES to the host's grant (StageHandoff::positions, choose_device).
  std::vector<std::pair<std::string, std::vector<int>>> positions;
};

// Narrows `a` to `inc`. ConfigError naming --include for a host that is not in the allocation or a
// GPU the host was not granted (the message lists what there is).
IncludedAllocation include_only(const Allocation& a, const std::vector<HostInclude>& inc);

}  // namespace gtrain
