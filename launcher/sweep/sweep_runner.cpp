// sweep_runner.cpp: the sweep's loop over trial processes.
#include "launcher/sweep/sweep_runner.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "launcher/base/program_runner.h"
#include "launcher/base/run_lock.h"
#include "launcher/base/text_util.h"
#include "launcher/launch/host_include.h"
#include "launcher/launch/run_launch.h"
#include "launcher/scheduler/allocation.h"
#include "launcher/scheduler/hostlist.h"
#include "launcher/sweep/sweep_ledger.h"
#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/core/run_dir/run_records.h"
#include "runtime/core/run_dir/stage_records.h"

namespace fs = std::filesystem;

namespace gtrain {
namespace {

volatile std::sig_atomic_t g_stop_signal = 0;
extern "C" void note_stop_signal(int sig) {
  g_stop_signal = sig;
}

double unix_now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Where the trials run: `units` ranks (or GPUs), `per_trial` each, at `places`, each taking
// `trials_per_unit` trials at once (slot s is places[s / trials_per_unit]).
struct Pool {
  int64_t units = 1, per_trial = 1, slots = 1, trials_per_unit = 1;
  int64_t busiest_node_ranks = 1;  // the most trial ranks one node runs at once (for train.threads)
  std::vector<TrialPlace> places;
};

// A node's GPUs in the pool: labels for CUDA_VISIBLE_DEVICES (this node's may be UUIDs) and the
// allocation's indices (for --include).
struct PoolNode {
  std::string host;
  bool local = false;
  std::vector<std::string> labels;
  std::vector<int> indices;
  size_t granted = 0;  // the node's granted GPUs (labels may keep fewer: --ranks)
};

std::string joined(const std::vector<std::string>& v, size_t from, size_t n, const char* sep = ",") {
  std::string out;
  for (size_t i = from; i < from + n; ++i) out += (i > from ? sep : "") + v[i];
  return out;
}

// The grant's GPUs, node by node (this node first), up to `limit` (0 = all).
std::vector<PoolNode> pool_nodes(const Allocation& a, const std::map<std::string, std::string>& env, int64_t limit) {
  std::vector<PoolNode> nodes;
  for (const auto& n : a.nodes) {
    if (n.gpus.empty()) continue;
    PoolNode p{n.host, same_host(n.host, a.this_host), {}, n.gpus, n.gpus.size()};
    // This node's trials see their GPUs as entries of this process's CUDA_VISIBLE_DEVICES when it
    // has one (they may be UUIDs), else the granted indices; other nodes' by index (--include).
    const auto vis = env.find("CUDA_VISIBLE_DEVICES");
    const auto listed = !p.local || vis == env.end() ? std::vector<std::string>{} : text::split(vis->second, ',');
    for (size_t i = 0; i < n.gpus.size(); ++i)
      p.labels.push_back(i < listed.size() ? text::trim(listed[i]) : std::to_string(n.gpus[i]));
    nodes.insert(p.local ? nodes.begin() : nodes.end(), std::move(p));
  }
  int64_t left = limit > 0 ? limit : INT64_MAX;
  for (auto& n : nodes) {
    const auto keep = static_cast<size_t>(std::min<int64_t>(left, static_cast<int64_t>(n.labels.size())));
    n.labels.resize(keep), n.indices.resize(keep);
    left -= static_cast<int64_t>(keep);
  }
  nodes.erase(std::remove_if(nodes.begin(), nodes.end(), [](const PoolNode& n) { return n.labels.empty(); }),
              nodes.end());
  return nodes;
}

// The places of `per_trial` GPUs: within one node while a node has that many (several a node), else
// whole nodes together; on a single-node grant without --include (the trial's CUDA_VISIBLE_DEVICES
// says which GPUs), across nodes with it (the trial's gtrain run starts its ranks there).
std::vector<TrialPlace> gpu_places(const std::vector<PoolNode>& nodes, int64_t per_trial, int64_t* busiest) {
  std::vector<TrialPlace> out;
  const bool single = nodes.size() == 1 && nodes[0].local;
  size_t widest = 0;
  for (const auto& n : nodes) widest = std::max(widest, n.labels.size());
  const auto k = static_cast<size_t>(per_trial);
  if (k <= widest) {
    for (const auto& n : nodes) {
      *busiest = std::max<int64_t>(*busiest, static_cast<int64_t>(n.labels.size() / k * k));
      for (size_t first = 0; first + k <= n.labels.size(); first += k) {
        TrialPlace p;
        const std::string gpus = joined(n.labels, first, k);
        if (single) {
          p.devices = gpus, p.where = "GPU " + gpus;
        } else {
          const bool whole = k == n.granted;  // the node's whole grant: no GPU list
          p.include =
              format_include({n.host, whole ? std::vector<int>{}
                                            : std::vector<int>(n.indices.begin() + static_cast<long>(first),
                                                               n.indices.begin() + static_cast<long>(first + k))});
          p.where = n.host + " GPU " + joined(n.labels, first, k);
        }
        out.push_back(std::move(p));
      }
    }
    return out;
  }
  // A trial wider than any node: consecutive whole nodes until it has its GPUs.
  *busiest = static_cast<int64_t>(widest);
  for (size_t i = 0; i < nodes.size();) {
    size_t have = 0, j = i;
    std::vector<std::string> hosts;
    for (; j < nodes.size() && have < k; ++j) have += nodes[j].labels.size(), hosts.push_back(nodes[j].host);
    if (have < k) break;
    TrialPlace p;
    for (size_t h = i; h < j; ++h) {
      const auto& n = nodes[h];
      const bool whole = n.labels.size() == n.granted;
      p.include += (h > i ? "@" : "") + format_include({n.host, whole ? std::vector<int>{} : n.indices});
    }
    p.where = joined(hosts, 0, hosts.size(), "@");
    out.push_back(std::move(p));
    i = j;
  }
  return out;
}

}  // namespace

std::vector<TrialPlace> trial_places(const Allocation& a, const std::map<std::string, std::string>& env, int64_t limit,
                                     int64_t per_trial, int64_t* busiest_node_ranks) {
  int64_t busiest = 0;
  auto places = gpu_places(pool_nodes(a, env, limit), per_trial, &busiest);
  if (busiest_node_ranks) *busiest_node_ranks = busiest;
  return places;
}

namespace {

Pool make_pool(const SweepRunOptions& o, const SweepFile& f, const std::map<std::string, std::string>& env) {
  Pool p;
  const Allocation a = discover_allocation(env, no_command_runner());
  const auto nodes = pool_nodes(a, env, o.ranks);
  int64_t gpus = 0;
  for (const auto& n : nodes) gpus += static_cast<int64_t>(n.labels.size());
  const int64_t granted = a.total_gpus();
  p.units = o.ranks > 0 ? o.ranks : std::max<int64_t>(1, gpus);
  if (granted > 0 && p.units > granted) {
    throw ConfigError("--ranks " + std::to_string(p.units) + ": this job grants " + std::to_string(granted) + " GPUs");
  }
  p.per_trial = ranks_per_trial(f.sweep.gpus_per_trial, p.units, o.fits);
  if (p.per_trial == 0) {
    throw ConfigError(f.path + ": no layout of the job fits on up to the " + std::to_string(p.units) +
                          " ranks (GPUs) of the pool, so no trial can run",
                      "gtrain plan " + f.path + " says why; give the sweep more GPUs, or make the job smaller");
  }
  if (p.per_trial > p.units) {
    throw ConfigError(f.path + ": sweep.gpus_per_trial = " + std::to_string(p.per_trial) + " exceeds the " +
                          std::to_string(p.units) + " ranks of the pool",
                      "lower sweep.gpus_per_trial, or give the sweep more ranks (--ranks)");
  }
  p.trials_per_unit = f.sweep.trials_per_gpu;
  if (nodes.empty()) {
    // CPU ranks on this machine.
    p.places.clear();
    for (int64_t i = 0; i + p.per_trial <= p.units; i += p.per_trial)
      p.places.push_back({"", "", std::to_string(p.per_trial) + " rank(s)"});
    p.busiest_node_ranks = p.units / p.per_trial * p.per_trial;
  } else {
    p.places = trial_places(a, env, o.ranks, p.per_trial, &p.busiest_node_ranks);
    if (p.places.empty()) {
      throw ConfigError(f.path + ": sweep.gpus_per_trial = " + std::to_string(p.per_trial) +
                            " GPUs fit no node or run of whole nodes of the grant",
                        "lower sweep.gpus_per_trial to a node's GPU count, or ask for whole nodes");
    }
  }
  p.slots = static_cast<int64_t>(p.places.size()) * p.trials_per_unit;
  p.busiest_node_ranks *= p.trials_per_unit;
  return p;
}

// A trial process under way.
struct Running {
  size_t trial = 0;
  int64_t slot = 0;
  double start_unix = 0;
};

pid_t spawn(const std::vector<std::string>& argv, const std::string& log, const std::string& devices) {
  std::error_code ec;
  fs::create_directories(fs::path(log).parent_path(), ec);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0)
    throw Error(log + ": cannot write (" + std::strerror(errno) + ")", "check that the sweep directory is writable");
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(fd);
    throw Error(std::string("cannot start a trial: fork failed: ") + std::strerror(errno));
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // the sweep killed outright: its trials (and their ranks) go too
    if (::getppid() != parent) _exit(1);
    ::setpgid(0, 0);  // a terminal's Ctrl-C reaches the sweep, which asks each trial to save
    for (int sig : {SIGTERM, SIGINT, SIGUSR1, SIGHUP}) std::signal(sig, SIG_DFL);
    const int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull >= 0) ::dup2(devnull, 0);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    if (!devices.empty()) ::setenv("CUDA_VISIBLE_DEVICES", devices.c_str(), 1);
    ::execv(cargv[0], cargv.data());
    dprintf(2, "gtrain: error: cannot start %s: %s\n", cargv[0], std::strerror(errno));
    _exit(1);
  }
  ::close(fd);
  return pid;
}

