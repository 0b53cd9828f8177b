// launch.cpp: rank detection, the mpirun command, and mpirun run as a child that stop signals reach as requests.
#include "launcher/launch/launch.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>

#include "launcher/launch/mpirun_output.h"
#include "runtime/core/errors.h"
#include "runtime/core/schedule.h"
#include "runtime/core/unique_fd.h"

namespace gtrain {
namespace {

int int_of(const std::map<std::string, std::string>& env, const char* key, int fallback) {
  auto it = env.find(key);
  if (it == env.end() || it->second.empty()) return fallback;
  char* end = nullptr;
  long v = std::strtol(it->second.c_str(), &end, 10);
  return (end && *end == '\0') ? static_cast<int>(v) : fallback;
}

}  // namespace

RankEnvironment detect_rank_environment(const std::map<std::string, std::string>& env) {
  RankEnvironment r;
  if (env.count("OMPI_COMM_WORLD_SIZE")) {
    r.launcher = "mpirun";
    r.size = int_of(env, "OMPI_COMM_WORLD_SIZE", 1);
    r.rank = int_of(env, "OMPI_COMM_WORLD_RANK", 0);
    r.local_rank = int_of(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0);
    r.local_size = int_of(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1);
  } else if (env.count("SLURM_STEP_ID") && env.count("SLURM_PROCID") && int_of(env, "SLURM_NTASKS", 1) > 1) {
    // One task of an srun step (a batch script itself has no step id).
    r.launcher = "srun";
    r.size = int_of(env, "SLURM_NTASKS", 1);
    r.rank = int_of(env, "SLURM_PROCID", 0);
    r.local_rank = int_of(env, "SLURM_LOCALID", 0);
    r.local_size = int_of(env, "SLURM_NTASKS_PER_NODE", int_of(env, "SLURM_STEP_NUM_TASKS", r.size));
    r.pmix = env.count("PMIX_RANK") > 0;
  }
  r.launched = r.size > 1;
  return r;
}

void require_mpi_wireup(const RankEnvironment& r) {
  if (r.launcher != "srun" || r.pmix) return;
  throw ConfigError("started as task " + std::to_string(r.rank) + " of " + std::to_string(r.size) +
                        " by srun without PMIx, which Open MPI ranks need to find each other: use srun --mpi=pmix",
                    "Slurm's default (MpiDefault=none) gives none; or run gtrain run once in the allocation and "
                    "it starts the ranks with mpirun");
}

std::vector<std::string> mpirun_argv(const LaunchSpec& s) {
  if (s.ranks < 1) throw ConfigError("--ranks must be >= 1 (got " + std::to_string(s.ranks) + ")");
  std::vector<std::string> argv = {"mpirun", "-np", std::to_string(s.ranks), "--bind-to", "none"};
  if (s.oversubscribe) argv.push_back("--oversubscribe");
  if (s.hosts.size() > 1 || (s.pin_hosts && !s.hosts.empty())) {
    std::ofstream f(s.hostfile);
    for (const auto& h : s.hosts) f << h.host << " slots=" << h.slots << "\n";
    if (!f) {
      throw ConfigError(s.hostfile + ": cannot write the mpirun hostfile",
                        "check that the disk is not full and the run directory is writable");
    }
    argv.insert(argv.end(), {"--hostfile", s.hostfile});
    for (const auto& name : s.forward_env) argv.insert(argv.end(), {"-x", name});
  }
  argv.push_back(s.executable);
  argv.insert(argv.end(), s.args.begin(), s.args.end());
  return argv;
}

namespace {

// Open MPI's run-as-root permission, the shared-memory transport on one host, and one core's share
// of BLAS / OpenMP threads per rank unless set.
void set_mpirun_environment(const LaunchSpec& spec) {
  if (geteuid() == 0) {
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  }
  // One host: the ranks talk through shared memory, which Open MPI's ob1 layer (vader) does; without
  // this, MPI_Init first probes the network layers (pml cm: libfabric, PSM2), which cost 0.2 s of a
  // 0.34 s two-rank start-up here. Multi-host launches keep Open MPI's own choice (UCX, cm, ...).
  if (spec.hosts.size() <= 1) setenv("OMPI_MCA_pml", "ob1", 0);
  // BLAS / OpenMP pools are sized when a rank loads them: one core's share per rank, unless set.
  const long cores = sysconf(_SC_NPROCESSORS_ONLN);
  const std::string per_rank = std::to_string(std::max<long>(1, cores / std::max(1, spec.ranks)));
  setenv("OPENBLAS_NUM_THREADS", per_rank.c_str(), 0);
  setenv("OMP_NUM_THREADS", per_rank.c_str(), 0);
}

// In the forked child: the signals back to mpirun's share, its own process group, /dev/null as
// input and the pipes as output, then exec. Never returns.
[[noreturn]] void exec_mpirun_child(std::vector<char*>& cargv, pid_t parent, const Pipe& err, const Pipe& out) {
  for (int sig : stop_signal_candidates()) std::signal(sig, SIG_DFL);
  // TERM, INT and HUP stay blocked in mpirun (a blocked signal stays so across exec): a scheduler
  // signals every process of a job (scancel, preemption), and mpirun would answer its TERM by
  // signalling the ranks again and killing them a second later, in the middle of their save. gtrain
  // decides what each signal does (MpirunSignals below); mpirun ends when its ranks do.
  sigset_t to_mpirun;
  sigemptyset(&to_mpirun);
  sigaddset(&to_mpirun, SIGUSR1);
  sigaddset(&to_mpirun, SIGUSR2);
  pthread_sigmask(SIG_UNBLOCK, &to_mpirun, nullptr);
  prctl(PR_SET_PDEATHSIG, SIGKILL);                // gtrain killed outright (kill -9): the job goes with it
  if (::getppid() != parent) _exit(kExitFailure);  // it died before the line above
  // Its own process group: a terminal's Ctrl-C (INT to the foreground group) reaches gtrain only,
  // which turns it into the stop request; mpirun would abort on it. No terminal input for it either.
  ::setpgid(0, 0);
  const int devnull = ::open("/dev/null", O_RDONLY);
  if (devnull >= 0) ::dup2(devnull, 0);
  if (err.write) ::dup2(err.write.get(), 2);
  if (out.write) ::dup2(out.write.get(), 1);
  execvp("mpirun", cargv.data());
  dprintf(2, "gtrain: config error: cannot start mpirun: %s; hint: install openmpi-bin, or run with --ranks 1\n",
          std::strerror(errno));
  _exit(kExitUsage);
}

// LaunchSpec::direct, in the forked child: the worker, its signals back, its own process group
// (Ctrl-C reaches gtrain, which turns it into the stop request), no terminal input, this console
// as its output. Never returns.
[[noreturn]] void exec_direct_child(std::vector<char*>& cargv, pid_t parent) {
  for (int sig : stop_signal_candidates()) std::signal(sig, SIG_DFL);
  sigset_t all;
  sigemptyset(&all);
  for (int sig : stop_signal_candidates()) sigaddset(&all, sig);
  pthread_sigmask(SIG_UNBLOCK, &all, nullptr);  // a scheduler's TERM to the job's processes: a stop request
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) _exit(kExitFailure);
  ::setpgid(0, 0);
  const int devnull = ::open("/dev/null", O_RDONLY);
  if (devnull >= 0) ::dup2(devnull, 0);
  ::execv(cargv[0], cargv.data());
  dprintf(2, "gtrain: error: cannot start %s: %s; hint: reinstall gtrain (make install) or rebuild it\n", cargv[0],
          std::strerror(errno));
  _exit(kExitFailure);
}

// What each signal that reaches gtrain while mpirun runs does: the first stop signal becomes the
// stop file, which rank 0 reads after each step and all ranks agree on, so every rank saves and
// exits 3, whatever the ranks were doing when it came; TERM or INT again aborts them.
class MpirunSignals {
 public:
  MpirunSignals(const LaunchSpec& spec, pid_t child) : spec_(spec), child_(child) {}
  int aborted_by() const { return aborted_by_; }
  bool stop_requested() const { return requests_ > 0; }
  double requested_unix() const { return requested_unix_; }
  // Ends the job at once, whatever the ranks are doing (a rank that hangs or is stopped: SIGKILL
  // works on stopped processes too).
  void kill_ranks() { end_ranks(SIGKILL); }

