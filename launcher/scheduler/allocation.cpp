// allocation.cpp: Allocation's counts, the scheduler-independent parsers (visible devices, GPU
// lists and counts), and discover_allocation, which hands the environment to the first backend of
// the detection list that claims it (scheduler/*_backend.cpp).
#include "launcher/scheduler/allocation.h"

#include <algorithm>
#include <cctype>

#include "launcher/base/text_util.h"
#include "launcher/scheduler/discovery.h"
#include "launcher/scheduler/scheduler_backend.h"
#include "runtime/core/errors.h"
#include "runtime/core/format.h"

namespace gtrain {

using text::split;
using text::trim;

int Allocation::total_gpus() const {
  int n = 0;
  for (const auto& node : nodes) n += static_cast<int>(node.gpus.size());
  return n;
}

int Allocation::gpus_per_node() const {
  int n = 0;
  for (const auto& node : nodes) n = std::max(n, static_cast<int>(node.gpus.size()));
  return n;
}

int Allocation::world_size() const {
  if (ranks_override > 0) return ranks_override;
  const int g = total_gpus();
  if (g > 0) return g;
  return std::max(1, cpu_ranks);
}

std::string Allocation::world_size_reason() const {
  if (ranks_override > 0) return plural(ranks_override, "rank") + " as configured (--ranks)";
  const int g = total_gpus();
  if (g > 0) {
    return cuda_build ? "one rank per granted GPU (" + std::to_string(g) + ")"
                      : "one CPU rank per granted GPU (" + std::to_string(g) + "; this build has no CUDA)";
  }
  const bool from_tasks = scheduler_backend(scheduler).is_batch_scheduler() && tasks > 0;
  return "no GPU granted: " + plural(world_size(), "CPU rank") + ", " +
         (from_tasks ? "one per scheduler task" : "one rank using every core (--ranks N for more)");
}

namespace {
std::string gpu_label(int index) {
  return std::to_string(index);
}
std::string gpu_label(const std::string& uuid) {
  return uuid;
}

// GPU indices or UUIDs, each at most once.
template <typename T>
void check_distinct(const std::vector<T>& v, const std::string& what, const std::string& text) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (std::find(v.begin(), v.begin() + i, v[i]) != v.begin() + i)
      throw ConfigError(what + "='" + text + "': GPU " + gpu_label(v[i]) + " is listed twice");
  }
}
}  // namespace

VisibleDevices parse_visible_devices(const std::string& text, const std::string& what) {
  VisibleDevices d;
  const std::string t = trim(text);
  std::string low = t;
  std::transform(low.begin(), low.end(), low.begin(), [](unsigned char c) { return std::tolower(c); });
  if (t.empty() || low == "none" || low == "void" || low == "nodevfiles" || t == "-1") {
    d.kind = VisibleDevices::kNone;
    return d;
  }
  if (low == "all") {
    d.kind = VisibleDevices::kAll;
    return d;
  }
  d.kind = VisibleDevices::kList;
  int pos = 0;
  for (const auto& raw : split(t, ',')) {
    const std::string e = trim(raw);
    if (all_digits(e) && e.size() <= 6) {
      d.indices.push_back(std::stoi(e));
    } else if ((e.rfind("GPU-", 0) == 0 || e.rfind("MIG-", 0) == 0) && e.size() > 4) {
      d.uuids.push_back(e);
      d.indices.push_back(pos);
    } else {
      throw ConfigError(what + "='" + text + "': expected GPU indices (0,1), UUIDs (GPU-...), empty, none or all");
    }
    ++pos;
  }
  // Two ranks on one GPU is never what a scheduler meant (and NCCL refuses it).
  if (d.uuids.empty())
    check_distinct(d.indices, what, text);
  else
    check_distinct(d.uuids, what, text);
  return d;
}

std::vector<int> parse_index_list(const std::string& text, const std::string& what) {
  std::vector<int> out;
  const std::string t = trim(text);
  if (t.empty()) return out;
  for (const auto& raw : split(t, ',')) {
    const std::string e = trim(raw);
    const size_t dash = e.find('-');
    const std::string lo = e.substr(0, dash), hi = dash == std::string::npos ? lo : e.substr(dash + 1);
    if (!all_digits(lo) || !all_digits(hi) || lo.size() > 6 || hi.size() > 6 || std::stoi(hi) < std::stoi(lo) ||
        std::stoi(hi) - std::stoi(lo) > 4096) {
      throw ConfigError(what + "='" + text + "': expected GPU indices such as 0,1,2 or 0-3");
    }
    for (int v = std::stoi(lo); v <= std::stoi(hi); ++v) out.push_back(v);
  }
  check_distinct(out, what, text);
  return out;
}

int parse_gpu_count(const std::string& text, const std::string& what, std::string* type) {
  int total = 0;
  const std::string t = trim(text);
  for (const auto& item : split(t, ',')) {
    auto f = split(trim(item), ':');
    const std::string count = f.back();
    if (!all_digits(count)) {
      throw ConfigError(what + "='" + text + "': expected [type:]count such as 4 or a100:4");
    }
    total += std::stoi(count);
    if (type && f.size() >= 2) {
      const std::string& ty = f[f.size() - 2];
      if (ty != "gpu" && type->empty()) *type = ty;
    }
  }
  return total;
}

Allocation discover_allocation(const std::map<std::string, std::string>& env, const CommandRunner& run,
                               const DiscoveryOptions& o) {
  const HardwareInfo hw = o.hardware ? *o.hardware : query_hardware();
  Allocation a;
  a.cuda_build = hw.cuda_build;
  a.this_host = hw.hostname;
  a.ranks_override = o.ranks;
  const SchedulerBackend& backend = detect_scheduler(env);
  a.scheduler = backend.kind();
  DiscoveryContext ctx(env, &a, run, o, hw);
  backend.discover(ctx);
  if (a.total_gpus() > 0 && !hw.gpu_note.empty() && a.gpu_memory_bytes == 0) a.notes.push_back(hw.gpu_note);

  // CPU ranks when no GPU is granted: the scheduler's tasks, else one rank that uses every core
  // through its threads (as torchrun's default of one process per node); --ranks asks for more.
  int node_tasks = 0;
  for (const auto& node : a.nodes) node_tasks += node.tasks;
  if (backend.is_batch_scheduler() && (a.tasks > 0 || node_tasks > 0)) {
    a.cpu_ranks = a.tasks > 0 ? a.tasks : node_tasks;
  } else {
    a.cpu_ranks = 1;
  }
  return a;
}

}  // namespace gtrain
