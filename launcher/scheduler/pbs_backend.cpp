// pbs_backend.cpp: the PBS Pro / Torque backend: PBS_* and qstat discovery, #PBS directives,
// qsub / qdel / qsig / qstat, and the PBS parsers (exec_vnode, qstat -f).
#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

#include "launcher/base/text_util.h"
#include "launcher/scheduler/cluster_reading.h"
#include "launcher/scheduler/discovery.h"
#include "launcher/scheduler/hostlist.h"
#include "launcher/scheduler/scheduler_backend.h"
#include "runtime/core/errors.h"
#include "runtime/core/format.h"

namespace fs = std::filesystem;

namespace gtrain {
namespace {

using text::split;
using text::trim;

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

// PBS_NODEFILE: one line per process slot; hosts in order of first appearance. Returns what is
// wrong with it when it is set and unusable.
std::string pbs_nodefile(DiscoveryContext& r, Allocation* a) {
  if (!r.has("PBS_NODEFILE")) return "";
  std::string problem;
  const std::string path = r.str("PBS_NODEFILE");
  std::error_code ec;
  std::ifstream f;
  if (!fs::exists(path, ec))
    problem = "PBS_NODEFILE " + path + " does not exist";
  else if (fs::is_directory(path, ec))
    problem = "PBS_NODEFILE " + path + " is a directory, not a file";
  else {
    f.open(path);
    if (!f) problem = "PBS_NODEFILE " + path + " cannot be read";
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
  if (f.is_open() && a->nodes.empty()) problem = "PBS_NODEFILE " + path + " lists no hosts";
  return problem;
}

// GPUs: exec_vnode ngpus per host (PBS Pro), PBS_GPUFILE (Torque), CUDA_VISIBLE_DEVICES.
void pbs_gpus(DiscoveryContext& r, Allocation* a, size_t me, const std::map<std::string, std::string>& q,
              const std::vector<std::pair<std::string, std::pair<int, int>>>& vnodes) {
  bool done = false;
  for (auto& node : a->nodes) {
    for (const auto& v : vnodes) {
      if (same_host(v.first, node.host)) {
        node.gpus = iota_list(v.second.second);
        if (v.second.first > 0) node.cpus = v.second.first;
        done = true;
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
  auto vis = r.visible_devices(&var);
  if (!done) {
    const auto it = q.find("Resource_List.ngpus");
    const std::string ngpus = it == q.end() ? std::string() : it->second;
    const int total = all_digits(ngpus) ? std::stoi(ngpus) : -1;
    std::vector<int> mine = vis ? r.visible_list(*vis, var) : std::vector<int>{};
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
}

// The queue, account, user and walltime, from the environment and qstat.
void pbs_queue_and_time(DiscoveryContext& r, Allocation* a, const std::map<std::string, std::string>& q) {
  auto qget = [&](const std::string& k) {
    auto it = q.find(k);
    return it == q.end() ? std::string() : it->second;
  };
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
}

// PBS's resource chunk: select=N:ngpus=G[:ncpus=G*C]:mpiprocs=G.
std::string pbs_select(int nodes, int gpus_per_node, int cpus_per_gpu) {
  return "select=" + std::to_string(nodes) + ":ngpus=" + std::to_string(gpus_per_node) +
         (cpus_per_gpu > 0 ? ":ncpus=" + std::to_string(gpus_per_node * cpus_per_gpu) : std::string()) +
         ":mpiprocs=" + std::to_string(gpus_per_node);
}

// RUN_DIR/pbs-stage-K.out: a PBS stage's joined output (qsub -o has no job-id pattern).
std::string pbs_output_path(const std::string& run_dir, int index) {
  return (fs::path(run_dir) / ("pbs-stage-" + std::to_string(index) + ".out")).string();
}

class PbsBackend : public SchedulerBackend {
 public:
  SchedulerKind kind() const override { return SchedulerKind::pbs; }

  bool detect(const std::map<std::string, std::string>& env) const override { return env.count("PBS_JOBID") > 0; }

  void discover(DiscoveryContext& r) const override {
    Allocation* a = r.a;
    a->job_id = r.str("PBS_JOBID");
    const std::string nodefile_problem = pbs_nodefile(r, a);
    std::map<std::string, std::string> q;
    if (r.options.read_limits && !a->job_id.empty()) {
      if (auto out = r.run({"qstat", "-f", a->job_id})) {
        q = parse_qstat_full(*out);
        a->sources.push_back("qstat -f " + a->job_id);
      } else {
        a->notes.push_back("qstat -f " + a->job_id +
                           " gave nothing: walltime and per-node GPUs from the environment only");
      }
    }
    const auto vn = q.find("exec_vnode");
    const auto vnodes = parse_pbs_exec_vnode(vn == q.end() ? std::string() : vn->second);
    if (a->nodes.empty()) {
      for (const auto& v : vnodes) a->nodes.push_back({v.first, {}, 0, 0});
      if (!nodefile_problem.empty() && !a->nodes.empty())
        a->notes.push_back(nodefile_problem + ": hosts from qstat's exec_vnode");
    }
    if (a->nodes.empty()) {
      a->nodes.push_back({a->this_host, {}, 0, 0});
      a->notes.push_back(nodefile_problem.empty()
                             ? "no PBS_NODEFILE and no exec_vnode: assuming this node only"
                             : nodefile_problem + "; no exec_vnode either: assuming this node only");
    }
    size_t me = find_this_node(*a);
    if (me == a->nodes.size()) me = 0;
    pbs_gpus(r, a, me, q, vnodes);
    const int ncpus = r.integer("NCPUS", 0);
    if (ncpus > 0 && a->nodes[me].cpus == 0) a->nodes[me].cpus = ncpus;
    a->tasks = 0;
    for (const auto& node : a->nodes) a->tasks += node.tasks;
    pbs_queue_and_time(r, a, q);
    fill_gpu_facts(a, r.hw, me);
  }

  bool can_submit() const override { return true; }
  std::string submit_program() const override { return "qsub"; }
  std::string script_suffix() const override { return ".pbs"; }
  std::string job_id_variable() const override { return "PBS_JOBID"; }
  // PBS walltime is [[HH:]MM:]SS, with no days.
  std::string time_limit_text(int64_t seconds) const override { return format_walltime(static_cast<double>(seconds)); }

  std::string script_directives(const BatchStage& s) const override {
    std::ostringstream o;
    const int per_node = s.gpus / s.nodes;
    o << "#!/bin/bash\n"
      << "# gtrain stage " << s.index << ": generated by `gtrain submit --scheduler pbs`. PBS sends no\n"
      << "# signal before the walltime: gtrain run's --time-limit (TIME_LIMIT) makes it save and exit 3\n"
      << "# in time; the TERM at the walltime is still forwarded as USR1.\n"
      << "#PBS -l " << pbs_select(s.nodes, per_node, s.cpus_per_gpu) << "\n"
      << "#PBS -l walltime=" << s.time << "\n"
      << "#PBS -r y\n"
      << "#PBS -j oe\n";
    if (!s.partition.empty()) o << "#PBS -q " << s.partition << "\n";
    if (!s.account.empty()) o << "#PBS -A " << s.account << "\n";
    for (const auto& d : s.extra_directives) o << "#PBS " << d << "\n";
    return o.str();
  }

  void check_qos(const std::string& qos) const override {
    if (!qos.empty())
      throw ConfigError(str("--qos '", qos, "': PBS has no QOS"),
                        "choose the queue with --partition (qsub -q) instead");
  }
  void check_launcher(const std::string& launcher) const override {
    if (launcher == "srun")
      throw ConfigError("--launcher srun needs --scheduler slurm (got pbs)",
                        "give --launcher mpirun: PBS stages start ranks with mpirun");
  }
  // #SBATCH lines take quotes (slurm_backend.cpp); a #PBS line's parsing of them differs by PBS flavour.
  void check_directive(const std::string& arg) const override {
    if (arg.find_first_of(" \t\"'\\") != std::string::npos)
      throw ConfigError(
          str("--sbatch-arg '", arg, "': blanks, quotes and backslashes are not supported with --scheduler pbs"),
          "give each option as its own --sbatch-arg, without quotes");
  }

  std::vector<std::string> submit_argv(const SubmitRequest& r) const override {
    return {"qsub", "-N", r.job_name, "-o", pbs_output_path(r.run_dir, r.index), r.script};
  }
  std::vector<std::string> dependency_args(const std::string& after_job) const override {
    return {"-W", "depend=afterany:" + after_job};
  }
  std::string begin_time(double unix_time) const override { return text::local_time(unix_time, "%Y%m%d%H%M.%S"); }
  std::vector<std::string> begin_args(const std::string& begin) const override { return {"-a", begin}; }
  // The whole environment goes with the stage, as on Slurm (--export=ALL).
  std::vector<std::string> stage_env_args(int stage_index) const override {
    return {"-V", "-v", "GTRAIN_STAGE=" + std::to_string(stage_index)};
  }

  void resize_submit_argv(std::vector<std::string>& argv, int nodes, int per_node, const std::string& /*launcher*/,
                          int cpus_per_gpu) const override {
    const std::string script = argv.back();
    argv.pop_back();
    std::vector<std::string> kept;
    for (size_t i = 0; i < argv.size(); ++i) {
      if (argv[i] == "-l" && i + 1 < argv.size() && argv[i + 1].rfind("select=", 0) == 0) {
        ++i;
        continue;
      }
      kept.push_back(argv[i]);
    }
    kept.insert(kept.end(), {"-l", pbs_select(nodes, per_node, cpus_per_gpu)});
    kept.push_back(script);
    argv = kept;
  }
  // Each stage its own log (qsub -o has no job-id pattern).
  void renumber_submit_argv(std::vector<std::string>& argv, const std::string& run_dir, int index) const override {
    for (size_t i = 0; i + 1 < argv.size(); ++i) {
      if (argv[i] == "-o") argv[i + 1] = pbs_output_path(run_dir, index);
    }
  }

  std::vector<std::string> cancel_argv(const std::string& job) const override { return {"qdel", job}; }
  std::vector<std::string> signal_argv(const std::string& job) const override { return {"qsig", "-s", "USR1", job}; }
  std::string kill_grace_name() const override { return "kill_delay"; }

  std::optional<std::map<std::string, JobState>> job_states(const std::vector<std::string>& jobs,
                                                            const CommandRunner& run) const override {
    std::map<std::string, JobState> out;
    for (const auto& job : jobs) {
      const CommandOutput r = run_merged(run, {"qstat", "-f", job});
      if (r.rc != 0) {
        if (r.text.find("Unknown Job Id") != std::string::npos || r.text.find("Job has finished") != std::string::npos)
          continue;
        return std::nullopt;
      }
      const auto at = r.text.find("job_state = ");
      if (at == std::string::npos) return std::nullopt;
      const std::string state = r.text.substr(at + 12, 1);
      const JobPhase phase = state == "R" ? JobPhase::running : state == "Q" ? JobPhase::pending : JobPhase::other;
      if (state != "F" && state != "X") out[job] = {phase, state};  // finished, expired
    }
    return out;
  }

  ClusterReading read_cluster(const ClusterQuery& q, const CommandRunner& run) const override {
    return read_pbs_cluster(q, run);
  }

  // qstat -x -f (finished jobs too): "qtime = Sat Dec  5 10:37:20 2026", local time.
  std::optional<double> job_submit_time(const std::string& job, const CommandRunner& run) const override {
    if (job.empty()) return std::nullopt;
    const CommandOutput r = run_merged(run, {"qstat", "-x", "-f", job});
    const auto at = r.text.find("qtime = ");
    if (r.rc != 0 || at == std::string::npos) return std::nullopt;
    const auto end = r.text.find('\n', at);
    return text::parse_local_time(text::trim(r.text.substr(at + 8, end == std::string::npos ? end : end - at - 8)),
                                  "%a %b %d %H:%M:%S %Y");
  }

  bool job_gone(const std::string& job, const CommandRunner& run) const override {
    if (job.empty()) return false;
    const CommandOutput r = run_merged(run, {"qstat", job});
    return r.rc != 0 &&
           (r.text.find("Unknown Job Id") != std::string::npos || r.text.find("Job has finished") != std::string::npos);
  }
};

}  // namespace

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

const SchedulerBackend& pbs_backend() {
  static const PbsBackend backend;
  return backend;
}

}  // namespace gtrain
