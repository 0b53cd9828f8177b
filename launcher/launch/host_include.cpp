// host_include.cpp: parsing `--include` and narrowing an allocation to it.
#include "launcher/launch/host_include.h"

#include <algorithm>

#include "launcher/base/text_util.h"
#include "launcher/scheduler/hostlist.h"
#include "runtime/core/errors.h"

namespace gtrain {
namespace {

const char* const kIncludeHint = "give --include as HOST[:GPU,GPU...][@HOST...], e.g. node2:0,1@node3";

std::string join_ints(const std::vector<int>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
  return out;
}

}  // namespace

std::vector<HostInclude> parse_include(const std::string& text) {
  std::vector<HostInclude> out;
  for (const std::string& raw : text::split(text, '@')) {
    const std::string entry = text::trim(raw);
    const size_t colon = entry.find(':');
    HostInclude h;
    h.host = text::trim(entry.substr(0, colon));
    if (h.host.empty())
      throw ConfigError("--include: expected a host name before each ':' and between '@', got '" + text + "'",
                        kIncludeHint);
    if (colon != std::string::npos) {
      for (const std::string& item : text::split(entry.substr(colon + 1), ',')) {
        const std::string g = text::trim(item);
        if (g.empty() || g.size() > 6 || g.find_first_not_of("0123456789") != std::string::npos)
          throw ConfigError(
              "--include: " + h.host + ": expected GPU indices like 0,1, got '" + entry.substr(colon + 1) + "'",
              kIncludeHint);
        const int idx = std::stoi(g);
        if (std::find(h.gpus.begin(), h.gpus.end(), idx) != h.gpus.end())
          throw ConfigError("--include: " + h.host + " lists GPU " + g + " twice", kIncludeHint);
        h.gpus.push_back(idx);
      }
    }
    for (const auto& o : out) {
      if (same_host(o.host, h.host)) throw ConfigError("--include: host " + h.host + " is listed twice", kIncludeHint);
    }
    out.push_back(std::move(h));
  }
  return out;
}

std::string format_include(const HostInclude& h) {
  return h.gpus.empty() ? h.host : h.host + ":" + join_ints(h.gpus);
}

IncludedAllocation include_only(const Allocation& a, const std::vector<HostInclude>& inc) {
  IncludedAllocation out;
  out.alloc = a;
  out.alloc.nodes.clear();
  std::string hosts;
  for (const auto& n : a.nodes) hosts += (hosts.empty() ? "" : ", ") + n.host;
  for (const auto& h : inc) {
    const auto node = std::find_if(a.nodes.begin(), a.nodes.end(),
                                   [&](const NodeAllocation& n) { return same_host(n.host, h.host); });
    if (node == a.nodes.end()) {
      throw ConfigError("--include: " + h.host + " is not in this job's allocation (" + hosts + ")",
                        "name hosts the scheduler granted (gtrain status shows them)");
    }
  }
  // The allocation's order (mpirun fills the hostfile in it), each host once.
  for (const auto& n : a.nodes) {
    const auto h =
        std::find_if(inc.begin(), inc.end(), [&](const HostInclude& i) { return same_host(n.host, i.host); });
    if (h == inc.end()) continue;
    NodeAllocation kept = n;
    if (!h->gpus.empty()) {
      kept.gpus.clear();
      std::vector<int> positions;
      for (int g : h->gpus) {
        const auto at = std::find(n.gpus.begin(), n.gpus.end(), g);
        if (at == n.gpus.end()) {
          throw ConfigError("--include: " + n.host + " has no granted GPU " + std::to_string(g) +
                                " (granted: " + (n.gpus.empty() ? std::string("none") : join_ints(n.gpus)) + ")",
                            "list GPUs the scheduler granted this host");
        }
        kept.gpus.push_back(g);
        positions.push_back(static_cast<int>(at - n.gpus.begin()));
      }
      out.positions.emplace_back(n.host, std::move(positions));
    }
    out.alloc.nodes.push_back(std::move(kept));
  }
  out.alloc.notes.push_back("--include: only " + [&] {
    std::string s;
    for (const auto& h : inc) s += (s.empty() ? "" : "@") + format_include(h);
    return s;
  }());
  return out;
}

}  // namespace gtrain
