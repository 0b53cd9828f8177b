// submit_command.cpp: `gtrain submit` and `gtrain cancel`.
#include "launcher/commands/submit_command.h"

#include "launcher/base/text_util.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "launcher/base/run_lock.h"
#include "launcher/chain/window_calendar.h"
#include "launcher/commands/plan_command.h"
#include "launcher/commands/submit_calendar.h"
#include "launcher/commands/submit_shaping.h"
#include "launcher/launch/run_launch.h"
#include "launcher/scheduler/scheduler_limits.h"
#include "launcher/sweep/search_space.h"
#include "runtime/core/checkpoint_dirs.h"
#include "runtime/core/config/job_config.h"
#include "runtime/core/data_paths.h"
#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/core/run_dir/run_files.h"
#include "runtime/core/run_dir/stage_records.h"

namespace fs = std::filesystem;

namespace gtrain {
namespace {

std::vector<int> parse_counts(const std::string& text, const std::string& what) {
  std::vector<int> out;
  if (!text.empty() && text.back() == ',')  // getline would drop the empty last entry
    throw ConfigError(what + " '" + text + "': expected a positive count or a comma-separated list of them");
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!std::regex_match(item, std::regex("[0-9]{1,6}")) || std::stoi(item) < 1)
      throw ConfigError(what + " '" + text + "': expected a positive count or a comma-separated list of them");
    out.push_back(std::stoi(item));
  }
  if (out.empty())
    throw ConfigError(what + " is empty", "give a positive count such as 4, or one per stage such as 4,8");
  return out;
}

void check_name(const std::string& value, const std::string& what) {
  if (!value.empty() && !std::regex_match(value, std::regex("[A-Za-z0-9_.+-]+")))
    throw ConfigError(what + " '" + value + "': only letters, digits and _ . + - are allowed");
}

// The measured save time: the largest save_s of any stage so far (5 s before the first stage).
double measured_save_seconds(const std::string& run_dir) {
  double best = 0;
  for (const auto& r : read_stage_records(run_dir)) best = std::max(best, r.save_s);
  return best > 0 ? best : 5.0;
}

// The largest GPU count below the stage's that the scheduler's test submission accepts, and its node
// count (the stage's when it divides the count, else 1); {0, 0} when none is, or the scheduler has
// no test submission.
std::pair<int, int> largest_accepted(const SchedulerBackend& backend, const ChainStage& s, int nodes,
                                     const CommandRunner& runner) {
  for (int g = s.gpus - 1; g >= 1; --g) {
    const int n = g % nodes == 0 ? nodes : 1;
    const auto argv = backend.test_submit_argv(s.submit_argv, n, g / n);
    if (!argv) return {0, 0};
    if (run_merged(runner, *argv).rc == 0) return {g, n};
  }
  return {0, 0};
}

// The submit command line `o` came from, with every stage at `gpus` GPUs on `nodes` nodes: what to
// run instead when the scheduler refused the job's size.
std::string resubmit_line(const SubmitOptions& o, int gpus, int nodes) {
  std::string line = "gtrain submit " + shell_quote(o.config_path);
  for (const auto& x : o.sets) line += " --set " + shell_quote(x);
  if (!o.run_dir.empty()) line += " --run-dir " + shell_quote(o.run_dir);
  if (o.scheduler != SubmitOptions().scheduler) line += " --scheduler " + o.scheduler;
  line += " --stages " + o.stages + " --gpus " + std::to_string(gpus) + " --nodes " + std::to_string(nodes) +
          " --time " + shell_quote(o.time);
  if (!o.partition.empty()) line += " --partition " + o.partition;
  if (!o.account.empty()) line += " --account " + o.account;
  if (!o.qos.empty()) line += " --qos " + o.qos;
  for (const auto& a : o.sbatch_args) line += " --sbatch-arg " + shell_quote(a);
  if (o.signal_lead_s > 0) line += " --signal-lead " + std::to_string(o.signal_lead_s);
  if (o.launcher != "mpirun") line += " --launcher " + o.launcher;
  if (o.sweep) line += " --sweep";
  if (o.cpus_per_gpu > 0) line += " --cpus-per-gpu " + std::to_string(o.cpus_per_gpu);
  return line;
}

// When a stage predicted to start at `t` (inside a window) must wait for a different window than
// the one the previous stage started in (at `prev`): that window's opening. 0 when the windows run on
// from `prev` to `t` without a gap or a change of GPU cap, so the stage just follows on afterany.
double opening_since(const std::vector<Window>& windows, double prev, double t) {
  double opening = 0, x = prev;
  for (int guard = 0; guard < 10000 && x < t; ++guard) {
    const double end = window_end(windows, x);
    if (end == 0) {  // a gap: the stage waits for the next window
      x = next_window_start(windows, x);
      if (x == 0 || x > t) break;
      opening = x;
      continue;
    }
    if (end > t || end <= x) break;
    if (window_end(windows, end) == 0 || window_cap(windows, end) != window_cap(windows, x)) opening = end;
    x = end;
  }
  return opening;
}

