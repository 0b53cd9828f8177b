// probe_command.cpp: formatting an Allocation as text and JSON, and `gtrain probe`.
#include "launcher/commands/probe_command.h"

#include "launcher/scheduler/scheduler_backend.h"

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "launcher/scheduler/hostlist.h"
#include "runtime/core/format.h"

namespace gtrain {
namespace {

std::string gib_text(int64_t bytes) {
  return format_gib(static_cast<double>(bytes), 1) + " GiB";
}

std::string local_time(int64_t unix_s) {
  const std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S %Z", &tm);
  return buf;
}

std::string index_list(const std::vector<int>& v) {
  std::string s;
  for (int i : v) s += (s.empty() ? "" : ",") + std::to_string(i);
  return s;
}

std::string pad(const std::string& s, size_t w) {
  return s.size() >= w ? s + " " : s + std::string(w - s.size(), ' ');
}

}  // namespace

nlohmann::json allocation_to_json(const Allocation& a, int64_t now_unix) {
  using nlohmann::json;
  auto str_or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  auto pos_or_null = [](int64_t v) { return v > 0 ? json(v) : json(nullptr); };
  json nodes = json::array();
  for (const auto& n : a.nodes) {
    nodes.push_back(
        {{"host", n.host}, {"gpus", n.gpus}, {"cpus", pos_or_null(n.cpus)}, {"tasks", pos_or_null(n.tasks)}});
  }
  std::vector<std::string> hosts;
  for (const auto& n : a.nodes) hosts.push_back(n.host);
  json j = {{"scheduler", a.scheduler},
            {"job_id", str_or_null(a.job_id)},
            {"nodelist", compress_hostlist(hosts)},
            {"nodes", nodes},
            {"total_gpus", a.total_gpus()},
            {"gpus_per_node", a.gpus_per_node()},
            {"gpu_model", str_or_null(a.gpu_model)},
            {"gpu_memory_bytes", pos_or_null(a.gpu_memory_bytes)},
            {"gpu_uuids", a.gpu_uuids},
            {"nvlink_links", a.nvlink_links >= 0 ? json(a.nvlink_links) : json(nullptr)},
            {"nvlink_peers", a.nvlink_peers >= 0 ? json(a.nvlink_peers) : json(nullptr)},
            {"cuda_build", a.cuda_build},
            {"world_size", a.world_size()},
            {"world_size_reason", a.world_size_reason()},
            {"tasks", pos_or_null(a.tasks)},
            {"time_limit_s", pos_or_null(a.time_limit_s)},
            {"end_time_unix", pos_or_null(a.end_time_unix)},
            {"remaining_s", a.end_time_unix > 0 ? json(a.end_time_unix - now_unix) : json(nullptr)},
            {"partition", str_or_null(a.partition)},
            {"account", str_or_null(a.account)},
            {"qos", str_or_null(a.qos)},
            {"user", str_or_null(a.user)},
            {"this_host", str_or_null(a.this_host)},
            {"notes", a.notes},
            {"sources", a.sources}};
  if (a.limits_read) {
    json lines = json::array();
    for (const auto& l : a.limits.lines(a.total_gpus(), static_cast<int64_t>(a.nodes.size()))) {
      lines.push_back({{"scope", l.scope}, {"name", l.name}, {"value", l.value}, {"binds", l.binds}, {"note", l.note}});
    }
    j["limits"] = lines;
    j["limit_notes"] = a.limits.notes;
  } else {
    j["limits"] = nullptr;
  }
  return j;
}

std::string allocation_to_text(const Allocation& a, int64_t now_unix) {
  std::string o;
  std::vector<std::string> hosts;
  for (const auto& n : a.nodes) hosts.push_back(n.host);
  o += "gtrain probe: " + std::string(scheduler_name(a.scheduler)) +
       (a.job_id.empty() ? std::string() : " job " + a.job_id) + " on " + std::to_string(a.nodes.size()) + " node" +
       (a.nodes.size() == 1 ? "" : "s") + " (" + compress_hostlist(hosts) + ")\n";
  const size_t shown = std::min<size_t>(a.nodes.size(), 16);
  for (size_t i = 0; i < shown; ++i) {
    const auto& n = a.nodes[i];
    std::string line = "  " + pad(n.host, 14) +
                       pad(std::to_string(n.gpus.size()) + " GPU" + (n.gpus.size() == 1 ? "" : "s") +
                               (n.gpus.empty() ? "" : " [" + index_list(n.gpus) + "]"),
                           22);
    line += pad(n.cpus > 0 ? std::to_string(n.cpus) + " CPUs" : "CPUs unknown", 14);
    line += n.tasks > 0 ? std::to_string(n.tasks) + " task" + (n.tasks == 1 ? "" : "s") : "tasks unknown";
    o += line + "\n";
  }
  if (shown < a.nodes.size()) o += "  ... and " + std::to_string(a.nodes.size() - shown) + " more nodes\n";
  std::string g = "GPUs       " + std::to_string(a.total_gpus()) + " granted";
  if (a.total_gpus() > 0) {
    g += " (" + (a.gpu_model.empty() ? std::string("model unknown") : a.gpu_model) + ", " +
         (a.gpu_memory_bytes > 0 ? gib_text(a.gpu_memory_bytes) : std::string("memory unknown")) +
         (a.nvlink_links > 0 ? ", " + std::to_string(a.nvlink_links) + " NVLink links to " +
                                   std::to_string(std::max(0, a.nvlink_peers)) + " peer GPUs"
                             : "") +
         ")";
  }
  o += "  " + g + "\n";
  o += "  ranks      " + std::to_string(a.world_size()) + ": " + a.world_size_reason() + "\n";
  auto or_unknown = [](const std::string& s) { return s.empty() ? std::string("unknown") : s; };
  if (scheduler_backend(a.scheduler).is_batch_scheduler()) {
    o += "  queue      partition " + or_unknown(a.partition) + ", account " + or_unknown(a.account) + ", QOS " +
         or_unknown(a.qos) + ", user " + or_unknown(a.user) + "\n";
  }
  std::string t =
      "  time       limit " + (a.time_limit_s > 0 ? format_duration(a.time_limit_s) : std::string("unknown"));
  if (a.end_time_unix > 0) {
    t += "; ends " + local_time(a.end_time_unix);
    const int64_t left = a.end_time_unix - now_unix;
    t += left > 0 ? " (in " + format_duration(left) + ")" : " (already past)";
  } else {
    t += "; end unknown";
  }
  o += t + "\n";
  if (a.limits_read) {
    o += "  limits (what binds is marked *):\n";
    for (const auto& l : a.limits.lines(a.total_gpus(), static_cast<int64_t>(a.nodes.size()))) {
      o += std::string("   ") + (l.binds ? "* " : "  ") + pad(l.scope, 26) + pad(l.name, 26) + pad(l.value, 12) +
           (l.note.empty() ? "" : l.note) + "\n";
    }
    for (const auto& n : a.limits.notes) o += "     (" + n + ")\n";
  }
  if (!a.notes.empty()) {
    o += "  notes:\n";
    for (const auto& n : a.notes) o += "    - " + n + "\n";
  }
  if (!a.sources.empty()) {
    o += "  read:";
    for (const auto& s : a.sources) o += " " + s;
    o += "\n";
  }
  return o;
}

int run_probe(const ProbeOptions& options, const std::map<std::string, std::string>& env, const CommandRunner& run,
              std::ostream& out) {
  DiscoveryOptions d;
  d.read_limits = options.read_limits;
  const Allocation a = discover_allocation(env, run, d);
  const int64_t now = static_cast<int64_t>(std::time(nullptr));
  if (options.json) {
    out << allocation_to_json(a, now).dump(2) << "\n";
  } else {
    out << allocation_to_text(a, now);
  }
  return 0;
}

}  // namespace gtrain