// The trial's metric at `step` from its metrics.jsonl (nullopt: not recorded).
std::optional<double> read_metric(const std::string& run_dir, const std::string& metric, int64_t step) {
  const std::string path = (fs::path(run_dir) / "metrics.jsonl").string();
  std::optional<double> v;
  if (metric == "train_loss") {
    for (const auto& r : read_records_of<TrainRecord>(path)) {
      if (r.step <= step && !r.skipped) v = r.loss;
    }
    return v;
  }
  for (const auto& r : read_records_of<EvalRecord>(path)) {
    if (r.step == step) v = metric == "eval_accuracy" ? r.accuracy : r.loss;
  }
  return v;
}

// The last error line of a trial's log (its cause), else its exit code.
std::string failure_cause(const std::string& log, int code) {
  std::ifstream f(log);
  std::string line, last;
  while (std::getline(f, line)) {
    if (line.find("error") != std::string::npos) last = line;
  }
  const std::string exit =
      code >= 128 ? "killed by signal " + std::to_string(code - 128) : "exit code " + std::to_string(code);
  return last.empty() ? exit : last + " (" + exit + ")";
}

class SweepLoop {
 public:
  SweepLoop(const SweepRunOptions& o, SweepFile f, std::string dir, Pool pool, SweepLedger l)
      : o_(o), f_(std::move(f)), dir_(std::move(dir)), pool_(std::move(pool)), l_(std::move(l)) {}