// Exactly what the dry run would submit, as bash lines: JOBk=$(COMMAND), stage k+1 depending on $JOBk.
std::string dry_run_commands(const Chain& chain) {
  const std::string mark = "\x01PREVIOUS\x01";
  std::string text;
  for (size_t i = 0; i < chain.stages.size(); ++i) {
    std::string line;
    for (const auto& a : stage_submit_argv(chain, i, i ? mark : "")) {
      const auto pos = a.find(mark);
      std::string word = shell_quote(a);
      if (pos != std::string::npos) {
        word = "\"" + a.substr(0, pos) + "$JOB" + std::to_string(i) + a.substr(pos + mark.size()) + "\"";
      }
      line += (line.empty() ? "" : " ") + word;
    }
    const std::string var = "JOB" + std::to_string(i + 1);
    text += "  " + var + "=$(" + line + ")";
    text += chain_backend(chain).shell_job_id_fixup(var) + "\n";
  }
  return text;
}

}  // namespace

double parse_slurm_time(const std::string& text) {
  // gtrain's one duration reader (as run --time-limit): 1h, 90m, 1h30m, and Slurm's MIN, MIN:SEC,
  // HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS (so "1-00:30" is a day and 30 minutes, "100:00:00" is 100
  // hours, and a plain number is minutes, as sbatch --time reads them). Whole seconds, rounded up.
  const double total = std::ceil(parse_duration(text, "--time", 60));
  if (total < 60) {
    throw ConfigError(str("--time '", text, "': Slurm's smallest time limit is one minute"), "give --time 1m or more");
  }
  return total;
}

static const SchedulerBackend& submit_backend(const SubmitOptions& o) {
  const SchedulerBackend* b = find_scheduler_backend(o.scheduler);
  if (b && b->can_submit()) return *b;
  std::vector<std::string> names;
  for (const SchedulerBackend* x : scheduler_backends()) {
    if (x->can_submit() && std::find(names.begin(), names.end(), x->name()) == names.end()) names.push_back(x->name());
  }
  std::string expected;
  for (size_t i = 0; i < names.size(); ++i)
    expected += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  throw ConfigError("--scheduler '" + o.scheduler + "': expected " + expected);
}

namespace {
// --nodes MIN-MAX -> {MIN, MAX}; {0, 0} for a count or a list.
std::pair<int, int> node_range(const std::string& text) {
  std::smatch m;
  if (!std::regex_match(text, m, std::regex("([0-9]{1,4})-([0-9]{1,4})"))) return {0, 0};
  const int a = std::stoi(m[1]), b = std::stoi(m[2]);
  if (a < 1 || b <= a) throw ConfigError("--nodes '" + text + "': expected a range MIN-MAX with 1 <= MIN < MAX");
  return {a, b};
}
}  // namespace

bool open_gpu_sizes(const SubmitOptions& o, int stages) {
  return o.gpus == "auto" || o.gpus.find('-') != std::string::npos ||
         (stages == 0 && o.gpus.find(',') != std::string::npos);
}

