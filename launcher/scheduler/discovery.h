// discovery.h: DiscoveryContext, what a backend's discover() works with (the environment, read and
// recorded in Allocation::sources, the command runner, the options, the hardware), and the
// scheduler-independent steps every backend shares (GPU lists, this node, NVML facts).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "launcher/scheduler/allocation.h"

namespace gtrain {

class DiscoveryContext {
 public:
  DiscoveryContext(const std::map<std::string, std::string>& env, Allocation* a, const CommandRunner& run,
                   const DiscoveryOptions& options, const HardwareInfo& hw)
      : a(a), run(run), options(options), hw(hw), env_(env) {}

  // The variable's value, recorded in a->sources once; nullptr when unset.
  const std::string* get(const std::string& name);
  bool has(const std::string& name) const { return env_.count(name) > 0; }
  std::string str(const std::string& name);  // "" when unset
  // A whole number; ConfigError naming the variable when it is not one.
  int integer(const std::string& name, int fallback);

  // CUDA_VISIBLE_DEVICES (preferred) or NVIDIA_VISIBLE_DEVICES when set (its name in *var); UUIDs
  // go to a->gpu_uuids.
  std::optional<VisibleDevices> visible_devices(std::string* var);
  // The indices a VisibleDevices grants ("all": every GPU NVML sees).
  std::vector<int> visible_list(const VisibleDevices& d, const std::string& var);

  Allocation* const a;
  const CommandRunner& run;
  const DiscoveryOptions& options;
  const HardwareInfo& hw;

 private:
  const std::map<std::string, std::string>& env_;
};

bool all_digits(const std::string& s);  // 1 to 9 digits
std::vector<int> iota_list(int n);      // 0..n-1
// The index of a's node that is this host (a.nodes.size() when none is).
size_t find_this_node(const Allocation& a);
// Gives every node `other_count` GPUs except node `me`, which gets `mine`, noting when the count on
// other nodes is an assumption.
void assign_gpus(Allocation* a, size_t me, const std::vector<int>& mine, int other_count, bool other_assumed);
// The GPU facts NVML knows for the first granted GPU on node `me`.
void fill_gpu_facts(Allocation* a, const HardwareInfo& hw, size_t me);

}  // namespace gtrain
