// chain.cpp: chain.json and the chain's transitions.
#include "launcher/chain.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>
#include <type_traits>

#include <nlohmann/json.hpp>

#include "launcher/batch_script.h"
#include "launcher/submit_command.h"
#include "runtime/core/errors.h"
#include "runtime/core/schedule.h"

namespace fs = std::filesystem;

namespace gtrain {
namespace {

nlohmann::json to_json(const Chain& c) {
  nlohmann::json st = nlohmann::json::array();
  for (const auto& s : c.stages) {
    st.push_back({{"index", s.index},
                  {"gpus", s.gpus},
                  {"nodes", s.nodes},
                  {"script", s.script},
                  {"submit_argv", s.submit_argv},
                  {"begin", s.begin},
                  {"job", s.job},
                  {"state", s.state},
                  {"exit", s.exit}});
  }
  nlohmann::json windows = nlohmann::json::array();
  for (const auto& w : c.windows) windows.push_back({{"days", w.days}, {"hours", w.hours}, {"max_gpus", w.max_gpus}});
  return {{"scheduler", c.scheduler},
          {"auto_stages", c.auto_stages},
          {"max_auto_stages", c.max_auto_stages},
          {"state", c.state},
          {"reason", c.reason},
          {"stages", st},
          {"windows", windows},
          {"gpus_from_windows", c.gpus_from_windows},
          {"launcher", c.launcher},
          {"cpus_per_gpu", c.cpus_per_gpu}};
}

// Key `key` of the object `obj` (`path` names it in messages), `fallback` when absent; a ConfigError
// naming the file and the key when it holds another type.
template <class T>
T field(const nlohmann::json& obj, const std::string& key, T fallback, const std::string& where,
        const std::string& path) {
  auto it = obj.find(key);
  if (it == obj.end()) return fallback;
  const auto& v = *it;
  const char* expected = nullptr;
  if constexpr (std::is_same_v<T, std::string>) {
    if (!v.is_string()) expected = "a string";
  } else if constexpr (std::is_same_v<T, bool>) {
    if (!v.is_boolean()) expected = "true or false";
  } else if constexpr (std::is_same_v<T, int>) {
    if (!v.is_number_integer()) expected = "an integer";
  } else {
    bool ok = v.is_array();
    for (const auto& x : v) ok = ok && x.is_string();
    if (!ok) expected = "an array of strings";
  }
  if (expected) {
    throw ConfigError(where + ": key '" + path + key + "' must be " + expected + ", got " + std::string(v.type_name()));
  }
  return v.get<T>();
}

Chain from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) {
    throw ConfigError(where + ": must be a JSON object (as gtrain submit writes it), got " +
                      std::string(j.type_name()));
  }
  Chain c;
  c.scheduler = field(j, "scheduler", c.scheduler, where, "");
  c.auto_stages = field(j, "auto_stages", false, where, "");
  c.max_auto_stages = field(j, "max_auto_stages", c.max_auto_stages, where, "");
  c.state = field(j, "state", c.state, where, "");
  c.reason = field(j, "reason", std::string(), where, "");
  c.gpus_from_windows = field(j, "gpus_from_windows", false, where, "");
  c.launcher = field(j, "launcher", c.launcher, where, "");
  c.cpus_per_gpu = field(j, "cpus_per_gpu", 0, where, "");
  const auto windows = j.find("windows");
  if (windows != j.end() && !windows->is_array()) {
    throw ConfigError(where + ": key 'windows' must be an array, got " + std::string(windows->type_name()));
  }
  for (size_t i = 0; windows != j.end() && i < windows->size(); ++i) {
    const auto& w = (*windows)[i];
    const std::string at = "windows[" + std::to_string(i) + "]";
    if (!w.is_object())
      throw ConfigError(where + ": key '" + at + "' must be an object, got " + std::string(w.type_name()));
    WindowConfig x;
    x.days = field(w, "days", x.days, where, at + ".");
    x.hours = field(w, "hours", x.hours, where, at + ".");
    x.max_gpus = field(w, "max_gpus", static_cast<int>(x.max_gpus), where, at + ".");
    parse_window(x, where + ": " + at);  // checked now: chain-step must not fail on it later
    c.windows.push_back(x);
  }
  const auto stages = j.find("stages");
  if (stages != j.end() && !stages->is_array()) {
    throw ConfigError(where + ": key 'stages' must be an array, got " + std::string(stages->type_name()));
  }
  for (size_t i = 0; stages != j.end() && i < stages->size(); ++i) {
    const auto& s = (*stages)[i];
    const std::string at = "stages[" + std::to_string(i) + "]";
    if (!s.is_object())
      throw ConfigError(where + ": key '" + at + "' must be an object, got " + std::string(s.type_name()));
    ChainStage x;
    x.index = field(s, "index", 1, where, at + ".");
    x.gpus = field(s, "gpus", 1, where, at + ".");
    x.nodes = field(s, "nodes", 1, where, at + ".");
    x.script = field(s, "script", std::string(), where, at + ".");
    x.submit_argv = field(s, "submit_argv", std::vector<std::string>{}, where, at + ".");
    x.begin = field(s, "begin", std::string(), where, at + ".");
    x.job = field(s, "job", std::string(), where, at + ".");
    x.state = field(s, "state", std::string("planned"), where, at + ".");
    x.exit = field(s, "exit", -1, where, at + ".");
    c.stages.push_back(x);
  }
  return c;
}