  int run();

 private:
  bool decide();  // the decisions on the results so far, into the ledger; true when it changed
  void start_free_slots();
  void reap(pid_t pid, int status);
  std::vector<std::string> trial_argv(const TrialRecord& t, int64_t slot) const;
  void ask_trials_to_stop();
  const TrialPlace& place(int64_t slot) const;
  void say(const std::string& line) const {
    if (!o_.quiet) std::cout << "gtrain sweep: " << line << std::endl;
  }

  const SweepRunOptions& o_;
  SweepFile f_;
  std::string dir_;
  Pool pool_;
  SweepLedger l_;
  std::map<pid_t, Running> running_;
  std::map<size_t, double> retry_after_;  // trials whose run directory was busy: not before this time
  bool stopping_ = false;
  double deadline_ = 0;  // unix time the sweep must end by (0 = none)

 public:
  void set_deadline(double unix_time) { deadline_ = unix_time; }

 private:
  // Seconds kept in hand at the deadline: no trial starts with less left (gtrain run needs a step
  // and a save; it refuses a stage that cannot fit them).
  static constexpr double kStartLead = 5.0;
  bool past_start_lead() const { return deadline_ > 0 && unix_now_s() > deadline_ - kStartLead; }
};

const TrialPlace& SweepLoop::place(int64_t slot) const {
  return pool_.places[static_cast<size_t>(slot / pool_.trials_per_unit)];
}