int validate_submit_options(const SubmitOptions& o) {
  const SchedulerBackend& backend = submit_backend(o);
  if (o.launcher != "mpirun" && o.launcher != "srun")
    throw ConfigError("--launcher '" + o.launcher + "': expected mpirun or srun");
  if (o.sweep && o.launcher == "srun") {
    throw ConfigError("--sweep with --launcher srun: a sweep starts each trial's ranks itself",
                      "leave --launcher at mpirun for a sweep");
  }
  backend.check_qos(o.qos);
  if (o.cpus_per_gpu < 0 || o.cpus_per_gpu > 1024)
    throw ConfigError("--cpus-per-gpu " + std::to_string(o.cpus_per_gpu) + ": expected 0 (the site's default) to 1024");
  backend.check_launcher(o.launcher);
  int stages = 0;
  if (o.stages != "auto") {
    if (!std::regex_match(o.stages, std::regex("[0-9]{1,4}")) || std::stoi(o.stages) < 1)
      throw ConfigError("--stages '" + o.stages + "': expected auto or a positive number");
    stages = std::stoi(o.stages);
  }
  const bool open = open_gpu_sizes(o, stages);
  if (o.objective != "finish" && o.objective != "gpu-hours")
    throw ConfigError("--objective '" + o.objective + "': expected finish or gpu-hours");
  if (!(o.slack >= 0 && o.slack <= 10)) throw ConfigError(str("--slack ", o.slack, ": expected 0 to 10 (0.1 = 10%)"));
  if (open) parse_gpu_candidates(o.gpus, 8);  // the form; the counts are judged when sizing
  const auto gpus = o.gpus.empty() || open ? std::vector<int>{} : parse_counts(o.gpus, "--gpus");
  const auto [nodes_min, nodes_max] = node_range(o.nodes);
  if (nodes_max > 0) {
    if (backend.kind() != SchedulerKind::slurm)
      throw ConfigError("--nodes " + o.nodes + ": " + backend.name() + " has no node-count range",
                        "give one node count");
    if (o.launcher == "srun")
      throw ConfigError("--nodes " + o.nodes +
                            " with --launcher srun: srun's task a GPU makes Slurm take the "
                            "fewest nodes of the range",
                        "use the default launcher (mpirun) with a node range");
    if (gpus.size() != 1 || gpus[0] % nodes_max != 0)
      throw ConfigError("--nodes " + o.nodes + " needs one --gpus count for " + std::to_string(nodes_max) +
                            " nodes that they divide (the GPUs a node stay fixed)",
                        "give e.g. --gpus " + std::to_string(2 * nodes_max) + " for 2 GPUs a node");
  }
  const auto nodes = nodes_max > 0 ? std::vector<int>{nodes_max} : parse_counts(o.nodes, "--nodes");
  if (open && nodes.size() > 1)
    throw ConfigError("--nodes " + o.nodes + " lists stages but --gpus " + o.gpus + " sizes each stage when submitted",
                      "give one node count");
  for (const auto* list : {&gpus, &nodes}) {
    if (list->size() > 1 && stages > 0 && static_cast<int>(list->size()) != stages)
      throw ConfigError(
          str(list == &gpus ? "--gpus" : "--nodes", " lists ", list->size(), " stages but --stages is ", o.stages),
          "give one count per stage, one count for all stages, or leave --stages out");
  }
  if (gpus.size() > 1 && nodes.size() > 1 && gpus.size() != nodes.size())
    throw ConfigError("--gpus and --nodes list different numbers of stages",
                      "give both one count per stage, or one of them a single count for all stages");
  for (size_t i = 0; i < gpus.size(); ++i) {
    const int n = nodes[nodes.size() > 1 ? i : 0];
    if (gpus[i] % n != 0)
      throw ConfigError(str("--gpus ", gpus[i], " cannot be spread evenly over ", n, " nodes"),
                        "give a GPU count that the node count divides, or change --nodes");
  }
  const double limit = parse_slurm_time(o.time);
  check_name(o.partition, "--partition");
  check_name(o.account, "--account");
  check_name(o.qos, "--qos");
  for (const auto& a : o.sbatch_args) {
    if (a.rfind("-", 0) != 0 || a.find_first_of("\n\r") != std::string::npos)
      throw ConfigError("--sbatch-arg '" + a + "': expected one option such as --constraint=a100 (no newlines)");
    backend.check_directive(a);
  }
  if (o.signal_lead_s < 0) throw ConfigError("--signal-lead must be >= 0");
  if (o.signal_lead_s >= limit)
    throw ConfigError(str("--signal-lead ", o.signal_lead_s, " s is not below --time ", o.time),
                      "lower --signal-lead or raise --time");
  if (o.config_path.empty())
    throw ConfigError("gtrain submit needs a config file", "give it first: gtrain submit CONFIG [flags]");
  return stages;
}

int signal_lead_seconds(double measured_save_s, double save_safety, double min_lead_s) {
  return static_cast<int>(std::ceil(measured_save_s * save_safety + min_lead_s + 30.0));
}

