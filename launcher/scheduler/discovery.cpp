// discovery.cpp: DiscoveryContext and the discovery steps the scheduler backends share.
#include "launcher/scheduler/discovery.h"

#include <algorithm>
#include <cctype>
#include <numeric>

#include "launcher/base/text_util.h"
#include "launcher/scheduler/hostlist.h"
#include "runtime/core/errors.h"

namespace gtrain {

bool all_digits(const std::string& s) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

const std::string* DiscoveryContext::get(const std::string& name) {
  auto it = env_.find(name);
  if (it == env_.end()) return nullptr;
  const std::string read = name + "=" + it->second;
  if (std::find(a->sources.begin(), a->sources.end(), read) == a->sources.end()) a->sources.push_back(read);
  return &it->second;
}

std::string DiscoveryContext::str(const std::string& name) {
  const std::string* v = get(name);
  return v ? *v : std::string();
}

int DiscoveryContext::integer(const std::string& name, int fallback) {
  const std::string* v = get(name);
  if (!v) return fallback;
  const std::string t = text::trim(*v);
  if (!all_digits(t)) throw ConfigError(name + "='" + *v + "': expected a whole number");
  return std::stoi(t);
}

std::optional<VisibleDevices> DiscoveryContext::visible_devices(std::string* var) {
  for (const char* name : {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"}) {
    if (const std::string* v = get(name)) {
      *var = name;
      VisibleDevices d = parse_visible_devices(*v, name);
      if (d.kind == VisibleDevices::kList) a->gpu_uuids = d.uuids;
      return d;
    }
  }
  return std::nullopt;
}

std::vector<int> DiscoveryContext::visible_list(const VisibleDevices& d, const std::string& var) {
  switch (d.kind) {
    case VisibleDevices::kList:
      return d.indices;
    case VisibleDevices::kAll:
      if (hw.gpus.empty()) a->notes.push_back(var + "=all but no GPU is known to NVML here");
      return iota_list(static_cast<int>(hw.gpus.size()));
    default:
      return {};
  }
}

std::vector<int> iota_list(int n) {
  std::vector<int> v(static_cast<size_t>(std::max(n, 0)));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

size_t find_this_node(const Allocation& a) {
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    if (same_host(a.nodes[i].host, a.this_host)) return i;
  }
  return a.nodes.size();
}

void assign_gpus(Allocation* a, size_t me, const std::vector<int>& mine, int other_count, bool other_assumed) {
  for (size_t i = 0; i < a->nodes.size(); ++i) {
    a->nodes[i].gpus = i == me ? mine : iota_list(other_count);
  }
  if (a->nodes.size() > 1 && other_assumed && other_count > 0) {
    a->notes.push_back("GPU count on the other " + std::to_string(a->nodes.size() - 1) +
                       " node(s) assumed equal to this node's (" + std::to_string(other_count) +
                       "); the scheduler reports GPUs for this node only");
  }
}

void fill_gpu_facts(Allocation* a, const HardwareInfo& hw, size_t me) {
  if (hw.gpus.empty() || me >= a->nodes.size() || a->nodes[me].gpus.empty()) return;
  const GpuInfo* g = &hw.gpus.front();
  if (!a->gpu_uuids.empty()) {
    for (const auto& x : hw.gpus) {
      if (x.uuid == a->gpu_uuids.front()) g = &x;
    }
  } else {
    const int idx = a->nodes[me].gpus.front();
    if (idx >= 0 && static_cast<size_t>(idx) < hw.gpus.size()) g = &hw.gpus[static_cast<size_t>(idx)];
  }
  if (!g->name.empty()) a->gpu_model = g->name;
  a->gpu_memory_bytes = g->memory_bytes;
  a->nvlink_links = g->nvlink_links;
  a->nvlink_peers = g->nvlink_peers;
}

}  // namespace gtrain