// sbatch --parsable prints "JOBID" or "JOBID;CLUSTER"; qsub prints "123.server".
std::string parse_job_id(const std::string& text) {
  std::istringstream in(text);
  std::string line, last;
  while (std::getline(in, line)) {
    if (!line.empty()) last = line;
  }
  const auto semi = last.find(';');
  if (semi != std::string::npos) last = last.substr(0, semi);
  while (!last.empty() && (last.back() == ' ' || last.back() == '\r')) last.pop_back();
  return last;
}

bool is_live(const std::string& state) {
  return state == "queued";
}

// An auto stage starting at `now`: --begin at the next window's opening when `now` is in none, and
// the window's GPU cap (at least one a node) when the chain's GPU counts follow the windows; a new
// count goes on the submit command line, which overrides the script's directives. Returns a note.
std::string fit_auto_stage(const Chain& c, ChainStage& next, double now) {
  if (c.windows.empty()) return "";
  std::vector<Window> windows;
  for (const auto& w : c.windows) windows.push_back(parse_window(w, "chain.json windows"));
  // A stage stops a save lead before its window closes: when less than kClosingWindowS of it is left,
  // the next stage is for what follows the window, not for the window itself.
  constexpr double kClosingWindowS = 600;
  double start = now;
  std::string note;
  if (const double end = window_stretch_end(windows, now); end > 0 && end - now < kClosingWindowS) start = end;
  if (window_end(windows, start) == 0) start = next_window_start(windows, start);
  if (start > now) {
    next.begin = c.scheduler == "pbs" ? pbs_begin(start) : slurm_begin(start);
    note = ", begin " + next.begin + " (the next quota window)";
  }
  if (!c.gpus_from_windows || start <= 0) return note;
  int gpus = 1;
  if (const int64_t cap = window_cap(windows, start); cap > 0) gpus = static_cast<int>(cap);
  if (gpus % next.nodes != 0) gpus = std::max(next.nodes, gpus / next.nodes * next.nodes);
  if (gpus == next.gpus) return note;
  next.gpus = gpus;
  const int per_node = gpus / next.nodes;
  auto& argv = next.submit_argv;
  const std::string script = argv.back();
  argv.pop_back();
  std::vector<std::string> kept;
  for (size_t i = 0; i < argv.size(); ++i) {
    if (argv[i].rfind("--gpus-per-node=", 0) == 0 || argv[i].rfind("--ntasks-per-node=", 0) == 0) continue;
    if (argv[i] == "-l" && i + 1 < argv.size() && argv[i + 1].rfind("select=", 0) == 0) {
      ++i;
      continue;
    }
    kept.push_back(argv[i]);
  }
  if (c.scheduler == "pbs") {
    kept.insert(kept.end(), {"-l", pbs_select(next.nodes, per_node, c.cpus_per_gpu)});
  } else {
    kept.push_back("--gpus-per-node=" + std::to_string(per_node));
    kept.push_back("--ntasks-per-node=" + std::to_string(c.launcher == "srun" ? per_node : 1));
  }
  kept.push_back(script);
  argv = kept;
  return note + ", " + std::to_string(gpus) + " GPU(s) (the quota window's max_gpus)";
}