std::vector<StagePlan> plan_stages(const SubmitOptions& o, int stages, const std::vector<Window>& windows,
                                   double now_unix) {
  const auto gpus = o.gpus.empty() || open_gpu_sizes(o, stages) ? std::vector<int>{} : parse_counts(o.gpus, "--gpus");
  const auto [nodes_min, nodes_max] = node_range(o.nodes);
  const auto nodes = nodes_max > 0 ? std::vector<int>{nodes_max} : parse_counts(o.nodes, "--nodes");
  int n = stages;
  if (n == 0) n = static_cast<int>(std::max<size_t>({size_t{1}, gpus.size(), nodes.size()}));
  const double limit = parse_slurm_time(o.time);
  std::vector<StagePlan> out;
  // t: the stage's predicted start (the previous one ran its whole limit, or until its window stretch
  // closed), which picks its window. A begin time only where the stage must wait for a different
  // window: that window's opening.
  double t = now_unix, prev = now_unix;
  for (int i = 0; i < n; ++i) {
    StagePlan p;
    p.nodes = nodes[nodes.size() > 1 ? i : 0];
    p.nodes_min = nodes_min;
    if (!windows.empty()) {
      if (window_end(windows, t) == 0) {
        t = next_window_start(windows, t);
        p.begin_unix = t;
      } else if (i > 0) {
        p.begin_unix = opening_since(windows, prev, t);
      }
      prev = t;
    }
    p.start_unix = t;
    p.cap = windows.empty() ? 0 : window_cap(windows, t);
    if (!gpus.empty()) {
      p.gpus = gpus[gpus.size() > 1 ? i : 0];
    } else {
      p.gpus = p.cap > 0 ? static_cast<int>(p.cap) : 1;
      if (p.gpus % p.nodes != 0) p.gpus = std::max(p.nodes, p.gpus / p.nodes * p.nodes);
    }
    p.end_unix = t + limit;
    if (const double close = windows.empty() ? 0 : window_stretch_end(windows, t); close > t && close < p.end_unix)
      p.end_unix = close;  // gtrain run stops the stage before its window closes
    out.push_back(p);
    t = p.end_unix;
  }
  return out;
}

std::string slurm_begin(double unix_time) {
  return scheduler_backend(SchedulerKind::slurm).begin_time(unix_time);
}

std::string pbs_begin(double unix_time) {
  return scheduler_backend(SchedulerKind::pbs).begin_time(unix_time);
}

