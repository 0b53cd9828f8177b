// slurm_backend.cpp: the Slurm backend: SLURM_* discovery, scontrol/sacctmgr limits, #SBATCH
// directives, sbatch / scancel / squeue / sacct.
#include <algorithm>
#include <regex>
#include <sstream>

#include "launcher/base/text_util.h"
#include "launcher/scheduler/discovery.h"
#include "launcher/scheduler/hostlist.h"
#include "launcher/scheduler/scheduler_backend.h"
#include "runtime/core/errors.h"

namespace gtrain {
namespace {

using text::trim;

// The nodes of the job, and which of them is this one.
size_t slurm_nodes(DiscoveryContext& r, Allocation* a, const std::vector<std::string>& hosts, const char* nl_var) {
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
  return me;
}

void slurm_cpus_and_tasks(DiscoveryContext& r, Allocation* a, size_t me) {
  const size_t n = a->nodes.size();
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
}

// GPUs: indices on this node, then counts.
void slurm_gpus(DiscoveryContext& r, Allocation* a, size_t me) {
  const int n = static_cast<int>(a->nodes.size());
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
    if (auto d = r.visible_devices(&var)) {
      mine = r.visible_list(*d, var);
      my_count = static_cast<int>(mine.size());
    }
  }
  if (my_count < 0 && per_node >= 0) my_count = per_node;
  if (my_count < 0 && total >= 0 && total % n == 0) my_count = total / n;
  if (my_count < 0) my_count = 0;
  if (mine.empty() || static_cast<int>(mine.size()) != my_count) mine = iota_list(my_count);
  int other = my_count;
  bool assumed = true;
  if (per_node >= 0) {
    other = per_node, assumed = false;
  } else if (total >= 0 && total % n == 0) {
    other = total / n, assumed = false;
  }
  assign_gpus(a, me, mine, other, assumed);
  if (!type.empty()) a->gpu_model = type;
}

// Time: Slurm 23.02+ exports the end time; 22.05 does not, so ask squeue. Limits from scontrol.
void slurm_time_and_limits(DiscoveryContext& r, Allocation* a, const SchedulerBackend& slurm) {
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
  if ((r.options.read_limits || r.options.read_end_time) && !a->job_id.empty() && a->end_time_unix == 0) {
    if (auto out = r.run({"squeue", "-h", "-j", a->job_id, "-o", "%e"})) {
      a->sources.push_back("squeue -h -j " + a->job_id + " -o %e: " + trim(*out));
      a->end_time_unix = parse_slurm_datetime(trim(*out));
    }
  }
  if (r.options.read_limits && !a->job_id.empty()) {
    a->limits = slurm.read_limits(*a, r.run);
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
    a->notes.push_back(
        std::string("job end time unknown (no usable SLURM_JOB_END_TIME; ") +
        (r.options.read_limits || r.options.read_end_time ? "squeue gave nothing)" : "squeue not asked)"));
  }
}

// One #SBATCH directive's argument: sbatch reads directive lines with double quotes and backslash
// escapes, so an argument with blanks or quotes (--comment=two words) stays one option.
std::string sbatch_directive(const std::string& arg) {
  if (arg.find_first_of(" \t\"'\\") == std::string::npos) return arg;
  std::string out = "\"";
  for (char c : arg) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// Slurm expands %j, %u, ... in --output: a literal % is %%.
std::string slurm_pattern_literal(const std::string& s) {
  std::string out;
  for (char c : s) out += c == '%' ? std::string("%%") : std::string(1, c);
  return out;
}

class SlurmBackend : public SchedulerBackend {
 public:
  SchedulerKind kind() const override { return SchedulerKind::slurm; }

  bool detect(const std::map<std::string, std::string>& env) const override {
    return env.count("SLURM_JOB_ID") || env.count("SLURM_JOBID");
  }

  void discover(DiscoveryContext& r) const override {
    Allocation* a = r.a;
    a->job_id = r.has("SLURM_JOB_ID") ? r.str("SLURM_JOB_ID") : r.str("SLURM_JOBID");
    const char* nl_var = r.has("SLURM_JOB_NODELIST") ? "SLURM_JOB_NODELIST" : "SLURM_NODELIST";
    const auto hosts = expand_hostlist(trim(r.str(nl_var)), nl_var);
    if (r.has("SLURMD_NODENAME")) a->this_host = r.str("SLURMD_NODENAME");
    const size_t me = slurm_nodes(r, a, hosts, nl_var);
    slurm_cpus_and_tasks(r, a, me);
    slurm_gpus(r, a, me);
    a->partition = r.str("SLURM_JOB_PARTITION");
    a->account = r.str("SLURM_JOB_ACCOUNT");
    a->qos = r.str("SLURM_JOB_QOS");
    a->user = r.has("SLURM_JOB_USER") ? r.str("SLURM_JOB_USER") : r.str("USER");
    slurm_time_and_limits(r, a, *this);
    fill_gpu_facts(a, r.hw, me);
  }

  SchedulerLimits read_limits(const Allocation& a, const CommandRunner& run) const override {
    return read_slurm_limits(a.job_id, a.user, a.account, a.partition, a.qos, run);
  }

  bool can_submit() const override { return true; }
  std::string submit_program() const override { return "sbatch"; }
  std::string script_suffix() const override { return ".sbatch"; }
  std::string job_id_variable() const override { return "SLURM_JOB_ID"; }
  bool signals_before_limit() const override { return true; }
  std::string time_limit_text(int64_t seconds) const override { return format_duration(seconds); }

  std::string script_directives(const BatchStage& s) const override {
    std::ostringstream o;
    o << "#!/bin/bash\n"
      << "# gtrain stage " << s.index << ": generated by `gtrain submit`. Paths (output, working\n"
      << "# directory) are on the sbatch command line recorded in chain.json; the dependency, --begin\n"
      << "# and GTRAIN_STAGE are added when it is submitted (gtrain submit --dry-run prints them).\n"
      << "#SBATCH --nodes=" << (s.nodes_min > 0 ? std::to_string(s.nodes_min) + "-" : std::string()) << s.nodes << "\n"
      << "#SBATCH --gpus-per-node=" << s.gpus / s.nodes
      << "\n"
      // mpirun: one task a node (gtrain starts mpirun, which places the ranks); srun: a task a rank.
      // A node range asks for no tasks a node: Slurm would count MIN x that many tasks and so take
      // the fewest nodes; without it, it takes as many of the range as are free.
      << (s.nodes_min > 0
              ? std::string()
              : "#SBATCH --ntasks-per-node=" + std::to_string(s.launcher == "srun" ? s.gpus / s.nodes : 1) + "\n")
      << (s.cpus_per_gpu > 0 ? "#SBATCH --cpus-per-gpu=" + std::to_string(s.cpus_per_gpu) + "\n" : "")
      << "#SBATCH --time=" << s.time << "\n"
      << "#SBATCH --signal=B:USR1@" << s.signal_lead_s << "\n"
      << "#SBATCH --requeue\n"
      << "#SBATCH --open-mode=append\n";
    if (!s.partition.empty()) o << "#SBATCH --partition=" << s.partition << "\n";
    if (!s.account.empty()) o << "#SBATCH --account=" << s.account << "\n";
    if (!s.qos.empty()) o << "#SBATCH --qos=" << s.qos << "\n";
    for (const auto& d : s.extra_directives) o << "#SBATCH " << sbatch_directive(d) << "\n";
    return o.str();
  }

  // Slurm keeps a job whose --time exceeds its partition's MaxTime pending for ever
  // (PartitionTimeLimit) unless EnforcePartLimits refuses it: refused here, when scontrol tells the
  // partition's MaxTime.
  void check_time_limit(const std::string& partition, const std::string& time_text, double limit_s,
                        const CommandRunner& run) const override {
    std::vector<std::string> argv = {"scontrol", "show", "partition", "-o"};
    if (!partition.empty()) argv.push_back(partition);
    const auto text = run(argv);
    if (!text) return;  // no scontrol, or no such partition: sbatch says so
    std::istringstream in(*text);
    for (std::string line; std::getline(in, line);) {
      auto rec = parse_scontrol_record(line);
      if (partition.empty() ? rec["Default"] != "YES" : rec["PartitionName"] != partition) continue;
      const LimitValue max = parse_slurm_duration(rec["MaxTime"]);
      if (max.known() && limit_s > static_cast<double>(max.value))
        throw ConfigError("--time " + time_text + " exceeds partition " + rec["PartitionName"] + "'s MaxTime " +
                              format_duration(max.value) +
                              ": Slurm would keep every stage pending (PartitionTimeLimit)",
                          "ask for --time " + format_duration(max.value) +
                              " or less: the chain's stages resume each other, so shorter stages lose nothing");
    }
  }

  std::vector<std::string> submit_argv(const SubmitRequest& r) const override {
    return {"sbatch",
            "--parsable",
            "--job-name=" + r.job_name,
            "--chdir=" + r.run_dir,
            "--output=" + slurm_pattern_literal(r.run_dir) + "/slurm-%j.out",
            r.script};
  }
  std::vector<std::string> dependency_args(const std::string& after_job) const override {
    return {"--dependency=afterany:" + after_job};
  }
  std::string begin_time(double unix_time) const override { return text::local_time(unix_time, "%Y-%m-%dT%H:%M:%S"); }
  std::vector<std::string> begin_args(const std::string& begin) const override { return {"--begin=" + begin}; }
  // The whole environment goes with the stage (--export=ALL): the GTRAIN_<SECTION>_<KEY> overrides
  // submit checked the plan with, PATH and LD_LIBRARY_PATH among them.
  std::vector<std::string> stage_env_args(int stage_index) const override {
    return {"--export=ALL,GTRAIN_STAGE=" + std::to_string(stage_index)};
  }
  // sbatch --parsable answers "JOBID;CLUSTER" on a multi-cluster site; dependencies take the id.
  std::string shell_job_id_fixup(const std::string& var) const override { return " && " + var + "=${" + var + "%%;*}"; }

  void resize_submit_argv(std::vector<std::string>& argv, int /*nodes*/, int per_node, const std::string& launcher,
                          int /*cpus_per_gpu*/) const override {
    const std::string script = argv.back();
    argv.pop_back();
    std::vector<std::string> kept;
    for (const auto& a : argv) {
      if (a.rfind("--gpus-per-node=", 0) != 0 && a.rfind("--ntasks-per-node=", 0) != 0) kept.push_back(a);
    }
    kept.push_back("--gpus-per-node=" + std::to_string(per_node));
    kept.push_back("--ntasks-per-node=" + std::to_string(launcher == "srun" ? per_node : 1));
    kept.push_back(script);
    argv = kept;
  }

  std::optional<std::vector<std::string>> test_submit_argv(const std::vector<std::string>& submit, int nodes,
                                                           int per_node) const override {
    std::vector<std::string> argv = submit;
    argv.insert(argv.end() - 1,
                {"--test-only", "--nodes=" + std::to_string(nodes), "--gpus-per-node=" + std::to_string(per_node)});
    return argv;
  }

  // "sbatch: Job 35 to start at 2026-12-05T12:53:10 using 2 processors on nodes node1 in partition debug"
  std::optional<double> test_submit_start(const std::string& answer) const override {
    std::smatch m;
    if (!std::regex_search(answer, m, std::regex("to start at ([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8})")))
      return std::nullopt;
    return text::parse_local_time(m[1], "%Y-%m-%dT%H:%M:%S");
  }

  std::vector<std::string> cancel_argv(const std::string& job) const override { return {"scancel", job}; }
  std::vector<std::string> signal_argv(const std::string& job) const override {
    return {"scancel", "--batch", "--signal=USR1", job};
  }
  std::string kill_grace_name() const override { return "KillWait"; }

  std::optional<std::map<std::string, JobState>> job_states(const std::vector<std::string>& jobs,
                                                            const CommandRunner& run) const override {
    std::map<std::string, JobState> out;
    if (jobs.empty()) return out;
    std::string ids;
    for (const auto& job : jobs) ids += (ids.empty() ? "" : ",") + job;
    const CommandOutput r = run_merged(run, {"squeue", "-h", "-j", ids, "-o", "%i %T"});
    if (r.rc != 0) {
      if (r.text.find("Invalid job id") != std::string::npos) return out;  // none of them known any more
      return std::nullopt;
    }
    static const std::set<std::string> kEnded = {"COMPLETED", "CANCELLED", "FAILED",   "TIMEOUT",      "NODE_FAIL",
                                                 "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"};
    std::istringstream in(r.text);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream fields(line);
      std::string id, state;
      if (fields >> id >> state && !kEnded.count(state)) {
        const JobPhase phase = state == "RUNNING"   ? JobPhase::running
                               : state == "PENDING" ? JobPhase::pending
                                                    : JobPhase::other;
        out[id] = {phase, state};
      }
    }
    return out;
  }

  // sacct (accounting, which remembers ended jobs) first, else the controller's record (which keeps
  // an ended job MinJobAge seconds): "2026-12-05T10:37:20", local time.
  ClusterReading read_cluster(const ClusterQuery& q, const CommandRunner& run) const override {
    return read_slurm_cluster(q, run);
  }

  std::optional<double> job_submit_time(const std::string& job, const CommandRunner& run) const override {
    if (job.empty()) return std::nullopt;
    const CommandOutput a = run_merged(run, {"sacct", "-n", "-P", "-X", "-j", job, "-o", "Submit"});
    if (a.rc == 0) {
      if (auto t = text::parse_local_time(text::trim(a.text), "%Y-%m-%dT%H:%M:%S")) return t;
    }
    const CommandOutput c = run_merged(run, {"scontrol", "-o", "show", "job", job});
    const auto at = c.text.find("SubmitTime=");
    if (c.rc != 0 || at == std::string::npos) return std::nullopt;
    return text::parse_local_time(c.text.substr(at + 11, 19), "%Y-%m-%dT%H:%M:%S");
  }

  bool job_gone(const std::string& job, const CommandRunner& run) const override {
    if (job.empty()) return false;
    const CommandOutput r = run_merged(run, {"squeue", "-h", "-j", job, "-o", "%T"});
    if (r.rc == 0) return r.text.find_first_not_of(" \n\r\t") == std::string::npos;  // listed by no state
    return r.text.find("Invalid job id") != std::string::npos;
  }

  std::map<std::string, std::string> status_details(const std::vector<std::string>& jobs,
                                                    const std::set<std::string>& queued,
                                                    const CommandRunner& run) const override;
};

std::map<std::string, std::string> SlurmBackend::status_details(const std::vector<std::string>& jobs,
                                                                const std::set<std::string>& queued,
                                                                const CommandRunner& run) const {
  std::map<std::string, std::string> live;
  std::string ids;
  for (const auto& job : jobs) ids += (ids.empty() ? "" : ",") + job;
  if (ids.empty()) return live;
  // sacct knows finished jobs (when accounting exists); squeue the pending and running ones.
  if (auto acct = run({"sacct", "-n", "-X", "-P", "-j", ids, "-o", "JobID,State"})) {
    std::istringstream in(*acct);
    std::string line;
    while (std::getline(in, line)) {
      const auto bar = line.find('|');
      if (bar != std::string::npos) live[line.substr(0, bar)] = line.substr(bar + 1);
    }
  }
  std::optional<std::string> q = run({"squeue", "-h", "-j", ids, "-o", "%i %T %r"});
  if (!q) return live;
  // The reason is the rest of the line: Slurm's descriptions have spaces.
  std::istringstream in(*q);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string id, state, reason;
    if (!(fields >> id >> state)) continue;
    std::getline(fields >> std::ws, reason);
    while (!reason.empty() && (reason.back() == ' ' || reason.back() == '\r')) reason.pop_back();
    live[id] = state + (reason.empty() || reason == "None" ? "" : " (" + reason + ")");
  }
  // A stage chain.json still has queued that squeue answered without, and sacct does not know
  // either: it ended without its script reporting (killed outright, or the node failed).
  for (const auto& job : queued) {
    if (!live.count(job)) live[job] = "gone (neither queued nor running; its script did not report)";
  }
  return live;
}

}  // namespace

const SchedulerBackend& slurm_backend() {
  static const SlurmBackend backend;
  return backend;
}

}  // namespace gtrain