void cancel_after(Chain& c, size_t k, const CommandRunner& runner) {
  for (size_t i = k + 1; i < c.stages.size(); ++i) {
    auto& s = c.stages[i];
    if (!is_live(s.state)) {
      if (s.state == "planned") s.state = "skipped";
      continue;
    }
    // A stage the scheduler would not cancel stays queued (its script exits at once: the chain ended),
    // unless the scheduler no longer knows it.
    if (run_merged(runner, {c.scheduler == "pbs" ? "qdel" : "scancel", s.job}).rc == 0)
      s.state = "cancelled";
    else if (job_gone(c.scheduler, s.job, runner))
      s.state = "ended";
  }
}

}  // namespace

std::string chain_path(const std::string& run_dir) {
  return (fs::path(run_dir) / "chain.json").string();
}
bool chain_exists(const std::string& run_dir) {
  return fs::exists(chain_path(run_dir));
}

Chain read_chain(const std::string& run_dir) {
  std::ifstream f(chain_path(run_dir));
  if (!f) throw ConfigError(chain_path(run_dir) + ": no chain (was this run submitted with gtrain submit?)");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(chain_path(run_dir) + ": not valid JSON (" + std::string(e.what()) + ")");
  }
  return from_json(j, chain_path(run_dir));
}

void write_chain(const std::string& run_dir, const Chain& c) {
  const std::string path = chain_path(run_dir), tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << to_json(c).dump(2) << "\n";
    if (!f) throw Error(tmp + ": cannot write");
  }
  fs::rename(tmp, path);
}

CommandOutput run_merged(const CommandRunner& runner, const std::vector<std::string>& argv) {
  // CommandRunner returns stdout only when the command succeeds: wrap it in bash so stderr is
  // merged and the exit code is printed last, whatever happens.
  std::vector<std::string> wrapped = {"bash", "-c", "\"$@\" 2>&1; echo \"gtrain-rc=$?\"", "gtrain"};
  wrapped.insert(wrapped.end(), argv.begin(), argv.end());
  CommandOutput r;
  auto out = runner(wrapped);
  if (!out) {
    r.text = argv.empty() ? "" : argv[0] + ": could not be run";
    return r;
  }
  const auto pos = out->rfind("gtrain-rc=");
  if (pos == std::string::npos) {
    r.text = *out;
    return r;
  }
  r.text = out->substr(0, pos);
  r.rc = std::atoi(out->c_str() + pos + 10);
  return r;
}

bool job_gone(const std::string& scheduler, const std::string& job, const CommandRunner& runner) {
  if (job.empty()) return false;
  auto said = [](const CommandOutput& r, std::initializer_list<const char*> phrases) {
    for (const char* p : phrases)
      if (r.text.find(p) != std::string::npos) return true;
    return false;
  };
  if (scheduler == "pbs") {
    const CommandOutput r = run_merged(runner, {"qstat", job});
    return r.rc != 0 && said(r, {"Unknown Job Id", "Job has finished"});
  }
  const CommandOutput r = run_merged(runner, {"squeue", "-h", "-j", job, "-o", "%T"});
  if (r.rc == 0) return r.text.find_first_not_of(" \n\r\t") == std::string::npos;  // listed by no state
  return said(r, {"Invalid job id"});
}

std::string pbs_output_path(const std::string& run_dir, int index) {
  return (fs::path(run_dir) / ("pbs-stage-" + std::to_string(index) + ".out")).string();
}