namespace {

// What gtrain run needs of the config before any stage is queued: USR1 among the stop signals, and
// the quota windows.
std::vector<Window> submit_windows(const JobConfig& cfg) {
  const auto& stops = cfg.schedule.stop_signals;
  if (std::find(stops.begin(), stops.end(), "USR1") == stops.end()) {
    std::string list;
    for (const auto& x : stops) list += (list.empty() ? "\"" : ", \"") + x + "\"";
    throw ConfigError("schedule.stop_signals = [" + list +
                          "] lacks \"USR1\", which the stage scripts send gtrain run to save before the time limit "
                          "(Slurm's --signal=B:USR1, and the scheduler's TERM forwarded as USR1)",
                      "add \"USR1\" to schedule.stop_signals");
  }
  std::vector<Window> windows;
  for (size_t i = 0; i < cfg.schedule.window.size(); ++i)
    windows.push_back(parse_window(cfg.schedule.window[i], "schedule.window[" + std::to_string(i) + "]"));
  return windows;
}

// Any job of an earlier chain the scheduler still has, whatever chain.json last heard of it (a stage
// requeued after it saved, one still saving after gtrain cancel), holds the run directory. Without
// the scheduler's answer: a stage recorded as queued, unless its job is gone (killed outright, node
// lost).
void check_no_chain_holds(const std::string& run_dir, const CommandRunner& runner) {
  if (!chain_exists(run_dir)) return;
  const Chain old = read_chain(run_dir);
  const auto active = active_jobs(old, runner);
  for (const auto& s : old.stages) {
    const bool holds = active ? active->count(s.job) > 0
                              : s.state == StageState::queued && !chain_backend(old).job_gone(s.job, runner);
    if (holds)
      throw ConfigError(run_dir + ": a chain still has stage " + std::to_string(s.index) + " (job " + s.job + ", " +
                            (active ? active->at(s.job).text : std::string("queued")) + ")",
                        "see gtrain status, or gtrain cancel it first and wait for it to end");
  }
}

// What `gtrain run` would refuse at once fails here, before anything is written: the model (an
// unknown name, a plugin that does not load), the data, and a layout for each stage's GPU count.
// Memory is not judged here: the stage's own hardware decides it.
void check_stages_runnable(const JobConfig& cfg, const std::string& run_dir, const std::vector<StagePlan>& plans,
                           const std::vector<Window>& windows, bool auto_sized) {
  const JobDescription job = describe_job(cfg);
  // Sizing a model from its shape opens no data: a typo in the token files' path would only show
  // after the queue wait. The files (or a glob's matches) must exist now.
  if (is_token_file(cfg.data.kind)) {
    expand_data_path(cfg.data.path, "data.path");
    if (!cfg.data.eval_path.empty()) expand_data_path(cfg.data.eval_path, "data.eval_path");
  }
  // The first stage starts from checkpoint.init_from unless the run has checkpoints of its own.
  if (!cfg.checkpoint.init_from.empty() &&
      committed_checkpoint_dirs(checkpoint_directory(cfg.checkpoint, run_dir)).empty())
    check_init_from(cfg.checkpoint.init_from);
  JobConfig layout = cfg;
  if (layout.parallel.memory_gb <= 0) layout.parallel.memory_gb = 1e9;
  std::set<std::pair<int, int>> checked;
  std::vector<StagePlan> sizes = plans;
  if (auto_sized) {
    // --stages auto adds stages at every window's cap: each of those sizes must have a layout too.
    for (const auto& w : windows) {
      StagePlan p = plans.back();
      p.gpus = w.max_gpus > 0 ? static_cast<int>(w.max_gpus) : 1;
      if (p.gpus % p.nodes != 0) p.gpus = std::max(p.nodes, p.gpus / p.nodes * p.nodes);
      sizes.push_back(p);
    }
  }
  for (const auto& p : plans) {
    if (p.nodes_min == 0) continue;
    StagePlan least = p;  // a node range: Slurm may start the stage on its fewest nodes
    least.gpus = p.gpus / p.nodes * p.nodes_min;
    least.nodes = p.nodes_min;
    sizes.push_back(least);
  }
  for (const auto& p : sizes) {
    if (checked.insert({p.gpus, p.nodes}).second) plan_run(layout, job.stats, p.gpus, p.gpus / p.nodes);
  }
}

// One numbering for the chain and the ledger: the chain's stages follow the stages the run directory
// has had (stages.jsonl's records, and those metrics.jsonl shows after them), so chain stage K is row K
// of gtrain status's stage table.
int first_stage_index(const std::string& run_dir) {
  const auto ledger = read_stage_records(run_dir);
  return 1 + static_cast<int>(ledger.size()) +
         static_cast<int>(metrics_stages(RunDir(run_dir).metrics(), ledger_end(ledger)).size());
}

// What every stage's script shares.
struct ScriptCommon {
  std::string run_dir, job_name;
  int lead = 0;                // the USR1 lead (signalling schedulers)
  int64_t run_time_limit = 0;  // gtrain run's --time-limit (schedulers that do not signal)
  double limit_s = 0;
};

// Writes each stage's batch script and records its submit command in the chain.
void write_stage_scripts(const SubmitOptions& o, const std::vector<StagePlan>& plans, const ScriptCommon& w,
                         Chain& chain) {
  const SchedulerBackend& backend = chain_backend(chain);
  const std::string work_dir = fs::current_path().string();
  const int first_index = first_stage_index(w.run_dir);
  for (size_t i = 0; i < plans.size(); ++i) {
    BatchStage b;
    b.gtrain = o.gtrain.empty() ? gtrain_executable() : fs::absolute(o.gtrain).string();
    b.config = fs::absolute(o.config_path).lexically_normal().string();
    b.run_dir = w.run_dir;
    b.work_dir = work_dir;
    for (const auto& s : o.sets) b.run_args.insert(b.run_args.end(), {"--set", s});
    if (o.force && !o.sweep) b.run_args.push_back("--force");
    b.sweep = o.sweep;
    if (!backend.signals_before_limit()) b.run_time_limit_s = w.run_time_limit;
    b.index = first_index + static_cast<int>(i);
    b.gpus = plans[i].gpus;
    b.nodes = plans[i].nodes;
    b.nodes_min = plans[i].nodes_min;
    // sbatch --time in Slurm's own form whatever form --time took (1h30m -> 01:30:00); PBS walltime
    // is [[HH:]MM:]SS, with no days.
    b.time = backend.time_limit_text(static_cast<int64_t>(w.limit_s));
    b.signal_lead_s = w.lead;
    b.partition = o.partition;
    b.account = plans[i].account.empty() ? o.account : plans[i].account;  // --account auto: the stage's pick
    b.qos = plans[i].qos.empty() ? o.qos : plans[i].qos;
    b.extra_directives = o.sbatch_args;
    b.launcher = o.launcher;
    b.cpus_per_gpu = o.cpus_per_gpu;
    ChainStage s;
    s.index = b.index;
    s.gpus = b.gpus;
    s.nodes = b.nodes;
    s.nodes_min = b.nodes_min;
    s.account = b.account, s.qos = b.qos, s.shaped = plans[i].shaped;
    s.script = stage_script_name(b.index, backend.script_suffix());
    const std::string script_path = (fs::path(w.run_dir) / s.script).string();
    {
      std::ofstream f(script_path);
      f << batch_script(backend, b);
      if (!f)
        throw ConfigError(script_path + ": cannot write",
                          "check that the disk is not full and the run directory is writable");
    }
    fs::permissions(script_path, fs::perms::owner_exec | fs::perms::group_exec, fs::perm_options::add);
    s.submit_argv = backend.submit_argv({w.job_name, w.run_dir, b.index, script_path});
    if (plans[i].begin_unix > 0) s.begin = backend.begin_time(plans[i].begin_unix);
    chain.stages.push_back(s);
  }
}

void print_submit_plan(const SubmitOptions& o, const Chain& chain, const ScriptCommon& w, std::ostream& out) {
  out << "gtrain submit: " << chain.stages.size()
      << (chain.auto_stages ? " stage(s), more while resumable" : " stage(s)") << ", " << o.time
      << (o.time != format_duration(static_cast<int64_t>(w.limit_s))
              ? " (" + format_duration(static_cast<int64_t>(w.limit_s)) + ")"
              : "")
      << " each, "
      << (!chain_backend(chain).signals_before_limit()
              ? "gtrain run --time-limit " + std::to_string(w.run_time_limit) +
                    "s less the script's start-up (PBS sends no early signal; it saves ahead by its measured "
                    "save time)"
              : "USR1 " + std::to_string(w.lead) + " s before the limit")
      << "; run dir " << w.run_dir << "\n"
      << (o.cpus_per_gpu > 0 ? "  " + std::to_string(o.cpus_per_gpu) + " CPU core(s) per GPU\n"
                             : "  CPU cores: the site's default (on some sites one per task, which every rank and "
                               "data worker would share); --cpus-per-gpu N requests N per GPU\n");
  for (const auto& s : chain.stages) {
    out << "  stage " << s.index << ": " << s.gpus << " GPU(s) on " << s.nodes << " node(s)"
        << (s.nodes_min > 0
                ? " at most (Slurm starts it on " + std::to_string(s.nodes_min) + "-" + std::to_string(s.nodes) +
                      " nodes, " + std::to_string(s.gpus / s.nodes) + " GPU(s) each)"
                : std::string())
        << (s.begin.empty() ? "" : ", begin " + s.begin) << (s.account.empty() ? "" : ", account " + s.account)
        << (s.qos.empty() ? "" : ", QOS " + s.qos) << ", " << s.script << "\n";
  }
}

// Stages before `i` that were queued: cancelled again, as the chain could not be completed.
void cancel_submitted(Chain& chain, size_t i, const CommandRunner& runner) {
  for (size_t j = 0; j < i; ++j) {
    if (run_merged(runner, chain_backend(chain).cancel_argv(chain.stages[j].job)).rc == 0)
      chain.stages[j].state = StageState::cancelled;
  }
}

// Stage `i` was refused: says why, and what the scheduler would accept instead.
[[noreturn]] void refused(const SubmitOptions& o, const std::map<std::string, std::string>& env, Chain& chain, size_t i,
                          const CommandOutput& r, const std::string& run_dir, const CommandRunner& runner) {
  const SchedulerBackend& backend = chain_backend(chain);
  std::ostringstream msg;
  msg << backend.submit_program() << " refused stage " << chain.stages[i].index << ": " << r.text;
  std::string hint;
  if (backend.test_submit_argv(chain.stages[i].submit_argv, 1, 1) && chain.stages[i].gpus > 1) {
    const auto [g, n] = largest_accepted(backend, chain.stages[i], chain.stages[i].nodes, runner);
    if (g > 0) {
      std::ostringstream plan;
      PlanOptions po;
      po.config_path = o.config_path;
      po.sets = o.sets;
      po.gpus = std::to_string(g);
      po.nodes = n;
      po.runnable = true;
      try {
        run_plan_command(po, env, plan);
      } catch (const Error&) {
      }
      hint = "the largest GPU count the scheduler accepts is " + std::to_string(g) + " (on " + std::to_string(n) +
             " node(s)): " + resubmit_line(o, g, n) + "; its plan:\n" + plan.str();
    } else {
      hint = "no smaller GPU count was accepted either; check the partition, account and QOS";
    }
  }
  chain.stages[i].state = StageState::refused;
  cancel_submitted(chain, i, runner);
  chain.state = ChainState::failed;
  chain.reason = msg.str();
  write_chain(run_dir, chain);
  throw ConfigError(msg.str(), hint);
}

// --gpus auto / a range / a list with --stages auto: the first stage's size from the scheduler's start
// estimates and the planner (stage_sizing.h), for the window it starts in (its cap, and no start before
// its --begin); a later stage of --stages N that starts in a window with another cap is sized for that
// window (no test submission: it starts after the stages before it). The chain keeps what it needs to
// size the stages --stages auto adds. No size that can run: each one's reason; a scheduler that
// cannot be reached: a runtime failure (exit 1).
void size_stages(const SubmitOptions& o, const JobConfig& cfg, const ScriptCommon& w, std::vector<StagePlan>& plans,
                 Chain& chain, const CommandRunner& runner, double now, std::ostream& out) {
  const StagePlan& first = plans.front();
  chain.sizing.gpus = o.gpus;
  chain.sizing.candidates = parse_gpu_candidates(o.gpus, first.cap > 0 ? static_cast<int>(first.cap) : 8 * first.nodes);
  chain.sizing.objective = o.objective;
  chain.sizing.slack = o.slack;
  chain.config = fs::absolute(o.config_path).lexically_normal().string();
  chain.sets = o.sets;
  chain.limit_s = w.limit_s;
  chain.lead_s = w.lead;
  SizingContext ctx;
  ctx.cfg = cfg;
  ctx.run_dir = w.run_dir;
  ctx.nodes = first.nodes;
  ctx.limit_s = w.limit_s;
  ctx.lead_s = w.lead;
  ctx.cap = first.cap;
  ctx.begin = first.begin_unix;
  ctx.backend = &chain_backend(chain);
  ctx.submit_argv = chain.stages.front().submit_argv;
  ctx.runner = runner;
  ctx.now = now;
  const SizingDecision d = decide_stage_size(chain.sizing, ctx);
  std::vector<SizingDecision> later_decisions;  // stages after the first, in windows with another cap
  const std::string program = chain_backend(chain).submit_program();
  if (!d.unreachable.empty())
    throw Error(str(program, " --test-only could not reach the scheduler to size stage ", chain.stages.front().index,
                    " (--gpus ", o.gpus, "); nothing was submitted. ", program, " said:\n", d.unreachable),
                "try again when it answers");
  out << "gtrain submit: sizing stage " << chain.stages.front().index << " (--gpus " << o.gpus << ", objective "
      << o.objective << "):\n"
      << render_sizing(d);
  if (d.chosen == 0) {
    std::string why;
    for (const auto& r : d.rows) why += str("\n  ", r.gpus, " GPU(s): ", r.refused);
    throw ConfigError("no GPU count of --gpus " + o.gpus + " can run:" + why,
                      "give --gpus N with a count the scheduler accepts (gtrain plan --gpus N shows its layout)");
  }
  for (size_t i = 0; i < plans.size(); ++i) {
    plans[i].gpus = d.chosen;
    if (i == 0 || plans[i].cap == first.cap) continue;
    SizingContext later = ctx;
    later.cap = plans[i].cap;
    later.begin = plans[i].start_unix;
    later.backend = nullptr;  // it starts after the stages before it: the scheduler cannot say when
    later_decisions.push_back(decide_stage_size(chain.sizing, later));
    if (later_decisions.back().chosen > 0) plans[i].gpus = later_decisions.back().chosen;
  }
  chain.stages.clear();
  write_stage_scripts(o, plans, w, chain);
  chain.stages.front().decision = d.to_json();
  for (size_t i = 1, k = 0; i < plans.size(); ++i) {
    if (plans[i].cap != first.cap && k < later_decisions.size())
      chain.stages[i].decision = later_decisions[k++].to_json();
  }
}

// Submits the stages in order, each after the one before.
void submit_chain(const SubmitOptions& o, const std::map<std::string, std::string>& env, Chain& chain,
                  const std::string& run_dir, const CommandRunner& runner, std::ostream& out) {
  write_chain(run_dir, chain);
  std::string previous;
  for (size_t i = 0; i < chain.stages.size(); ++i) {
    const CommandOutput r = submit_stage(chain, i, previous, runner);
    if (r.rc != 0 && scheduler_unreachable(r)) {
      // Not a verdict on the job: the command or the scheduler was not there. A runtime failure.
      chain.stages[i].state = StageState::failed;
      cancel_submitted(chain, i, runner);
      const std::string program = chain_backend(chain).submit_program();
      chain.state = ChainState::failed;
      chain.reason = program + " could not submit stage " + std::to_string(chain.stages[i].index) +
                     " (scheduler unreachable, exit " + std::to_string(r.rc) + ")";
      write_chain(run_dir, chain);
      std::string text = r.text;
      while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
      throw Error(str(chain.reason, ". ", program, " said:\n", text), "try again when it answers");
    }
    if (r.rc != 0) refused(o, env, chain, i, r, run_dir, runner);
    previous = chain.stages[i].job;
    write_chain(run_dir, chain);
    out << "  stage " << chain.stages[i].index << " submitted as job " << previous << "\n";
  }
}

}  // namespace

