// pbs_cluster.cpp: PBS Pro's answers for `gtrain cluster`: queues (qstat -Q -f), nodes and their
// GPUs (pbsnodes -a), and the finished jobs qstat -x keeps while job history is enabled.
#include <algorithm>
#include <sstream>

#include "launcher/base/text_util.h"
#include "launcher/scheduler/allocation.h"
#include "launcher/scheduler/cluster_reading.h"
#include "launcher/scheduler/scheduler_backend.h"
#include "runtime/core/errors.h"

namespace gtrain {
namespace {

int64_t to_int(const std::string& s, int64_t otherwise) {
  const std::string t = text::trim(s);
  if (t.empty() || t.size() > 18 || t.find_first_not_of("0123456789") != std::string::npos) return otherwise;
  return std::stoll(t);
}

std::string get(const std::map<std::string, std::string>& m, const std::string& k) {
  const auto it = m.find(k);
  return it == m.end() ? std::string() : it->second;
}

// ngpus of a job: Resource_List.ngpus, else the sum over its select chunks ("2:ncpus=8:ngpus=4").
int64_t job_gpus(const std::map<std::string, std::string>& j) {
  const int64_t direct = to_int(get(j, "Resource_List.ngpus"), -1);
  if (direct >= 0) return direct;
  int64_t total = 0;
  for (const auto& chunk : text::split(get(j, "Resource_List.select"), '+')) {
    const auto f = text::split(chunk, ':');
    int64_t count = 1, per = 0;
    for (size_t i = 0; i < f.size(); ++i) {
      if (i == 0 && to_int(f[0], -1) > 0) count = to_int(f[0], 1);
      if (f[i].rfind("ngpus=", 0) == 0) per = to_int(f[i].substr(6), 0);
    }
    total += count * per;
  }
  return total;
}

int64_t pbs_time(const std::string& s) {
  const auto t = text::parse_local_time(text::trim(s), "%a %b %d %H:%M:%S %Y");
  return t ? static_cast<int64_t>(*t) : 0;
}

}  // namespace

std::vector<std::pair<std::string, std::map<std::string, std::string>>> parse_pbs_blocks(const std::string& text) {
  std::vector<std::pair<std::string, std::map<std::string, std::string>>> out;
  std::istringstream in(text);
  std::string line, body;
  auto flush = [&] {
    if (!out.empty()) out.back().second = parse_qstat_full(body);
    body.clear();
  };
  while (std::getline(in, line)) {
    if (text::trim(line).empty()) continue;
    const bool header = !std::isspace(static_cast<unsigned char>(line[0]));
    if (header && line.find(" = ") == std::string::npos) {
      flush();
      std::string name = text::trim(line);
      for (const char* prefix : {"Job Id:", "Queue:"})
        if (name.rfind(prefix, 0) == 0) name = text::trim(name.substr(std::string(prefix).size()));
      out.push_back({name, {}});
    } else {
      body += (line[0] == '\t' && line.find(" = ") == std::string::npos ? line : text::trim(line)) + "\n";
    }
  }
  flush();
  return out;
}

std::vector<HistoryJob> parse_pbs_jobs(const std::string& text) {
  std::vector<HistoryJob> out;
  for (const auto& [id, j] : parse_pbs_blocks(text)) {
    HistoryJob h;
    h.id = id;
    h.user = get(j, "euser");
    if (h.user.empty()) h.user = get(j, "Job_Owner").substr(0, get(j, "Job_Owner").find('@'));
    h.account = get(j, "Account_Name");
    h.partition = get(j, "queue");
    h.state = get(j, "job_state");
    h.submit = pbs_time(get(j, "qtime"));
    h.start = pbs_time(get(j, "stime"));
    h.end = h.state == "F" || h.state == "X" ? pbs_time(get(j, "obittime")) : 0;
    if (h.state == "Q" || h.state == "H" || h.state == "W") h.state = "PENDING", h.start = 0;
    h.gpus = job_gpus(j);
    const LimitValue l = parse_slurm_duration(get(j, "Resource_List.walltime"));
    h.time_limit_s = l.known() ? l.value : 0;
    if (h.submit > 0) out.push_back(std::move(h));
  }
  return out;
}

ClusterReading read_pbs_cluster(const ClusterQuery& q, const CommandRunner& run) {
  ClusterReading c;
  c.scheduler = "pbs";
  c.user = q.user;
  c.sources.push_back("qstat -Q -f");
  const CommandOutput queues = run_merged(run, {"qstat", "-Q", "-f"});
  if (queues.rc != 0) {
    c.notes.push_back("qstat -Q -f: " + text::trim(queues.text.substr(0, queues.text.find('\n'))) + ": no queue facts");
  }
  c.sources.push_back("pbsnodes -a");
  const CommandOutput nodes = run_merged(run, {"pbsnodes", "-a"});
  const auto node_blocks = nodes.rc == 0 ? parse_pbs_blocks(nodes.text) : decltype(parse_pbs_blocks("")){};
  if (nodes.rc != 0) c.notes.push_back("pbsnodes -a failed: GPUs and free GPUs unknown");
  bool any_node_queue = false;
  for (const auto& [name, n] : node_blocks) any_node_queue |= !get(n, "queue").empty();
  for (const auto& [name, qf] : queues.rc == 0 ? parse_pbs_blocks(queues.text) : decltype(parse_pbs_blocks("")){}) {
    if (get(qf, "queue_type") != "Execution" || (!q.partition.empty() && name != q.partition)) continue;
    PartitionFacts p;
    p.name = name;
    p.state = get(qf, "enabled") == "True" && get(qf, "started") == "True" ? "UP" : "DOWN";
    p.max_time_s = parse_slurm_duration(get(qf, "resources_max.walltime"));
    const std::string counts = get(qf, "state_count");  // "Transit:0 Queued:3 Held:0 Waiting:0 Running:2 ..."
    for (const auto& item : text::split(counts, ' ')) {
      if (item.rfind("Queued:", 0) == 0) p.pending_jobs = to_int(item.substr(7), -1);
      if (item.rfind("Running:", 0) == 0) p.running_jobs = to_int(item.substr(8), -1);
    }
    if (nodes.rc == 0) p.free_gpus = 0;
    for (const auto& [host, n] : node_blocks) {
      if (any_node_queue && get(n, "queue") != name) continue;
      const int64_t g = std::max<int64_t>(0, to_int(get(n, "resources_available.ngpus"), 0));
      const int64_t used = std::max<int64_t>(0, to_int(get(n, "resources_assigned.ngpus"), 0));
      const std::string state = get(n, "state");
      p.nodes += 1, p.gpus += g;
      if (state.find("down") == std::string::npos && state.find("offline") == std::string::npos)
        p.free_gpus += std::max<int64_t>(0, g - used);
    }
    p.gpus_per_node = p.nodes > 0 ? p.gpus / p.nodes : 0;
    c.partitions.push_back(std::move(p));
  }
  if (!q.partition.empty() && c.partitions.empty() && queues.rc == 0)
    throw ConfigError("--partition " + q.partition + ": PBS has no such execution queue", "name one qstat -Q lists");
  if (q.read_history) {
    c.sources.push_back("qstat -x -f");
    const CommandOutput jobs = run_merged(run, {"qstat", "-x", "-f"});
    if (jobs.rc == 0) {
      for (auto& j : parse_pbs_jobs(jobs.text)) {
        if (j.submit >= q.since_unix && j.submit < q.until_unix) c.history.push_back(std::move(j));
      }
      const bool finished =
          std::any_of(c.history.begin(), c.history.end(), [](const HistoryJob& j) { return j.state == "F"; });
      c.history_read = finished;
      for (const auto& j : c.history) c.history_all_users |= !j.user.empty() && j.user != q.user;
      if (!finished)
        c.notes.push_back(
            "qstat -x shows no finished job: PBS keeps them only with job_history_enable, for "
            "job_history_duration (2 weeks by default): no hour-of-week profile or prediction from history");
    } else {
      c.notes.push_back("qstat -x -f failed: no job history");
    }
  }
  if (q.read_quotas) c.notes.push_back("PBS keeps no GPU-hour quota gtrain can read: state yours with --quota-hours");
  return c;
}

}  // namespace gtrain
