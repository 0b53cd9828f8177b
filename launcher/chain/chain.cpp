// chain.cpp: chain.json and the chain's transitions.
#include "launcher/chain/chain.h"

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

#include "launcher/base/text_util.h"
#include "runtime/core/config/job_config.h"
#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/core/run_dir/run_files.h"
#include "runtime/core/schedule.h"

namespace fs = std::filesystem;

namespace gtrain {
namespace {

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

bool is_live(StageState state) {
  return state == StageState::queued;
}

// An auto stage starting at `now`: --begin at the next window's opening when `now` is in none, and
// the window's GPU cap (at least one a node) when the chain's GPU counts follow the windows; a new
// count goes on the submit command line, which overrides the script's directives. Sets `start` to
// when the stage can start (its window's opening, or `now`). Returns a note.
std::string fit_auto_stage(const Chain& c, ChainStage& next, double now, double& start_out) {
  start_out = now;
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
  if (start > now) start_out = start;
  if (start > now) {
    next.begin = chain_backend(c).begin_time(start);
    note = ", begin " + next.begin + " (the next quota window)";
  }
  if (!c.gpus_from_windows || start <= 0) return note;
  int gpus = 1;
  if (const int64_t cap = window_cap(windows, start); cap > 0) gpus = static_cast<int>(cap);
  if (gpus % next.nodes != 0) gpus = std::max(next.nodes, gpus / next.nodes * next.nodes);
  if (gpus == next.gpus) return note;
  next.gpus = gpus;
  chain_backend(c).resize_submit_argv(next.submit_argv, next.nodes, gpus / next.nodes, c.launcher, c.cpus_per_gpu);
  return note + ", " + std::to_string(gpus) + " GPU(s) (the quota window's max_gpus)";
}

// An auto stage of a chain whose sizes are open (--gpus auto): the size with the earliest predicted
// finish, from fresh start estimates, for the quota window it starts in at `start` (its cap; no start
// before it). Returns a note.
std::string size_auto_stage(const Chain& c, ChainStage& next, const std::string& run_dir, const CommandRunner& runner,
                            double now, double start) {
  SizingContext ctx;
  try {
    ctx.cfg = load_job_config(c.config, c.sets, process_environment());
  } catch (const Error& e) {
    return std::string(", ") + std::to_string(next.gpus) + " GPU(s) kept (the config does not load: " + e.what() + ")";
  }
  ctx.run_dir = run_dir;
  ctx.nodes = next.nodes;
  ctx.limit_s = c.limit_s > 0 ? c.limit_s : 3600;
  ctx.lead_s = c.lead_s;
  if (!c.windows.empty()) {
    std::vector<Window> windows;
    for (const auto& w : c.windows) windows.push_back(parse_window(w, "chain.json windows"));
    ctx.cap = window_cap(windows, std::max(now, start));
  }
  ctx.begin = start > now ? start : 0;
  ctx.backend = &chain_backend(c);
  ctx.submit_argv = next.submit_argv;
  ctx.runner = runner;
  ctx.now = now;
  const SizingDecision d = decide_stage_size(c.sizing, ctx);
  next.decision = d.to_json();
  if (!d.unreachable.empty())
    return ", " + std::to_string(next.gpus) + " GPU(s) kept (the scheduler could not be reached to size it)";
  if (d.chosen == 0) return ", " + std::to_string(next.gpus) + " GPU(s) kept (no candidate size could run now)";
  if (d.chosen != next.gpus) {
    next.gpus = d.chosen;
    chain_backend(c).resize_submit_argv(next.submit_argv, next.nodes, d.chosen / next.nodes, c.launcher,
                                        c.cpus_per_gpu);
  }
  return ", " + std::to_string(d.chosen) + " GPU(s) (the earliest predicted finish of " +
         std::to_string(d.rows.size()) + " sizes)";
}

void cancel_after(Chain& c, size_t k, const CommandRunner& runner) {
  for (size_t i = k + 1; i < c.stages.size(); ++i) {
    auto& s = c.stages[i];
    if (!is_live(s.state)) {
      if (s.state == StageState::planned) s.state = StageState::skipped;
      continue;
    }
    // A stage the scheduler would not cancel stays queued (its script exits at once: the chain ended),
    // unless the scheduler no longer knows it.
    if (run_merged(runner, chain_backend(c).cancel_argv(s.job)).rc == 0)
      s.state = StageState::cancelled;
    else if (chain_backend(c).job_gone(s.job, runner))
      s.state = StageState::ended;
  }
}

}  // namespace

const SchedulerBackend& chain_backend(const Chain& c) {
  return scheduler_backend(c.scheduler);
}

Chain read_chain(const std::string& run_dir) {
  std::vector<SchedulerKind> submitters;
  for (const SchedulerBackend* b : scheduler_backends())
    if (b->can_submit()) submitters.push_back(b->kind());
  return read_chain_file(run_dir, submitters);
}

std::vector<std::string> stage_submit_argv(const Chain& c, size_t k, const std::string& after_job) {
  const auto& s = c.stages.at(k);
  const SchedulerBackend& backend = chain_backend(c);
  std::vector<std::string> argv = s.submit_argv;
  // The script is the last argument; options go before it.
  std::vector<std::string> opts;
  if (!after_job.empty()) opts = backend.dependency_args(after_job);
  if (!s.begin.empty()) {
    const auto begin = backend.begin_args(s.begin);
    opts.insert(opts.end(), begin.begin(), begin.end());
  }
  const auto env = backend.stage_env_args(s.index);
  opts.insert(opts.end(), env.begin(), env.end());
  argv.insert(argv.end() - 1, opts.begin(), opts.end());
  return argv;
}

CommandOutput submit_stage(Chain& c, size_t k, const std::string& after_job, const CommandRunner& runner) {
  auto& s = c.stages.at(k);
  CommandOutput r = run_merged(runner, stage_submit_argv(c, k, after_job));
  if (r.rc == 0) {
    s.job = parse_job_id(r.text);
    s.submitted = unix_now();
    s.state = StageState::queued;
  }
  return r;
}

namespace {

// chain-step for a chain that no longer runs (gtrain cancel ran, or the chain had ended: a stage Slurm
// requeued runs again after it): the stage's result is recorded, and nothing more is submitted.
std::string step_stopped_chain(Chain& c, size_t k, int exit_code, const CommandRunner& runner) {
  auto& s = c.stages[k];
  const int stage = s.index;
  const bool cancelled = c.state == ChainState::cancelled;
  const std::string after = cancelled ? "gtrain cancel" : "the chain ended (" + std::string(state_name(c.state)) + ")";
  // A stage gtrain cancel --now ended outright exits with whatever the kill left (143, mpirun's 205).
  s.state = exit_code == 0   ? StageState::completed
            : exit_code == 3 ? StageState::resumable
            : cancelled      ? StageState::cancelled
                             : StageState::failed;
  if (exit_code == 0) {
    c.state = ChainState::completed;
    c.reason = "training complete after stage " + std::to_string(stage);
  }
  cancel_after(c, k, runner);
  return exit_code == 0
             ? c.reason
             : "stage " + std::to_string(stage) + " ended (exit " + std::to_string(exit_code) + ") after " + after +
                   "; nothing more is submitted" + (exit_code == 3 ? " (resume with gtrain submit again)" : "");
}

// chain-step for a stage that saved (exit 3): the next stage continues, or --stages auto submits one.
std::string step_resumable(Chain& c, size_t k, const std::string& run_dir, const CommandRunner& runner,
                           double now_unix) {
  auto& s = c.stages[k];
  const int stage = s.index;
  s.state = StageState::resumable;
  if (k + 1 < c.stages.size()) {
    return "stage " + std::to_string(stage) + " saved; stage " + std::to_string(c.stages[k + 1].index) + " continues";
  }
  if (!c.auto_stages || static_cast<int>(c.stages.size()) >= c.max_auto_stages) {
    c.state = ChainState::stopped;
    c.reason = "training not complete: all " + std::to_string(c.stages.size()) +
               " stages used (resume with gtrain submit again)";
    return c.reason;
  }
  ChainStage next = s;
  next.index = s.index + 1;
  next.job.clear();
  next.begin.clear();
  next.exit = -1;
  next.state = StageState::planned;
  chain_backend(c).renumber_submit_argv(next.submit_argv, run_dir, next.index);
  const double now = now_unix > 0 ? now_unix : unix_now();
  double start = now;
  std::string fitted = fit_auto_stage(c, next, now, start);
  if (c.sizing.active()) fitted += size_auto_stage(c, next, run_dir, runner, now, start);
  c.stages.push_back(next);
  const CommandOutput r = submit_stage(c, c.stages.size() - 1, c.stages[k].job, runner);
  if (r.rc != 0) {
    c.stages.back().state = StageState::failed;
    c.state = ChainState::failed;
    c.reason = "could not submit stage " + std::to_string(next.index) + ": " + r.text;
  }
  return r.rc == 0 ? "stage " + std::to_string(stage) + " saved; submitted stage " + std::to_string(next.index) +
                         " as job " + c.stages.back().job + fitted
                   : c.reason;
}

}  // namespace

std::string chain_step(const std::string& run_dir, int stage, int exit_code, const std::string& job,
                       const CommandRunner& runner, double now_unix) {
  const ChainLock lock(run_dir);
  Chain c = read_chain(run_dir);
  size_t k = c.stages.size();
  for (size_t i = 0; i < c.stages.size(); ++i) {
    if (c.stages[i].index == stage) k = i;
  }
  if (k == c.stages.size()) {
    throw ConfigError(str(chain_path(run_dir), ": no stage ", stage),
                      str("gtrain status ", run_dir, " lists the stages"));
  }
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
  if (c.state != ChainState::running) {
    what = step_stopped_chain(c, k, exit_code, runner);
  } else if (exit_code == 0) {
    s.state = StageState::completed;
    c.state = ChainState::completed;
    c.reason = "training complete after stage " + std::to_string(stage);
    cancel_after(c, k, runner);
    what = c.reason;
  } else if (exit_code == 3) {
    what = step_resumable(c, k, run_dir, runner, now_unix);
  } else {
    s.state = StageState::failed;
    c.state = ChainState::failed;
    c.reason = "stage " + std::to_string(stage) + " failed with exit code " + std::to_string(exit_code) +
               (exit_code == 2 ? " (bad input)" : "") + "; the rest of the chain is cancelled";
    cancel_after(c, k, runner);
    what = c.reason;
  }
  write_chain(run_dir, c);
  return what;
}

ChainLock::ChainLock(const std::string& run_dir) {
  const std::string path = RunDir(run_dir).path(RunFile::chain_lock);
  fd_.reset(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!fd_) {
    throw Error(str(path, ": cannot open the chain's lock file: ", std::strerror(errno)),
                "check that the run directory exists and is writable");
  }
  for (int waited_ms = 0; ::flock(fd_.get(), LOCK_EX | LOCK_NB) != 0; waited_ms += 100) {
    if (waited_ms >= 300000) {
      fd_.reset();
      throw Error(path + ": another gtrain (submit, cancel or a stage's chain-step) has held the chain for 5 minutes",
                  "retry once that gtrain has finished");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

ChainLock::~ChainLock() {
  release();
}

void ChainLock::release() {
  if (!fd_) return;
  ::flock(fd_.get(), LOCK_UN);
  fd_.reset();
}

std::optional<std::map<std::string, JobState>> active_jobs(const Chain& c, const CommandRunner& runner) {
  std::vector<std::string> jobs;
  for (const auto& s : c.stages) {
    if (!s.job.empty()) jobs.push_back(s.job);
  }
  if (jobs.empty()) return std::map<std::string, JobState>{};
  return chain_backend(c).job_states(jobs, runner);
}

namespace {

// A running stage asked to save and stop, whose request cancel_chain may repeat.
struct Signalled {
  int index;
  std::string job;
  std::vector<std::string> argv;
};

// Cancels or signals one stage of the chain (see cancel_chain), printing its line.
void cancel_stage(const Chain& c, ChainStage& s, const std::optional<std::map<std::string, JobState>>& active,
                  const CommandRunner& runner, std::ostream& out, bool now, CancelResult& n,
                  std::vector<Signalled>& signalled) {
  const SchedulerBackend& backend = chain_backend(c);
  std::optional<JobState> state;  // the scheduler's; none when it no longer knows the job or cannot be asked
  if (active) {
    const auto it = active->find(s.job);
    if (it == active->end() && s.state != StageState::queued) return;  // ended, and its end is recorded
    if (it != active->end()) state = it->second;
  } else if (!is_live(s.state)) {
    return;
  }
  const std::string head = "stage " + std::to_string(s.index) + " job " + s.job + ": ";
  if (active && !state) {
    // Its script never reported (killed outright, node lost): nothing left to cancel.
    out << head << "already ended without reporting\n";
    s.state = StageState::ended;
    return;
  }
  const bool running = state && state->phase == JobPhase::running;
  const std::vector<std::string> argv = running && !now ? backend.signal_argv(s.job) : backend.cancel_argv(s.job);
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
        << backend.kill_grace_name() << " (often 30 s); the ranks save if they can before that, else "
        << "the last committed checkpoint stays\n";
    s.state = StageState::cancelled;
    ++n.cancelled;
  } else if (r.rc == 0) {
    out << head << "cancelled\n";
    s.state = StageState::cancelled;
    ++n.cancelled;
  } else if (backend.job_gone(s.job, runner)) {
    out << head << "already ended without reporting (" << why << ")\n";
    if (s.state == StageState::queued) s.state = StageState::ended;
  } else {
    out << head << (running && !now ? "could not be signalled: " : "cancel failed: ") << why << "\n";
    ++n.failed;  // still queued or running as far as we know: the chain stays running
  }
}

// The signal may have come before the stage's script or gtrain run was up (just allocated): repeats
// it until the stage acknowledges it (its script writes .stop-ack-K), reports, or its job is gone.
void confirm_signalled(const std::string& run_dir, const std::vector<Signalled>& signalled, const CommandRunner& runner,
                       std::ostream& out, const CancelRetry& retry) {
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
      else if (it != now_chain.stages.end() && it->state != StageState::queued)
        confirmed[i] = "it reported (" + std::string(state_name(it->state)) + ")";
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
}

}  // namespace

CancelResult cancel_chain(const std::string& run_dir, const CommandRunner& runner, std::ostream& out, bool now,
                          const CancelRetry& retry) {
  std::vector<Signalled> signalled;
  CancelResult n;
  ChainLock lock(run_dir);
  Chain c = read_chain(run_dir);
  const ChainState was_state = c.state;
  const std::string was_reason = c.reason;
  if (c.state == ChainState::running) {
    // Marked first: a stage whose job starts from now on sees it and does not train (the scheduler
    // drops a signal sent before the job's script runs); put back below if a cancel fails.
    c.state = ChainState::cancelled;
    c.reason = "cancelled by gtrain cancel";
    write_chain(run_dir, c);
  }
  // Which jobs still run or wait; without an answer, every stage chain.json has as queued.
  const auto active = active_jobs(c, runner);
  for (auto& s : c.stages) {
    if (s.job.empty()) {
      if (s.state == StageState::planned) s.state = StageState::skipped;
      continue;
    }
    cancel_stage(c, s, active, runner, out, now, n, signalled);
  }
  // A chain that had ended is marked cancelled too when something of it still ran or waited (a stage
  // Slurm requeued).
  if (n.failed == 0 &&
      (was_state == ChainState::running || (was_state != ChainState::completed && n.cancelled + n.signalled > 0))) {
    c.state = ChainState::cancelled;
    c.reason = "cancelled by gtrain cancel";
  } else if (n.failed > 0) {
    c.state = was_state;
    c.reason = was_reason;
  }
  write_chain(run_dir, c);
  if (signalled.empty() || retry.wait_s <= 0) return n;
  lock.release();
  confirm_signalled(run_dir, signalled, runner, out, retry);
  return n;
}

void print_chain_status(const std::string& run_dir, const CommandRunner& runner, std::ostream& out) {
  const Chain c = read_chain(run_dir);
  std::vector<std::string> jobs;
  std::set<std::string> queued;
  for (const auto& s : c.stages) {
    if (s.job.empty()) continue;
    jobs.push_back(s.job);
    if (s.state == StageState::queued) queued.insert(s.job);
  }
  const std::map<std::string, std::string> live = chain_backend(c).status_details(jobs, queued, runner);
  out << "  chain      " << c.scheduler << ", " << c.state << (c.reason.empty() ? "" : ": " + c.reason) << "\n";
  for (const auto& s : c.stages) {
    auto it = live.find(s.job);
    // chain.json knows a submitted stage only as queued until its script reports; the scheduler
    // knows when it runs.
    const bool running = s.state == StageState::queued && it != live.end() && it->second.rfind("RUNNING", 0) == 0;
    out << "    stage " << s.index << "  job " << (s.job.empty() ? "-" : s.job) << "  " << s.gpus << " GPU(s) on "
        << (s.nodes_min > 0 ? std::to_string(s.nodes_min) + "-" : std::string()) << s.nodes << " node(s)  "
        << (running ? std::string("running") : std::string(state_name(s.state)));
    if (s.exit >= 0) out << " (exit " << s.exit << ")";
    if (it != live.end()) out << "  scheduler: " << it->second;
    if (!s.begin.empty()) out << "  begin " << s.begin;
    out << "\n";
  }
  // The latest size decision (--gpus auto): its table.
  for (auto s = c.stages.rbegin(); s != c.stages.rend(); ++s) {
    if (!s->decision.is_object()) continue;
    out << "  stage " << s->index << "'s size, chosen at " << text::local_time(s->decision.value("at", 0.0), "%H:%M:%S")
        << ":\n"
        << render_sizing(s->decision);
    break;
  }
}

}  // namespace gtrain