  void handle(int sig) {
    const char* name = strsignal(sig);
    const auto& stops = spec_.stop_signals;
    if (std::find(stops.begin(), stops.end(), sig) == stops.end()) return not_a_stop_signal(sig, name);
    const bool interactive = sig == SIGTERM || sig == SIGINT;
    if (requests_ > 0 && !(interactive && first_interactive_)) {
      // A scheduler's cancel signals every process of the job, and the batch script passes its own
      // TERM on as USR1: TERM after a USR1 request (or the reverse) is that same request. Only TERM or
      // INT after a TERM or INT is a second request.
      std::fprintf(stderr, "gtrain: %s after the stop request: the ranks are already saving\n", name);
      return;
    }
    if (++requests_ == 1) return first_request(sig, name, interactive);
    if (!interactive) return;
    if (!spec_.outcome_file.empty() && std::ifstream(spec_.outcome_file).good()) {
      std::fprintf(stderr, "gtrain: %s again: the stage's checkpoint is already committed; the ranks are exiting\n",
                   name);
      return;
    }
    std::fprintf(stderr, "gtrain: %s again: %s without saving (the last committed checkpoint stays valid)\n", name,
                 spec_.direct ? "exiting" : "aborting the ranks");
    // mpirun would only pass a TERM on, which the ranks take as one more stop request (they finish
    // the step and save): this host's ranks are killed outright, and mpirun, seeing them die, ends
    // the job's ranks elsewhere. A save cut short leaves no committed checkpoint behind (saves are
    // renamed into place when complete).
    end_ranks(SIGKILL);
    aborted_by_ = sig;
  }