std::vector<std::string> SweepLoop::trial_argv(const TrialRecord& t, int64_t slot) const {
  const int64_t rung_steps = l_.rungs[static_cast<size_t>(t.target_rung)].steps;
  const int64_t last_steps = l_.rungs.back().steps;
  std::vector<std::string> a = {o_.executable,
                                "run",
                                l_.sweep_file,
                                "--run-dir",
                                trial_run_dir(dir_, t),
                                "--quiet",
                                "--force",
                                "--ranks",
                                std::to_string(pool_.per_trial)};
  if (!place(slot).include.empty()) a.insert(a.end(), {"--include", place(slot).include});
  auto set = [&](const std::string& kv) {
    a.push_back("--set");
    a.push_back(kv);
  };
  for (const auto& s : o_.sets) set(s);
  for (const auto& [k, v] : t.params) set(set_argument(k, v));
  set("train.steps=" + std::to_string(last_steps));
  set("schedule.stop_at_step=" + std::to_string(rung_steps < last_steps ? rung_steps : 0));
  if (deadline_ > 0) {
    a.push_back("--time-limit");
    a.push_back(std::to_string(std::max<int64_t>(1, static_cast<int64_t>(deadline_ - unix_now_s()))) + "s");
  }
  if (f_.base.train.threads == 0) {
    // Trials side by side share the cores: each rank a fixed share (no per-trial tuning).
    const int64_t cores = std::max<long>(1, sysconf(_SC_NPROCESSORS_ONLN));
    set("train.threads=" + std::to_string(std::max<int64_t>(1, cores / pool_.busiest_node_ranks)));
  }
  return a;
}

bool SweepLoop::decide() {
  const std::string before = l_.to_json().dump();
  const SearchDecisions d = gtrain::decide(l_.rungs, l_.results(), l_.mode);
  for (size_t i = 0; i < l_.trials.size(); ++i) {
    TrialRecord& t = l_.trials[i];
    if (t.state == TrialState::failed || t.state == TrialState::running) continue;
    switch (d.fate[i]) {
      case TrialFate::promote:
        if (t.target_rung == d.rung[i]) {
          t.target_rung = d.rung[i] + 1;
          l_.promotions.push_back({t.id, t.target_rung});
          say(t.name() + " promoted to rung " + std::to_string(t.target_rung) + " (" +
              std::to_string(l_.rungs[static_cast<size_t>(t.target_rung)].steps) + " steps)");
        }
        t.state = TrialState::paused;
        break;
      case TrialFate::stop:
        t.state = TrialState::stopped;
        break;
      case TrialFate::done:
        t.state = TrialState::done;
        break;
      case TrialFate::run:
      case TrialFate::wait:
        break;
    }
  }
  l_.best = best_trial(l_.results(), l_.mode);
  l_.finished = d.finished;
  return l_.to_json().dump() != before;
}