std::vector<std::string> stage_submit_argv(const Chain& c, size_t k, const std::string& after_job) {
  const auto& s = c.stages.at(k);
  std::vector<std::string> argv = s.submit_argv;
  const bool pbs = c.scheduler == "pbs";
  // The script is the last argument; options go before it.
  std::vector<std::string> opts;
  if (!after_job.empty()) {
    if (pbs)
      opts = {"-W", "depend=afterany:" + after_job};
    else
      opts = {"--dependency=afterany:" + after_job};
  }
  if (!s.begin.empty()) {
    if (pbs)
      opts.insert(opts.end(), {"-a", s.begin});
    else
      opts.push_back("--begin=" + s.begin);
  }
  // The whole environment goes with the stage, as on Slurm (--export=ALL): the GTRAIN_<SECTION>_<KEY>
  // overrides submit checked the plan with, PATH and LD_LIBRARY_PATH among them.
  if (pbs)
    opts.insert(opts.end(), {"-V", "-v", "GTRAIN_STAGE=" + std::to_string(s.index)});
  else
    opts.push_back("--export=ALL,GTRAIN_STAGE=" + std::to_string(s.index));
  argv.insert(argv.end() - 1, opts.begin(), opts.end());
  return argv;
}

CommandOutput submit_stage(Chain& c, size_t k, const std::string& after_job, const CommandRunner& runner) {
  auto& s = c.stages.at(k);
  CommandOutput r = run_merged(runner, stage_submit_argv(c, k, after_job));
  if (r.rc == 0) {
    s.job = parse_job_id(r.text);
    s.state = "queued";
  }
  return r;
}

std::string chain_step(const std::string& run_dir, int stage, int exit_code, const std::string& job,
                       const CommandRunner& runner, double now_unix) {
  const ChainLock lock(run_dir);
  Chain c = read_chain(run_dir);
  size_t k = c.stages.size();
  for (size_t i = 0; i < c.stages.size(); ++i) {
    if (c.stages[i].index == stage) k = i;
  }
  if (k == c.stages.size()) throw ConfigError(chain_path(run_dir) + ": no stage " + std::to_string(stage));
  auto& s = c.stages[k];
  // PBS may name one job "123.server" in qsub's answer and "123.server.example.org" in PBS_JOBID.
  const auto id_of = [](const std::string& j) { return j.substr(0, j.find('.')); };
  if (!job.empty() && !s.job.empty() && id_of(job) != id_of(s.job)) {
    // A job of an earlier chain in this run directory (requeued, or still saving when that chain was
    // cancelled and a new one submitted): this chain's stage is another job, which reports itself.
    return "job " + job + " is not in this run directory's chain (its stage " + std::to_string(stage) + " is job " +
           s.job + "); chain.json unchanged";
  }
  if (!job.empty()) s.job = job;
  s.exit = exit_code;
  std::string what;
  if (c.state != "running") {
    // gtrain cancel ran, or the chain had ended (a stage Slurm requeued runs again after it): the
    // stage's result is recorded, and nothing more is submitted.
    const bool cancelled = c.state == "cancelled";
    const std::string after = cancelled ? "gtrain cancel" : "the chain ended (" + c.state + ")";
    // A stage gtrain cancel --now ended outright exits with whatever the kill left (143, mpirun's 205).
    s.state = exit_code == 0 ? "completed" : exit_code == 3 ? "resumable" : cancelled ? "cancelled" : "failed";
    if (exit_code == 0) {
      c.state = "completed";
      c.reason = "training complete after stage " + std::to_string(stage);
    }
    cancel_after(c, k, runner);
    what = exit_code == 0
               ? c.reason
               : "stage " + std::to_string(stage) + " ended (exit " + std::to_string(exit_code) + ") after " + after +
                     "; nothing more is submitted" + (exit_code == 3 ? " (resume with gtrain submit again)" : "");
    write_chain(run_dir, c);
    return what;
  }
  if (exit_code == 0) {
    s.state = "completed";
    c.state = "completed";
    c.reason = "training complete after stage " + std::to_string(stage);
    cancel_after(c, k, runner);
    what = c.reason;
  } else if (exit_code == 3) {
    s.state = "resumable";
    if (k + 1 < c.stages.size()) {
      what = "stage " + std::to_string(stage) + " saved; stage " + std::to_string(c.stages[k + 1].index) + " continues";
    } else if (c.auto_stages && static_cast<int>(c.stages.size()) < c.max_auto_stages) {
      ChainStage next = s;
      next.index = s.index + 1;
      next.job.clear();
      next.begin.clear();
      next.exit = -1;
      next.state = "planned";
      if (c.scheduler == "pbs") {
        // Each stage its own log (qsub -o has no job-id pattern).
        for (size_t i = 0; i + 1 < next.submit_argv.size(); ++i) {
          if (next.submit_argv[i] == "-o") next.submit_argv[i + 1] = pbs_output_path(run_dir, next.index);
        }
      }
      const std::string fitted = fit_auto_stage(c, next, now_unix > 0 ? now_unix : unix_now());
      c.stages.push_back(next);
      const CommandOutput r = submit_stage(c, c.stages.size() - 1, c.stages[k].job, runner);
      if (r.rc != 0) {
        c.stages.back().state = "failed";
        c.state = "failed";
        c.reason = "could not submit stage " + std::to_string(next.index) + ": " + r.text;
      }
      what = r.rc == 0 ? "stage " + std::to_string(stage) + " saved; submitted stage " + std::to_string(next.index) +
                             " as job " + c.stages.back().job + fitted
                       : c.reason;
    } else {
      c.state = "stopped";
      c.reason = "training not complete: all " + std::to_string(c.stages.size()) +
                 " stages used (resume with gtrain submit again)";
      what = c.reason;
    }
  } else {
    s.state = "failed";
    c.state = "failed";
    c.reason = "stage " + std::to_string(stage) + " failed with exit code " + std::to_string(exit_code) +
               (exit_code == 2 ? " (bad input)" : "") + "; the rest of the chain is cancelled";
    cancel_after(c, k, runner);
    what = c.reason;
  }
  write_chain(run_dir, c);
  return what;
}