 private:
  // Not a stop signal: what it would have done to mpirun itself (TERM, INT end the job).
  void not_a_stop_signal(int sig, const char* name) {
    if (sig == SIGHUP) {
      // The terminal or ssh session is gone: training goes on, its output in the run directory.
      if (!spec_.quiet) std::fprintf(stderr, "gtrain: %s: the console is gone; the ranks train on\n", name);
    } else if (sig == SIGUSR1 || sig == SIGUSR2) {
      ::kill(child_, sig);  // mpirun passes these on to the ranks
    } else {
      end_ranks(sig);  // the ranks have no handler for it and end
      aborted_by_ = sig;
    }
  }

  void first_request(int sig, const char* name, bool interactive) {
    first_interactive_ = interactive;
    requested_unix_ = unix_now();
    std::ofstream f(spec_.stop_file, std::ios::trunc);
    f << "signal " << sig << "\n";
    if (!spec_.quiet) {
      if (spec_.direct)  // one rank: as the rank itself would say it (runtime/core/schedule.cpp)
        std::fprintf(stderr, "gtrain: %s: finishing the step, saving, then exit 3%s\n", name,
                     interactive ? " (TERM or INT again exits without saving)" : "");
      else
        std::fprintf(stderr, "gtrain: %s: every rank finishes its step, saves and exits 3%s\n", name,
                     interactive ? " (TERM or INT again aborts the ranks without saving)" : "");
    }
  }

  // Ends the job by signalling this host's ranks (mpirun has TERM blocked; seeing them end, it ends
  // the job's ranks elsewhere), or mpirun itself while it has started none: there is nothing to lose.
  void end_ranks(int sig) {
    if (spec_.direct) {
      ::kill(child_, sig);  // the rank itself
      return;
    }
    const std::vector<pid_t> ranks = child_processes(child_);
    for (pid_t rank : ranks) ::kill(rank, sig);
    if (ranks.empty()) ::kill(child_, SIGKILL);
  }

  const LaunchSpec& spec_;
  pid_t child_;
  int requests_ = 0, aborted_by_ = 0;
  bool first_interactive_ = false;  // the first request came by TERM or INT
  double requested_unix_ = 0;       // when the first request came
};

// The once-a-second look at the running ranks: spec.watch's answer (a hung rank, named) ends them
// all into `watch_report`; after a stop request, spec.after_stop's (a step that cannot end and save
// within the save lead) ends them without a save into `abandoned`.
void watch_ranks(const LaunchSpec& spec, MpirunSignals& signals, std::string& watch_report, std::string& abandoned) {
  if (spec.watch) watch_report = spec.watch();
  if (!watch_report.empty()) {
    std::fprintf(stderr, "gtrain: error: %s; stopping every rank\n", watch_report.c_str());
    std::fflush(stderr);
    signals.kill_ranks();
  } else if (spec.after_stop && signals.stop_requested() && signals.aborted_by() == 0) {
    abandoned = spec.after_stop(signals.requested_unix());
    if (!abandoned.empty()) {
      std::fprintf(stderr,
                   "gtrain: %s: ending the ranks without a save; the last committed checkpoint stays (run the "
                   "same command to resume from it)\n",
                   abandoned.c_str());
      std::fflush(stderr);
      signals.kill_ranks();
    }
  }
}

}  // namespace