void SweepLoop::start_free_slots() {
  std::vector<bool> busy(static_cast<size_t>(pool_.slots), false);
  for (const auto& [pid, r] : running_) busy[static_cast<size_t>(r.slot)] = true;
  const SearchDecisions d = gtrain::decide(l_.rungs, l_.results(), l_.mode);
  // Work in a fixed order: promotions, the highest rung first, then new trials by number.
  std::vector<size_t> order;
  for (size_t i = 0; i < l_.trials.size(); ++i) {
    const auto& t = l_.trials[i];
    const bool ready = (d.fate[i] == TrialFate::promote || d.fate[i] == TrialFate::run) &&
                       t.state != TrialState::running && t.state != TrialState::failed;
    if (ready && (!retry_after_.count(i) || retry_after_[i] <= unix_now_s())) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return l_.trials[a].target_rung > l_.trials[b].target_rung; });
  size_t next = 0;
  for (int64_t s = 0; s < pool_.slots && next < order.size(); ++s) {
    if (busy[static_cast<size_t>(s)]) continue;
    TrialRecord& t = l_.trials[order[next]];
    const pid_t pid = spawn(trial_argv(t, s), trial_log_path(dir_, t), place(s).devices);
    running_[pid] = {order[next++], s, unix_now_s()};
    retry_after_.erase(running_[pid].trial);
    t.state = TrialState::running;
    ++t.runs;
    say(t.name() + " runs to step " + std::to_string(l_.rungs[static_cast<size_t>(t.target_rung)].steps) + " on " +
        place(s).where);
  }
  if (next > 0) write_sweep_ledger(dir_, l_);
}

void SweepLoop::reap(pid_t pid, int status) {
  const Running r = running_.at(pid);
  running_.erase(pid);
  TrialRecord& t = l_.trials[r.trial];
  const double wall = unix_now_s() - r.start_unix;
  t.rank_seconds += wall * static_cast<double>(pool_.per_trial);
  const std::string run_dir = trial_run_dir(dir_, t);
  // The part of this run outside its training steps: start-up, resume and save (the pause's cost).
  double productive = 0;
  for (const auto& s : read_stage_records(run_dir)) {
    if (s.start >= r.start_unix - 1.0) productive += s.productive_s;
  }
  t.pause_rank_seconds += std::max(0.0, wall - productive) * static_cast<double>(pool_.per_trial);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  const int64_t steps = l_.rungs[static_cast<size_t>(t.target_rung)].steps;
  t.state = TrialState::paused;
  if (code == 4) {  // its run directory still locked by a run that is ending: again shortly
    retry_after_[r.trial] = unix_now_s() + 1.0;
    --t.runs;
    return;
  }
  if (code == 0 || code == 3) {
    const auto v = read_metric(run_dir, l_.metric, steps);
    if (v && std::isfinite(*v)) {
      t.results[static_cast<size_t>(t.target_rung)] = *v;
      t.steps = steps;
      say(t.name() + " at step " + std::to_string(steps) + ": " + l_.metric + " " + strf("%.6g", *v));
      return;
    }
    if (v) {
      t.failure = "diverged: " + l_.metric + " " + strf("%g", *v) + " at step " + std::to_string(steps);
    } else if (code == 3) {
      return;  // stopped before its rung (a stop request, its time limit): paused, runs again
    } else {
      t.failure = "the run ended (exit code " + std::to_string(code) + ") without " + l_.metric + " at step " +
                  std::to_string(steps);
    }
  } else if (code == 2 && deadline_ > 0 &&
             failure_cause(trial_log_path(dir_, t), code).find("deadline") != std::string::npos) {
    return;  // too little time left for a step and a save: paused, runs in the next stage
  } else {
    t.failure = failure_cause(trial_log_path(dir_, t), code);
  }
  t.state = TrialState::failed;
  ++l_.failures;
  say(t.name() + " failed: " + t.failure);
}

void SweepLoop::ask_trials_to_stop() {
  stopping_ = true;
  for (const auto& [pid, r] : running_) ::kill(pid, SIGUSR1);  // each saves at its next step and exits 3
}

