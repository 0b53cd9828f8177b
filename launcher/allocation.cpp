// allocation.cpp: discover_allocation for Slurm, PBS, LSF, CUDA_VISIBLE_DEVICES and the bare
// machine, from an environment map and an injectable command runner.
#include "launcher/allocation.h"

#include <algorithm>
#include <cctype>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <numeric>
#include <sstream>

#include "launcher/launch/text_util.h"
#include "launcher/scheduler/hostlist.h"
#include "runtime/core/errors.h"

namespace fs = std::filesystem;

namespace gtrain {
namespace {

using text::split;
using text::trim;

using Env = std::map<std::string, std::string>;

bool all_digits(const std::string& s) {
  if (s.empty() || s.size() > 9) return false;
  for (char c : s) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// Reads variables and records each one read in Allocation::sources.
class EnvReader {
 public:
  EnvReader(const Env& env, Allocation* a) : env_(env), a_(a) {}
  const std::string* get(const std::string& name) {
    auto it = env_.find(name);
    if (it == env_.end()) return nullptr;
    const std::string read = name + "=" + it->second;
    if (std::find(a_->sources.begin(), a_->sources.end(), read) == a_->sources.end()) a_->sources.push_back(read);
    return &it->second;
  }
  bool has(const std::string& name) const { return env_.count(name) > 0; }
  std::string str(const std::string& name) {
    const std::string* v = get(name);
    return v ? *v : std::string();
  }
  int integer(const std::string& name, int fallback) {
    const std::string* v = get(name);
    if (!v) return fallback;
    const std::string t = trim(*v);
    if (!all_digits(t)) throw ConfigError(name + "='" + *v + "': expected a whole number");
    return std::stoi(t);
  }

 private:
  const Env& env_;
  Allocation* a_;
};

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

// Gives every node `per_node` GPUs except this node, which gets `mine` (indices), noting when the
// count on other nodes is an assumption.
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

int64_t parse_pbs_time(const std::string& text) {
  // qstat -f stime/etime: "Wed May  1 10:30:00 2024" in local time.
  std::tm tm{};
  std::istringstream is(trim(text));
  is >> std::get_time(&tm, "%a %b %d %H:%M:%S %Y");
  if (is.fail()) return 0;
  tm.tm_isdst = -1;
  const std::time_t t = std::mktime(&tm);
  return t < 0 ? 0 : static_cast<int64_t>(t);
}

// The GPU facts NVML knows for the first granted GPU on this node.
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

// CUDA_VISIBLE_DEVICES (preferred) or NVIDIA_VISIBLE_DEVICES, when set.
std::optional<VisibleDevices> visible_devices(EnvReader& r, Allocation* a, std::string* var) {
  for (const char* name : {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES"}) {
    if (const std::string* v = r.get(name)) {
      *var = name;
      VisibleDevices d = parse_visible_devices(*v, name);
      if (d.kind == VisibleDevices::kList) a->gpu_uuids = d.uuids;
      return d;
    }
  }
  return std::nullopt;
}

std::vector<int> visible_list(const VisibleDevices& d, const HardwareInfo& hw, Allocation* a, const std::string& var) {
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

void discover_slurm(Allocation* a, EnvReader& r, const CommandRunner& run, const DiscoveryOptions& o,
                    const HardwareInfo& hw) {
  a->scheduler = "slurm";
  a->job_id = r.has("SLURM_JOB_ID") ? r.str("SLURM_JOB_ID") : r.str("SLURM_JOBID");
  const char* nl_var = r.has("SLURM_JOB_NODELIST") ? "SLURM_JOB_NODELIST" : "SLURM_NODELIST";
  const auto hosts = expand_hostlist(trim(r.str(nl_var)), nl_var);
  if (r.has("SLURMD_NODENAME")) a->this_host = r.str("SLURMD_NODENAME");
  for (const auto& h : hosts) a->nodes.push_back({h, {}, 0, 0});
  if (a->nodes.empty()) {
    a->nodes.push_back({a->this_host, {}, 0, 0});
    a->notes.push_back("SLURM_JOB_NODELIST not set: assuming this node only");
  }
  size_t me = find_this_node(*a);
  if (me == a->nodes.size()) {
    a->notes.push_back("this host (" + a->this_host + ") is not in " + nl_var +
                       "; its GPU variables are taken as the first node's");
    me = 0;
  }
  const size_t n = a->nodes.size();
  if (r.has("SLURM_NNODES") && !hosts.empty() &&
      r.integer("SLURM_NNODES", static_cast<int>(n)) != static_cast<int>(n)) {
    a->notes.push_back("SLURM_NNODES=" + trim(r.str("SLURM_NNODES")) + " but " + nl_var + " lists " +
                       std::to_string(n) + " node(s): using the " + std::to_string(n) + " listed");
  }

  // CPUs and tasks.
  if (r.has("SLURM_JOB_CPUS_PER_NODE")) {
    const auto cpus = expand_count_list(trim(r.str("SLURM_JOB_CPUS_PER_NODE")), "SLURM_JOB_CPUS_PER_NODE");
    if (cpus.size() == n) {
      for (size_t i = 0; i < n; ++i) a->nodes[i].cpus = cpus[i];
    } else {
      a->notes.push_back("SLURM_JOB_CPUS_PER_NODE lists " + std::to_string(cpus.size()) + " nodes, the node list " +
                         std::to_string(n) + ": CPUs per node ignored");
    }
  }
  const int cpus_here = r.integer("SLURM_CPUS_ON_NODE", 0);
  if (cpus_here > 0) a->nodes[me].cpus = cpus_here;
  a->tasks = r.has("SLURM_NTASKS") ? r.integer("SLURM_NTASKS", 0) : r.integer("SLURM_NPROCS", 0);
  if (r.has("SLURM_TASKS_PER_NODE")) {
    const auto tasks = expand_count_list(trim(r.str("SLURM_TASKS_PER_NODE")), "SLURM_TASKS_PER_NODE");
    if (tasks.size() == n) {
      for (size_t i = 0; i < n; ++i) a->nodes[i].tasks = tasks[i];
    } else {
      a->notes.push_back("SLURM_TASKS_PER_NODE '" + trim(r.str("SLURM_TASKS_PER_NODE")) + "' lists " +
                         std::to_string(tasks.size()) + " node(s) but the job has " + std::to_string(n) +
                         ": tasks per node ignored");
    }
  }

  // GPUs: indices on this node, then counts.
  std::vector<int> mine;
  int my_count = -1;
  for (const char* var : {"SLURM_STEP_GPUS", "SLURM_JOB_GPUS"}) {
    if (r.has(var)) {
      mine = parse_index_list(trim(r.str(var)), var);
      my_count = static_cast<int>(mine.size());
      if (r.has("SLURM_GPUS_ON_NODE") && r.integer("SLURM_GPUS_ON_NODE", my_count) != my_count) {
        a->notes.push_back("SLURM_GPUS_ON_NODE=" + trim(r.str("SLURM_GPUS_ON_NODE")) + " but " + var + " lists " +
                           std::to_string(my_count) + " GPU(s) (" + trim(r.str(var)) + "): using the " +
                           std::to_string(my_count) + " listed");
      }
      break;
    }
  }
  if (my_count < 0 && r.has("SLURM_GPUS_ON_NODE")) my_count = r.integer("SLURM_GPUS_ON_NODE", 0);
  std::string type;
  int per_node = -1, total = -1;
  if (r.has("SLURM_GPUS_PER_NODE"))
    per_node = parse_gpu_count(r.str("SLURM_GPUS_PER_NODE"), "SLURM_GPUS_PER_NODE", &type);
  if (r.has("SLURM_GPUS")) total = parse_gpu_count(r.str("SLURM_GPUS"), "SLURM_GPUS", type.empty() ? &type : nullptr);
  if (my_count < 0) {
    // Older Slurm with --gres only sets CUDA_VISIBLE_DEVICES.
    std::string var;
    if (auto d = visible_devices(r, a, &var)) {
      mine = visible_list(*d, hw, a, var);
      my_count = static_cast<int>(mine.size());
    }
  }
  if (my_count < 0 && per_node >= 0) my_count = per_node;
  if (my_count < 0 && total >= 0 && total % static_cast<int>(n) == 0) my_count = total / static_cast<int>(n);
  if (my_count < 0) my_count = 0;
  if (mine.empty() || static_cast<int>(mine.size()) != my_count) mine = iota_list(my_count);
  int other = my_count;
  bool assumed = true;
  if (per_node >= 0) {
    other = per_node, assumed = false;
  } else if (total >= 0 && total % static_cast<int>(n) == 0) {
    other = total / static_cast<int>(n), assumed = false;
  }
  assign_gpus(a, me, mine, other, assumed);
  if (!type.empty()) a->gpu_model = type;

  a->partition = r.str("SLURM_JOB_PARTITION");
  a->account = r.str("SLURM_JOB_ACCOUNT");
  a->qos = r.str("SLURM_JOB_QOS");
  a->user = r.has("SLURM_JOB_USER") ? r.str("SLURM_JOB_USER") : r.str("USER");

  // Time: Slurm 23.02+ exports the end time; 22.05 does not, so ask squeue.
  if (r.has("SLURM_JOB_END_TIME")) {
    const std::string e = trim(r.str("SLURM_JOB_END_TIME"));
    if (!e.empty() && e.size() < 19 && std::all_of(e.begin(), e.end(), ::isdigit)) {
      a->end_time_unix = std::stoll(e);
    } else {
      a->notes.push_back("SLURM_JOB_END_TIME='" + e + "' is not a unix time: ignored");
    }
    const std::string s = trim(r.str("SLURM_JOB_START_TIME"));
    if (a->end_time_unix > 0 && !s.empty() && std::all_of(s.begin(), s.end(), ::isdigit)) {
      a->time_limit_s = a->end_time_unix - std::stoll(s);
    }
  }
  if (o.read_limits && !a->job_id.empty()) {
    if (a->end_time_unix == 0) {
      if (auto out = run({"squeue", "-h", "-j", a->job_id, "-o", "%e"})) {
        a->sources.push_back("squeue -h -j " + a->job_id + " -o %e: " + trim(*out));
        a->end_time_unix = parse_slurm_datetime(trim(*out));
      }
    }
    a->limits = read_slurm_limits(a->job_id, a->user, a->account, a->partition, a->qos, run);
    a->limits_read = true;
    if (a->partition.empty()) a->partition = a->limits.partition;
    if (a->account.empty()) a->account = a->limits.account;
    if (a->qos.empty()) a->qos = a->limits.qos;
    if (a->user.empty()) a->user = a->limits.user;
    if (a->end_time_unix == 0) a->end_time_unix = a->limits.job_end_time_unix;
    if (a->limits.job_time_limit_s.known()) a->time_limit_s = a->limits.job_time_limit_s.value;
    if (a->gpu_model.empty()) a->gpu_model = a->limits.job_gpu_type;
    if (a->limits.job_gpus >= 0 && a->limits.job_gpus != a->total_gpus()) {
      a->notes.push_back("scontrol reports " + std::to_string(a->limits.job_gpus) +
                         " GPUs for the job, the environment " + std::to_string(a->total_gpus()));
    }
  }
  if (a->end_time_unix == 0) {
    a->notes.push_back(std::string("job end time unknown (no usable SLURM_JOB_END_TIME; ") +
                       (o.read_limits ? "squeue gave nothing)" : "squeue not asked)"));
  }
  fill_gpu_facts(a, hw, me);
}

void discover_pbs(Allocation* a, EnvReader& r, const CommandRunner& run, const DiscoveryOptions& o,
                  const HardwareInfo& hw) {
  a->scheduler = "pbs";
  a->job_id = r.str("PBS_JOBID");
  // PBS_NODEFILE: one line per process slot; hosts in order of first appearance.
  std::string nodefile_problem;  // what is wrong with PBS_NODEFILE, if set and unusable
  if (r.has("PBS_NODEFILE")) {
    const std::string path = r.str("PBS_NODEFILE");
    std::error_code ec;
    std::ifstream f;
    if (!fs::exists(path, ec))
      nodefile_problem = "PBS_NODEFILE " + path + " does not exist";
    else if (fs::is_directory(path, ec))
      nodefile_problem = "PBS_NODEFILE " + path + " is a directory, not a file";
    else {
      f.open(path);
      if (!f) nodefile_problem = "PBS_NODEFILE " + path + " cannot be read";
    }
    std::string line;
    while (f.is_open() && std::getline(f, line)) {
      // One process slot a line; the host is the first field (some sites append more).
      std::istringstream fields(line);
      std::string host;
      if (!(fields >> host)) continue;
      auto it = std::find_if(a->nodes.begin(), a->nodes.end(), [&](const NodeAllocation& x) { return x.host == host; });
      if (it == a->nodes.end())
        a->nodes.push_back({host, {}, 0, 1});
      else
        ++it->tasks;
    }
    if (f.is_open() && a->nodes.empty()) nodefile_problem = "PBS_NODEFILE " + path + " lists no hosts";
  }
  std::map<std::string, std::string> q;
  if (o.read_limits && !a->job_id.empty()) {
    if (auto out = run({"qstat", "-f", a->job_id})) {
      q = parse_qstat_full(*out);
      a->sources.push_back("qstat -f " + a->job_id);
    } else {
      a->notes.push_back("qstat -f " + a->job_id +
                         " gave nothing: walltime and per-node GPUs from the environment only");
    }
  }
  auto qget = [&](const std::string& k) {
    auto it = q.find(k);
    return it == q.end() ? std::string() : it->second;
  };
  const auto vnodes = parse_pbs_exec_vnode(qget("exec_vnode"));
  if (a->nodes.empty()) {
    for (const auto& v : vnodes) a->nodes.push_back({v.first, {}, 0, 0});
    if (!nodefile_problem.empty() && !a->nodes.empty())
      a->notes.push_back(nodefile_problem + ": hosts from qstat's exec_vnode");
  }
  if (a->nodes.empty()) {
    a->nodes.push_back({a->this_host, {}, 0, 0});
    a->notes.push_back(nodefile_problem.empty() ? "no PBS_NODEFILE and no exec_vnode: assuming this node only"
                                                : nodefile_problem + "; no exec_vnode either: assuming this node only");
  }
  size_t me = find_this_node(*a);
  if (me == a->nodes.size()) me = 0;

  // GPUs: exec_vnode ngpus per host (PBS Pro), PBS_GPUFILE (Torque), CUDA_VISIBLE_DEVICES.
  bool done = false;
  if (!vnodes.empty()) {
    for (auto& node : a->nodes) {
      for (const auto& v : vnodes) {
        if (same_host(v.first, node.host)) {
          node.gpus = iota_list(v.second.second);
          if (v.second.first > 0) node.cpus = v.second.first;
          done = true;
        }
      }
    }
  }
  if (!done && r.has("PBS_GPUFILE")) {
    std::ifstream f(r.str("PBS_GPUFILE"));
    std::string line;
    while (std::getline(f, line)) {
      line = trim(line);
      const size_t g = line.rfind("-gpu");
      if (g == std::string::npos || !all_digits(line.substr(g + 4))) continue;
      const std::string host = line.substr(0, g);
      for (auto& node : a->nodes) {
        if (same_host(node.host, host)) node.gpus.push_back(std::stoi(line.substr(g + 4)));
      }
      done = true;
    }
  }
  std::string var;
  auto vis = visible_devices(r, a, &var);
  if (!done) {
    const int total = all_digits(qget("Resource_List.ngpus")) ? std::stoi(qget("Resource_List.ngpus")) : -1;
    std::vector<int> mine = vis ? visible_list(*vis, hw, a, var) : std::vector<int>{};
    const int n = static_cast<int>(a->nodes.size());
    if (total >= 0 && total % n == 0) {
      if (!vis || static_cast<int>(mine.size()) != total / n) mine = iota_list(total / n);
      assign_gpus(a, me, mine, total / n, false);
    } else {
      assign_gpus(a, me, mine, static_cast<int>(mine.size()), true);
    }
  } else if (vis && vis->kind == VisibleDevices::kList && vis->indices.size() == a->nodes[me].gpus.size()) {
    a->nodes[me].gpus = vis->indices;  // the actual indices on this node
  }
  const int ncpus = r.integer("NCPUS", 0);
  if (ncpus > 0 && a->nodes[me].cpus == 0) a->nodes[me].cpus = ncpus;
  a->tasks = 0;
  for (const auto& node : a->nodes) a->tasks += node.tasks;

  a->partition = r.has("PBS_QUEUE") ? r.str("PBS_QUEUE") : qget("queue");
  a->account = r.has("PBS_ACCOUNT") ? r.str("PBS_ACCOUNT") : qget("Account_Name");
  a->user = r.str("USER");
  if (a->user.empty()) a->user = qget("Job_Owner").substr(0, qget("Job_Owner").find('@'));
  const LimitValue wall = parse_slurm_duration(qget("Resource_List.walltime"));  // HH:MM:SS
  if (wall.known()) {
    a->time_limit_s = wall.value;
  } else if (r.has("PBS_WALLTIME")) {
    a->time_limit_s = r.integer("PBS_WALLTIME", 0);  // Torque: seconds
  }
  const int64_t start = parse_pbs_time(qget("stime"));
  if (start > 0 && a->time_limit_s > 0) a->end_time_unix = start + a->time_limit_s;
  if (a->time_limit_s == 0) a->notes.push_back("walltime unknown (no qstat, no PBS_WALLTIME)");
  a->notes.push_back("PBS queue and server limits are not read: unknown");
  fill_gpu_facts(a, hw, me);
}

void discover_lsf(Allocation* a, EnvReader& r, const HardwareInfo& hw) {
  a->scheduler = "lsf";
  a->job_id = r.str("LSB_JOBID");
  if (r.has("LSB_MCPU_HOSTS")) {
    const std::string text = r.str("LSB_MCPU_HOSTS");
    std::istringstream is(text);
    std::string host, slots;
    while (is >> host) {
      if (!(is >> slots) || !all_digits(slots)) {
        throw ConfigError("LSB_MCPU_HOSTS='" + text +
                          "': expected pairs of host and slot count, e.g. 'hostA 4 hostB 4'");
      }
      const int s = std::stoi(slots);
      a->nodes.push_back({host, {}, s, s});
      a->tasks += s;
    }
  }
  if (a->nodes.empty()) {
    a->nodes.push_back({a->this_host, {}, 0, 0});
    a->notes.push_back(std::string(r.has("LSB_MCPU_HOSTS") ? "LSB_MCPU_HOSTS is empty" : "LSB_MCPU_HOSTS not set") +
                       ": assuming this node only");
  }
  size_t me = find_this_node(*a);
  if (me == a->nodes.size()) me = 0;
  std::string var;
  std::vector<int> mine;
  if (auto vis = visible_devices(r, a, &var)) mine = visible_list(*vis, hw, a, var);
  assign_gpus(a, me, mine, static_cast<int>(mine.size()), true);
  a->partition = r.str("LSB_QUEUE");
  a->account = r.str("LSB_PROJECT_NAME");
  a->user = r.str("USER");
  a->notes.push_back("LSF run limit and end time are not read: unknown");
  fill_gpu_facts(a, hw, me);
}

}  // namespace

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
  if (ranks_override > 0) return std::to_string(ranks_override) + " ranks as configured (--ranks)";
  const int g = total_gpus();
  if (g > 0) {
    return cuda_build ? "one rank per granted GPU (" + std::to_string(g) + ")"
                      : "one CPU rank per granted GPU (" + std::to_string(g) + "; this build has no CUDA)";
  }
  const bool from_tasks = scheduler != "local" && scheduler != "cuda_env" && tasks > 0;
  return "no GPU granted: " + std::to_string(world_size()) + " CPU rank(s), " +
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

std::vector<std::pair<std::string, std::pair<int, int>>> parse_pbs_exec_vnode(const std::string& text) {
  std::vector<std::pair<std::string, std::pair<int, int>>> out;
  for (auto chunk : split(trim(text), '+')) {
    chunk = trim(chunk);
    if (chunk.size() >= 2 && chunk.front() == '(' && chunk.back() == ')') chunk = chunk.substr(1, chunk.size() - 2);
    auto f = split(chunk, ':');
    if (f.empty() || trim(f[0]).empty()) continue;
    std::string host = trim(f[0]);
    host = host.substr(0, host.find('['));  // vnode "node1[0]" lives on host "node1"
    int ncpus = 0, ngpus = 0;
    for (size_t i = 1; i < f.size(); ++i) {
      const size_t eq = f[i].find('=');
      if (eq == std::string::npos) continue;
      const std::string k = f[i].substr(0, eq), v = trim(f[i].substr(eq + 1));
      if (!all_digits(v)) continue;
      if (k == "ncpus") ncpus += std::stoi(v);
      if (k == "ngpus") ngpus += std::stoi(v);
    }
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& p) { return p.first == host; });
    if (it == out.end()) {
      out.push_back({host, {ncpus, ngpus}});
    } else {
      it->second.first += ncpus;
      it->second.second += ngpus;
    }
  }
  return out;
}

std::map<std::string, std::string> parse_qstat_full(const std::string& text) {
  std::map<std::string, std::string> out;
  std::string last;
  std::istringstream is(text);
  std::string line;
  while (std::getline(is, line)) {
    if (line.empty()) continue;
    if (line[0] == '\t' && !last.empty()) {  // continuation of a long value
      out[last] += trim(line);
      continue;
    }
    const size_t eq = line.find(" = ");
    if (eq == std::string::npos) continue;
    last = trim(line.substr(0, eq));
    out[last] = trim(line.substr(eq + 3));
  }
  return out;
}

Allocation discover_allocation(const Env& env, const CommandRunner& run, const DiscoveryOptions& o) {
  const HardwareInfo hw = o.hardware ? *o.hardware : query_hardware();
  Allocation a;
  a.cuda_build = hw.cuda_build;
  a.this_host = hw.hostname;
  a.ranks_override = o.ranks;
  EnvReader r(env, &a);
  if (r.has("SLURM_JOB_ID") || r.has("SLURM_JOBID")) {
    discover_slurm(&a, r, run, o, hw);
  } else if (r.has("PBS_JOBID")) {
    discover_pbs(&a, r, run, o, hw);
  } else if (r.has("LSB_JOBID")) {
    discover_lsf(&a, r, hw);
  } else {
    std::string var;
    auto vis = visible_devices(r, &a, &var);
    a.scheduler = vis ? "cuda_env" : "local";
    std::vector<int> gpus;
    if (vis) {
      gpus = visible_list(*vis, hw, &a, var);
    } else if (hw.cuda_build) {
      gpus = iota_list(static_cast<int>(hw.gpus.size()));
    }
    a.nodes.push_back({a.this_host, gpus, hw.cores, 0});
    fill_gpu_facts(&a, hw, 0);
  }
  if (a.total_gpus() > 0 && !hw.gpu_note.empty() && a.gpu_memory_bytes == 0) a.notes.push_back(hw.gpu_note);

  // CPU ranks when no GPU is granted: the scheduler's tasks, else one rank that uses every core
  // through its threads (as torchrun's default of one process per node); --ranks asks for more.
  int node_tasks = 0;
  for (const auto& node : a.nodes) node_tasks += node.tasks;
  if (a.scheduler != "local" && a.scheduler != "cuda_env" && (a.tasks > 0 || node_tasks > 0)) {
    a.cpu_ranks = a.tasks > 0 ? a.tasks : node_tasks;
  } else {
    a.cpu_ranks = 1;
  }
  return a;
}

}  // namespace gtrain