MpirunResult run_mpirun(const LaunchSpec& spec) {
  std::vector<std::string> argv;
  if (spec.direct) {
    argv.push_back(spec.executable);
    argv.insert(argv.end(), spec.args.begin(), spec.args.end());
  } else {
    argv = mpirun_argv(spec);
    set_mpirun_environment(spec);
  }
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);

  // USR1, USR2, TERM, INT and HUP wait, blocked, for sigtimedwait below; the child takes them back.
  sigset_t handled;
  sigemptyset(&handled);
  for (int sig : stop_signal_candidates()) sigaddset(&handled, sig);
  sigset_t before;
  pthread_sigmask(SIG_BLOCK, &handled, &before);
  std::fflush(stdout);
  std::fflush(stderr);
  // mpirun's stderr comes through a pipe, which drops Open MPI's MPI_ABORT banner after a rank's error
  // and shows an error every rank reports once; its stdout through another. gtrain drains both
  // whatever becomes of its own console (`| head`, a tee that dies): mpirun never sees a closed pipe.
  Pipe err_pipe = spec.direct ? Pipe{} : make_pipe(), out_pipe = spec.direct ? Pipe{} : make_pipe();
  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  if (child < 0) {
    const int fork_errno = errno;
    pthread_sigmask(SIG_SETMASK, &before, nullptr);
    throw Error(std::string("cannot start mpirun: fork failed: ") + std::strerror(fork_errno),
                "check this user's process and memory limits (ulimit -u, ulimit -v)");
  }
  if (child == 0) {
    if (spec.direct) exec_direct_child(cargv, parent);
    exec_mpirun_child(cargv, parent, err_pipe, out_pipe);
  }
  std::unique_ptr<MpirunOutputForwarder> forward_stderr, forward_stdout;
  if (err_pipe.read) {
    err_pipe.write.reset();
    forward_stderr = std::make_unique<MpirunOutputForwarder>(err_pipe.read.release());
  }
  if (out_pipe.read) {
    out_pipe.write.reset();
    forward_stdout = std::make_unique<MpirunOutputForwarder>(out_pipe.read.release(), 1, /*filtered=*/false);
  }
  MpirunSignals signals(spec, child);
  std::string watch_report, abandoned;
  auto next_watch = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  for (;;) {
    int status = 0;
    const pid_t done = ::waitpid(child, &status, WNOHANG);
    if (done == child) {
      // All of mpirun's output out before gtrain's last lines.
      if (forward_stdout) forward_stdout->stop();
      if (forward_stderr) forward_stderr->stop();
      pthread_sigmask(SIG_SETMASK, &before, nullptr);
      if (!spec.stop_file.empty()) ::unlink(spec.stop_file.c_str());
      const int aborted_by = signals.aborted_by();
      // Direct: the one rank is the child; mpirun names a dead rank in its report.
      const int dead_rank =
          spec.direct ? (WIFSIGNALED(status) ? 0 : -1) : (forward_stderr ? forward_stderr->noticed_rank() : -1);
      std::string dead_host = forward_stderr ? forward_stderr->noticed_host() : "";
      if (spec.direct && dead_rank == 0) {
        char host[256] = {0};
        if (::gethostname(host, sizeof(host) - 1) == 0) dead_host = host;
      }
      if (aborted_by)  // as if the signal ended this process
        return {128 + aborted_by, aborted_by, "", true, dead_rank, dead_host, ""};
      return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status),
              0,
              watch_report,
              signals.stop_requested(),
              dead_rank,
              dead_host,
              abandoned};
    }
    if (done < 0 && errno != EINTR) {
      pthread_sigmask(SIG_SETMASK, &before, nullptr);
      throw Error(std::string("waiting for mpirun failed: ") + std::strerror(errno));
    }
    struct timespec tick {
      0, 100 * 1000 * 1000
    };
    const int sig = sigtimedwait(&handled, nullptr, &tick);
    if (sig > 0) signals.handle(sig);
    if (watch_report.empty() && abandoned.empty() && std::chrono::steady_clock::now() >= next_watch) {
      next_watch = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      watch_ranks(spec, signals, watch_report, abandoned);
    }
  }
}

std::vector<pid_t> child_processes(pid_t pid) {
  std::vector<pid_t> out;
  DIR* proc = ::opendir("/proc");
  if (!proc) return out;
  while (const dirent* e = ::readdir(proc)) {
    char* end = nullptr;
    const long id = std::strtol(e->d_name, &end, 10);
    if (id <= 0 || !end || *end != '\0') continue;
    std::ifstream stat(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    // pid (comm) state ppid ...: comm may hold spaces and parentheses, so read after the last ')'.
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    long ppid = 0;
    if (std::sscanf(line.c_str() + close + 1, " %c %ld", &state, &ppid) == 2 && ppid == pid)
      out.push_back(static_cast<pid_t>(id));
  }
  ::closedir(proc);
  return out;
}

std::string self_executable() {
  char buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "gtrain";
  buf[n] = '\0';
  return buf;
}

}  // namespace gtrain