int SweepLoop::run() {
  for (auto& t : l_.trials) {
    if (t.state == TrialState::running) t.state = TrialState::paused;  // caught running: runs again from its checkpoint
  }
  decide();
  write_sweep_ledger(dir_, l_);
  for (;;) {
    if (g_stop_signal && !stopping_) {
      say(std::string("stop requested (") + strsignal(g_stop_signal) + "): the running trials save and pause");
      ask_trials_to_stop();
    }
    const bool too_many = f_.sweep.max_failures > 0 && l_.failures >= f_.sweep.max_failures;
    if (too_many && l_.stop_reason.empty()) {
      l_.stop_reason = std::to_string(l_.failures) +
                       " trials failed (sweep.max_failures = " + std::to_string(f_.sweep.max_failures) + ")";
      say(l_.stop_reason + ": no new trial starts");
      write_sweep_ledger(dir_, l_);
    }
    const bool out_of_time = past_start_lead();
    if (!stopping_ && !too_many && !l_.finished && !out_of_time) start_free_slots();
    if (running_.empty() && (l_.finished || stopping_ || too_many || out_of_time)) {
      if (out_of_time && !l_.finished) say("time limit: the sweep pauses here; run the same command to continue");
      break;
    }
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0 && running_.count(pid)) {
      reap(pid, status);
      decide();
      write_sweep_ledger(dir_, l_);
      continue;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  write_sweep_ledger(dir_, l_);
  if (l_.finished) return 0;
  return stopping_ || past_start_lead() ? kExitResumable : kExitFailure;
}

// The ledger already in `dir` must be this sweep's: the same file and the same trials.
void check_same_sweep(const SweepLedger& have, const SweepLedger& fresh, const std::string& dir) {
  const std::string path = sweep_ledger_path(dir);
  if (have.sweep_file != fresh.sweep_file) {
    throw ConfigError(path + ": this directory holds the sweep of " + have.sweep_file + ", not " + fresh.sweep_file,
                      "give this sweep a directory of its own (--dir)");
  }
  bool same = have.method == fresh.method && have.trials.size() == fresh.trials.size() &&
              have.rungs.size() == fresh.rungs.size();
  for (size_t i = 0; same && i < have.trials.size(); ++i) same = have.trials[i].params == fresh.trials[i].params;
  for (size_t i = 0; same && i < have.rungs.size(); ++i)
    same = have.rungs[i].steps == fresh.rungs[i].steps && have.rungs[i].size == fresh.rungs[i].size;
  if (!same) {
    throw ConfigError(path + ": the sweep file's [search] changed since this sweep started (other trials or rungs)",
                      "restore the file, or start the changed search in a new directory (--dir)");
  }
}

}  // namespace

int64_t ranks_per_trial(int64_t gpus_per_trial, int64_t pool, const std::function<bool(int64_t)>& fits) {
  if (gpus_per_trial > 0) return gpus_per_trial;
  if (!fits) return 1;
  for (int64_t n = 1; n <= std::max<int64_t>(1, pool); n *= 2) {
    if (fits(n)) return n;
  }
  return 0;
}

std::string sweep_directory(const SweepRunOptions& o, const std::map<std::string, std::string>& env) {
  if (!o.dir.empty()) return o.dir;
  return resolve_run_dir(load_job_config(o.sweep_file, o.sets, env), o.sweep_file, "");
}

int run_sweep(const SweepRunOptions& o, const std::map<std::string, std::string>& env) {
  // Stop requests are kept from the first moment (a batch script's USR1 may come while the file is read).
  g_stop_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = note_stop_signal;
  for (int sig : {SIGTERM, SIGINT, SIGUSR1}) ::sigaction(sig, &sa, nullptr);
  SweepFile f = load_sweep_file(o.sweep_file, o.sets, env);
  const std::string dir = sweep_directory(o, env);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw ConfigError(dir + ": cannot create the sweep directory (" + ec.message() + ")");
  const auto lock = RunLock::acquire(dir, dir);  // one sweep a directory (BusyError, exit 4)
  SweepLedger fresh = new_ledger(f);
  auto have = read_sweep_ledger(dir);
  if (have) check_same_sweep(*have, fresh, dir);
  Pool pool = make_pool(o, f, env);
  SweepRunOptions opts = o;
  if (opts.executable.empty()) opts.executable = fs::read_symlink("/proc/self/exe").string();
  SweepLoop loop(opts, std::move(f), dir, pool, have ? std::move(*have) : std::move(fresh));
  if (o.time_limit_s > 0) loop.set_deadline(unix_now_s() + o.time_limit_s);
  return loop.run();
}

}  // namespace gtrain