int submit_command(const SubmitOptions& given, const std::map<std::string, std::string>& env,
                   const CommandRunner& runner, std::ostream& out) {
  const SchedulerBackend& backend = submit_backend(given);
  const double now = given.now_unix > 0 ? given.now_unix : static_cast<double>(std::time(nullptr));
  check_shaping_options(given, backend, false);
  const SubmitOptions o = resolve_time_auto(given, backend, runner, now, out);  // --time auto: its shape
  const int stages = validate_submit_options(o);
  const JobConfig cfg = load_job_config(o.config_path, o.sets, env);
  if (o.sweep) load_sweep_file(o.config_path, o.sets, env);  // its [search] read now, not in stage 1
  const std::vector<Window> windows = submit_windows(cfg);
  check_shaping_options(o, backend, !windows.empty());
  const std::string run_dir = fs::absolute(resolve_run_dir(cfg, o.config_path, o.run_dir)).lexically_normal().string();
  // chain.json changes under its lock from here (a stage of an earlier chain may report meanwhile).
  const bool run_dir_exists = fs::is_directory(run_dir);
  std::optional<ChainLock> chain_lock;
  if (run_dir_exists) chain_lock.emplace(run_dir);
  check_no_chain_holds(run_dir, runner);
  if (run_dir_exists) {
    // A gtrain run working in the run directory (or its checkpoint directory) now: a stage could not start.
    const std::string ckpt = checkpoint_directory(cfg.checkpoint, run_dir);
    RunLock::acquire(run_dir, fs::is_directory(ckpt) ? ckpt : std::string());
  }
  backend.check_time_limit(o.partition, o.time, parse_slurm_time(o.time), runner);
  auto plans = plan_stages(o, stages, windows, now);
  shape_stages(o, cfg, backend, plans, parse_slurm_time(o.time), run_dir, runner, now, out);
  check_stages_runnable(cfg, run_dir, plans, windows, stages == 0 && o.gpus.empty());
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) {
    throw ConfigError(run_dir + ": cannot create run directory: " + ec.message(),
                      "check that its parent folder is writable, or choose another --run-dir");
  }
  ScriptCommon w;
  w.run_dir = run_dir;
  w.lead = o.signal_lead_s > 0
               ? o.signal_lead_s
               : signal_lead_seconds(measured_save_seconds(run_dir), cfg.schedule.save_safety, cfg.schedule.min_lead_s);
  if (w.lead >= parse_slurm_time(o.time))
    throw ConfigError("--time " + o.time + " is too short: the " +
                          (backend.signals_before_limit() ? "USR1 lead" : "save lead") + " alone is " +
                          std::to_string(w.lead) + " s (save time x safety + margin + 30 s)",
                      "raise --time, or give a shorter lead with --signal-lead");
  std::string name = cfg.log.name.empty() ? fs::path(o.config_path).stem().string() : cfg.log.name;
  for (char c : name) w.job_name += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' ? c : '_';
  w.job_name = "gtrain-" + w.job_name;
  w.limit_s = parse_slurm_time(o.time);
  // A scheduler that sends no signal before the walltime (PBS): gtrain run stops itself by a
  // --time-limit of the walltime less its exit margin (--signal-lead, else 30 s for mpirun's teardown
  // and chain-step). gtrain run leaves its own save lead before that deadline: one lead, not two.
  const int exit_margin = o.signal_lead_s > 0 ? o.signal_lead_s : 30;
  w.run_time_limit = static_cast<int64_t>(w.limit_s) - exit_margin;

  Chain chain;
  chain.scheduler = backend.kind();
  chain.auto_stages = stages == 0;
  chain.windows = cfg.schedule.window;
  chain.gpus_from_windows = o.gpus.empty() && !windows.empty();
  chain.launcher = o.launcher;
  chain.cpus_per_gpu = o.cpus_per_gpu;
  write_stage_scripts(o, plans, w, chain);
  if (open_gpu_sizes(o, stages)) size_stages(o, cfg, w, plans, chain, runner, now, out);
  print_submit_plan(o, chain, w, out);
  print_windows_plan(o, cfg, chain, windows, plans, w.run_dir, w.limit_s, w.lead, now, out);
  if (o.dry_run) {
    out << "dry run: scripts written, nothing submitted. The commands submit would run (bash; each stage reports "
           "to the chain.json that only submit writes, so run gtrain submit without --dry-run to queue them):\n"
        << dry_run_commands(chain);
    return kExitOk;
  }
  submit_chain(o, env, chain, run_dir, runner, out);
  out << "gtrain status " << shell_quote(run_dir) << " follows the chain; gtrain cancel stops it.\n";
  return kExitOk;
}

int cancel_command(const std::string& run_dir, const CommandRunner& runner, std::ostream& out, bool now,
                   const CancelRetry& retry) {
  const CancelResult n = cancel_chain(run_dir, runner, out, now, retry);
  out << "gtrain cancel: " << n.cancelled << " job(s) cancelled";
  if (n.signalled > 0) out << ", " << n.signalled << " running stage(s) saving before they stop";
  out << "\n";
  if (n.failed > 0)
    throw Error(str("gtrain cancel: ", n.failed, " job(s) could not be cancelled (see above); the chain stays running"),
                str("try gtrain cancel ", shell_quote(run_dir), " again"));
  return kExitOk;
}

}  // namespace gtrain