ChainLock::ChainLock(const std::string& run_dir) {
  const std::string path = (fs::path(run_dir) / ".chain.lock").string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error(path + ": cannot open the chain's lock file: " + std::strerror(errno));
  for (int waited_ms = 0; ::flock(fd_, LOCK_EX | LOCK_NB) != 0; waited_ms += 100) {
    if (waited_ms >= 300000) {
      ::close(fd_);
      throw Error(path + ": another gtrain (submit, cancel or a stage's chain-step) has held the chain for 5 minutes");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

ChainLock::~ChainLock() {
  release();
}

void ChainLock::release() {
  if (fd_ < 0) return;
  ::flock(fd_, LOCK_UN);
  ::close(fd_);
  fd_ = -1;
}

std::optional<std::map<std::string, std::string>> active_jobs(const Chain& c, const CommandRunner& runner) {
  std::vector<std::string> jobs;
  for (const auto& s : c.stages) {
    if (!s.job.empty()) jobs.push_back(s.job);
  }
  std::map<std::string, std::string> out;
  if (jobs.empty()) return out;
  if (c.scheduler == "pbs") {
    for (const auto& job : jobs) {
      const CommandOutput r = run_merged(runner, {"qstat", "-f", job});
      if (r.rc != 0) {
        if (r.text.find("Unknown Job Id") != std::string::npos || r.text.find("Job has finished") != std::string::npos)
          continue;
        return std::nullopt;
      }
      const auto at = r.text.find("job_state = ");
      if (at == std::string::npos) return std::nullopt;
      const std::string state = r.text.substr(at + 12, 1);
      if (state != "F" && state != "X") out[job] = state;  // finished, expired
    }
    return out;
  }
  std::string ids;
  for (const auto& job : jobs) ids += (ids.empty() ? "" : ",") + job;
  const CommandOutput r = run_merged(runner, {"squeue", "-h", "-j", ids, "-o", "%i %T"});
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
    if (fields >> id >> state && !kEnded.count(state)) out[id] = state;
  }
  return out;
}

CancelResult cancel_chain(const std::string& run_dir, const CommandRunner& runner, std::ostream& out, bool now,
                          const CancelRetry& retry) {
  struct Signalled {
    int index;
    std::string job;
    std::vector<std::string> argv;
  };
  std::vector<Signalled> signalled;
  CancelResult n;
  ChainLock lock(run_dir);
  Chain c = read_chain(run_dir);
  const bool pbs = c.scheduler == "pbs";
  const std::string was_state = c.state, was_reason = c.reason;
  if (c.state == "running") {
    // Marked first: a stage whose job starts from now on sees it and does not train (the scheduler
    // drops a signal sent before the job's script runs); put back below if a cancel fails.
    c.state = "cancelled";
    c.reason = "cancelled by gtrain cancel";
    write_chain(run_dir, c);
  }
  // Which jobs still run or wait; without an answer, every stage chain.json has as queued.
  const auto active = active_jobs(c, runner);
  for (auto& s : c.stages) {
    if (s.job.empty()) {
      if (s.state == "planned") s.state = "skipped";
      continue;
    }
    std::string state;  // the scheduler's, "" when it no longer knows the job or cannot be asked
    if (active) {
      const auto it = active->find(s.job);
      if (it == active->end() && s.state != "queued") continue;  // ended, and its end is recorded
      if (it != active->end()) state = it->second;
    } else if (!is_live(s.state)) {
      continue;
    }
    const std::string head = "stage " + std::to_string(s.index) + " job " + s.job + ": ";
    if (active && state.empty()) {
      // Its script never reported (killed outright, node lost): nothing left to cancel.
      out << head << "already ended without reporting\n";
      s.state = "ended";
      continue;
    }
    const bool running = state == (pbs ? "R" : "RUNNING");
    std::vector<std::string> argv = {pbs ? "qdel" : "scancel", s.job};
    if (running && !now)
      argv = pbs ? std::vector<std::string>{"qsig", "-s", "USR1", s.job}
                 : std::vector<std::string>{"scancel", "--batch", "--signal=USR1", s.job};
    const CommandOutput r = run_merged(runner, argv);
    std::string why = r.text;
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    if (r.rc == 0 && running && !now) {
      out << head << "running: asked to save and stop (USR1); it exits 3 once its checkpoint is committed "
          << "(gtrain cancel --now cancels it outright instead)\n";
      ++n.signalled;  // stays queued in chain.json until its chain-step reports
      signalled.push_back({s.index, s.job, argv});
    } else if (r.rc == 0 && running) {
      // What the scheduler does with a running job it cancels: TERM to every process of it, then KILL
      // after its grace time. The ranks take the TERM as a stop request: they save if the save ends
      // within that time (the stage then records "resumable"), else the last committed checkpoint stays.
      out << head << "running: cancelled (" << argv[0] << "): the scheduler sends it TERM, then KILL after "
          << (pbs ? "kill_delay" : "KillWait") << " (often 30 s); the ranks save if they can before that, else "
          << "the last committed checkpoint stays\n";
      s.state = "cancelled";
      ++n.cancelled;
    } else if (r.rc == 0) {
      out << head << "cancelled\n";
      s.state = "cancelled";
      ++n.cancelled;
    } else if (job_gone(c.scheduler, s.job, runner)) {
      out << head << "already ended without reporting (" << why << ")\n";
      if (s.state == "queued") s.state = "ended";
    } else {
      out << head << (running && !now ? "could not be signalled: " : "cancel failed: ") << why << "\n";
      ++n.failed;  // still queued or running as far as we know: the chain stays running
    }
  }
  // A chain that had ended is marked cancelled too when something of it still ran or waited (a stage
  // Slurm requeued).
  if (n.failed == 0 && (was_state == "running" || (was_state != "completed" && n.cancelled + n.signalled > 0))) {
    c.state = "cancelled";
    c.reason = "cancelled by gtrain cancel";
  } else if (n.failed > 0) {
    c.state = was_state;
    c.reason = was_reason;
  }
  write_chain(run_dir, c);
  if (signalled.empty() || retry.wait_s <= 0) return n;
  // The signal may have come before the stage's script or gtrain run was up (just allocated): repeat it
  // until the stage acknowledges it (its script writes .stop-ack-K), reports, or its job is gone.
  lock.release();
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  std::vector<int> sends(signalled.size(), 1);
  std::vector<std::string> confirmed(signalled.size());
  for (;;) {
    const Chain now_chain = read_chain(run_dir);
    const auto live = active_jobs(now_chain, runner);
    size_t open = 0;
    for (size_t i = 0; i < signalled.size(); ++i) {
      if (!confirmed[i].empty()) continue;
      const auto& g = signalled[i];
      std::string ack;
      std::ifstream(fs::path(run_dir) / (".stop-ack-" + std::to_string(g.index))) >> ack;
      const auto it = std::find_if(now_chain.stages.begin(), now_chain.stages.end(),
                                   [&](const ChainStage& x) { return x.index == g.index; });
      if (!ack.empty() && ack == g.job)
        confirmed[i] = "its script acknowledged the request";
      else if (it != now_chain.stages.end() && it->state != "queued")
        confirmed[i] = "it reported (" + it->state + ")";
      else if (live && !live->count(g.job))
        confirmed[i] = "its job has ended";
      else
        ++open;
    }
    if (open == 0 || elapsed() >= retry.wait_s) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(static_cast<int>(retry.every_s * 1000)));
    for (size_t i = 0; i < signalled.size(); ++i) {
      if (confirmed[i].empty()) {
        run_merged(runner, signalled[i].argv);
        ++sends[i];
      }
    }
  }
  for (size_t i = 0; i < signalled.size(); ++i) {
    const auto& g = signalled[i];
    out << "stage " << g.index << " job " << g.job << ": "
        << (confirmed[i].empty() ? "no confirmation after " + std::to_string(sends[i]) + " request(s) in " +
                                       std::to_string(static_cast<int>(retry.wait_s)) +
                                       " s; it stops at the start of gtrain run if not before (chain.json says "
                                       "cancelled)"
                                 : "stopping: " + confirmed[i] + " after " + std::to_string(sends[i]) + " request(s)")
        << "\n";
  }
  return n;
}

void print_chain_status(const std::string& run_dir, const CommandRunner& runner, std::ostream& out) {
  const Chain c = read_chain(run_dir);
  std::map<std::string, std::string> live;
  std::string ids;
  for (const auto& s : c.stages) {
    if (!s.job.empty()) ids += (ids.empty() ? "" : ",") + s.job;
  }
  if (!ids.empty() && c.scheduler == "slurm") {
    // sacct knows finished jobs (when accounting exists); squeue the pending and running ones.
    if (auto acct = runner({"sacct", "-n", "-X", "-P", "-j", ids, "-o", "JobID,State"})) {
      std::istringstream in(*acct);
      std::string line;
      while (std::getline(in, line)) {
        const auto bar = line.find('|');
        if (bar != std::string::npos) live[line.substr(0, bar)] = line.substr(bar + 1);
      }
    }
    std::optional<std::string> q = runner({"squeue", "-h", "-j", ids, "-o", "%i %T %r"});
    if (q) {
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
      for (const auto& s : c.stages) {
        if (s.state == "queued" && !s.job.empty() && !live.count(s.job))
          live[s.job] = "gone (neither queued nor running; its script did not report)";
      }
    }
  }
  out << "  chain      " << c.scheduler << ", " << c.state << (c.reason.empty() ? "" : ": " + c.reason) << "\n";
  for (const auto& s : c.stages) {
    auto it = live.find(s.job);
    // chain.json knows a submitted stage only as queued until its script reports; the scheduler
    // knows when it runs.
    const bool running = s.state == "queued" && it != live.end() && it->second.rfind("RUNNING", 0) == 0;
    out << "    stage " << s.index << "  job " << (s.job.empty() ? "-" : s.job) << "  " << s.gpus << " GPU(s) on "
        << s.nodes << " node(s)  " << (running ? "running" : s.state);
    if (s.exit >= 0) out << " (exit " << s.exit << ")";
    if (it != live.end()) out << "  scheduler: " << it->second;
    if (!s.begin.empty()) out << "  begin " << s.begin;
    out << "\n";
  }
}

}  // namespace gtrain
