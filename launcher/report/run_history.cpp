// run_history.cpp: a run directory read back for `gtrain report` (see run_history.h).
#include "launcher/report/run_history.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "launcher/base/run_lock.h"
#include "runtime/core/config/job_config.h"
#include "runtime/core/errors.h"
#include "runtime/core/run_dir/chain_file.h"
#include "runtime/core/run_dir/run_files.h"
#include "runtime/core/run_dir/stage_records.h"

namespace fs = std::filesystem;

namespace gtrain {

TimeBuckets& TimeBuckets::operator+=(const TimeBuckets& o) {
  queue += o.queue, prepare += o.prepare, startup += o.startup, load += o.load, training += o.training,
      data_wait += o.data_wait;
  save += o.save, eval += o.eval, lost += o.lost, recovery += o.recovery, other += o.other;
  return *this;
}

TimeBuckets TimeBuckets::scaled(double u) const {
  TimeBuckets t = *this;
  t.queue *= u, t.prepare *= u, t.startup *= u, t.load *= u, t.training *= u, t.data_wait *= u;
  t.save *= u, t.eval *= u, t.lost *= u, t.recovery *= u, t.other *= u;
  return t;
}

namespace {

const std::string kHint = "give the run directory gtrain run or gtrain submit used (its --run-dir)";

// metrics.jsonl and the records a resume moved out of it (metrics.superseded.jsonl: steps trained
// again), merged in time order. A record without a time (a resume record; an older gtrain's eval)
// takes the next record's: it opens what follows it.
std::vector<RunRecord> run_records(const RunDir& dir) {
  std::vector<std::pair<double, RunRecord>> all;
  for (const RunFile file : {RunFile::metrics, RunFile::superseded_metrics}) {
    auto lines = read_run_records(dir.path(file));
    std::vector<double> t(lines.size());
    double next = 1e300;
    for (size_t i = lines.size(); i-- > 0;) {
      if (lines[i].json.contains("time") && record_time(lines[i].json) > 0) next = record_time(lines[i].json);
      t[i] = next;
    }
    for (size_t i = 0; i < lines.size(); ++i) all.emplace_back(t[i], std::move(lines[i]));
  }
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<RunRecord> out;
  for (auto& [t, r] : all) out.push_back(std::move(r));
  return out;
}

TrainPoint train_point(const TrainRecord& r) {
  TrainPoint p;
  p.step = r.step;
  p.time = r.time;
  p.loss = r.loss;
  p.lr = r.lr;
  p.step_time_s = r.step_time_s;
  p.data_wait_s = r.data_wait_s;
  p.samples_per_s = r.samples_per_s;
  p.tokens_per_s = r.tokens_per_s.value_or(-1);
  p.mfu = r.mfu.value_or(-1);
  p.est_step_s = r.est_step_s.value_or(-1);
  p.cpu_util = r.cpu_util.value_or(-1);
  p.gpu_util = r.gpu_util.value_or(-1);
  p.gpu_mem_used_mb = r.gpu_mem_used_mb.value_or(-1);
  p.peak_mem_mb = r.peak_mem_mb.value_or(-1);
  return p;
}

// Splits the train records into attempts (a new one where elapsed_s goes back, or after a "resume"
// record) and finds the lost work: an attempt's steps past the step a later attempt started from.
void read_attempts(RunHistory& h, const std::vector<RunRecord>& metrics) {
  std::vector<TrainPoint> all;
  int64_t resume = -1;
  double last_elapsed = -1;
  for (const auto& r : metrics) {
    if (!record_step(r.json)) continue;
    if (r.is<ResumeRecord>()) {
      resume = r.as<ResumeRecord>().step;
      last_elapsed = -1;
    } else if (r.is<TrainRecord>()) {
      if (!r.json.contains("time")) {
        throw ConfigError(RunDir(h.run_dir).metrics() +
                              ": its train records have no \"time\" (a run directory of an "
                              "older gtrain); the report needs the time of every step",
                          "run the stage again with this gtrain, or read metrics.jsonl directly");
      }
      const TrainRecord t = r.as<TrainRecord>();
      TrainPoint p = train_point(t);
      const double elapsed = t.elapsed_s;
      if (h.attempts.empty() || last_elapsed < 0 || elapsed < last_elapsed) {
        Attempt a;
        a.start = p.time - elapsed;
        a.step_from = resume >= 0 ? resume : p.step - 1;
        a.first_step = p.time - p.step_time_s;
        h.attempts.push_back(a);
        resume = -1;
      }
      Attempt& a = h.attempts.back();
      p.attempt = static_cast<int>(h.attempts.size()) - 1;
      const int64_t prev = all.empty() || all.back().attempt != p.attempt ? a.step_from : all.back().step;
      p.span = std::max<int64_t>(1, p.step - prev);
      a.step_to = p.step;
      a.end = p.time;
      last_elapsed = elapsed;
      all.push_back(p);
    } else if (r.is<EvalRecord>()) {
      const auto e = r.as<EvalRecord>();
      h.eval.push_back({e.step, e.time, e.loss, e.accuracy, e.eval_s});
    } else if (r.is<CheckpointRecord>()) {
      const auto c = r.as<CheckpointRecord>();
      h.saves.push_back({c.step, c.time, c.stall_s});
    }
  }
  // The earliest step any later attempt started from: steps past it were trained again.
  std::vector<int64_t> later_from(h.attempts.size(), INT64_MAX);
  for (size_t i = h.attempts.size(); i-- > 1;) later_from[i - 1] = std::min(later_from[i], h.attempts[i].step_from);
  std::map<int64_t, TrainPoint> kept;
  for (const auto& p : all) {
    Attempt& a = h.attempts[static_cast<size_t>(p.attempt)];
    const double s = p.step_time_s * static_cast<double>(p.span);
    a.step_s += s;
    if (p.step > later_from[static_cast<size_t>(p.attempt)]) {
      a.lost_steps += p.span;
      a.lost_s += s;
      h.retrained.push_back(p);
    } else {
      a.data_wait_s += p.data_wait_s * static_cast<double>(p.span);
    }
    kept[p.step] = p;  // a later attempt's record of a step replaces an earlier one's
  }
  for (const auto& [step, p] : kept) h.train.push_back(p);
}

StageReport stage_from_ledger(const StageRecord& r, int index) {
  StageReport s;
  s.index = index;
  s.start = r.start;
  s.end = r.end > 0 ? r.end : r.start;
  s.world = r.world;
  s.plan = r.plan;
  s.exit = r.exit;
  s.step_from = r.step_from;
  s.step_to = r.step_to;
  s.restarts = r.restarts;
  s.data = r.data;
  const int gpus = r.gpus();
  s.gpus = gpus > 0;
  s.units = s.gpus ? gpus : s.world;
  s.scheduler = r.scheduler();
  s.job = r.job_id();
  s.recorded = r.reported_by.empty();
  return s;
}

// The stage's wall time by bucket, from its attempts and the eval and save records in its window.
void attribute(StageReport& s, const RunHistory& h, double ledger_save_s, double ledger_load_s,
               double ledger_prepare_s) {
  TimeBuckets& t = s.t;
  t.load = ledger_load_s;
  // The data was prepared before the trainer was built, which the ledger's start is: the stage began then.
  t.prepare = ledger_prepare_s;
  s.start -= ledger_prepare_s;
  std::vector<const Attempt*> mine;
  for (const auto& a : h.attempts)
    if (a.stage == s.index - 1) mine.push_back(&a);
  const double wall = std::max(0.0, s.end - s.start);
  if (mine.empty()) {
    t.startup = std::max(0.0, wall - t.load - t.prepare);  // it never reached a step
    return;
  }
  t.startup = std::max(0.0, mine.front()->first_step - s.start - t.load - t.prepare);
  double cpu = 0, gpu = 0, mem = 0;
  int ncpu = 0, ngpu = 0, nmem = 0;
  for (const auto& p : h.train) {
    if (h.attempts[static_cast<size_t>(p.attempt)].stage != s.index - 1) continue;
    if (p.cpu_util >= 0) cpu += p.cpu_util, ++ncpu;
    if (p.gpu_util >= 0) gpu += p.gpu_util, ++ngpu;
    const double m = p.gpu_mem_used_mb >= 0 ? p.gpu_mem_used_mb : p.peak_mem_mb;
    if (m >= 0) mem = std::max(mem, m), ++nmem;
  }
  if (ncpu > 0) s.cpu_util = cpu / ncpu;
  if (ngpu > 0) s.gpu_util = gpu / ngpu;
  if (nmem > 0) s.mem_mb = mem;
  for (size_t k = 0; k < mine.size(); ++k) {
    const Attempt& a = *mine[k];
    if (k > 0) t.recovery += std::max(0.0, a.first_step - mine[k - 1]->end);
    t.lost += a.lost_s;
    t.data_wait += a.data_wait_s;
    t.training += std::max(0.0, a.step_s - a.lost_s - a.data_wait_s);
  }
  // A record belongs to the stage that trained its step, and was written while it ran (a second of
  // slack for the last records): the time alone would also take the next stage's first save or
  // evaluation when it follows within that second.
  const auto inside = [&](double time) { return time >= s.start - 1e-3 && time <= s.end + 1.0; };
  const auto trained_here = [&](int64_t step) { return step > s.step_from && step <= s.step_to; };
  double stalls = 0;
  for (const auto& v : h.saves) {
    if (trained_here(v.step) && (v.time <= 0 || inside(v.time))) {
      stalls += v.stall_s;
      s.save_times.push_back(v.time);
    }
  }
  t.save = std::max(stalls, ledger_save_s);
  for (const auto& e : h.eval)
    if (e.time > 0 && inside(e.time) && trained_here(e.step)) t.eval += e.eval_s;
  const double known =
      t.prepare + t.startup + t.load + t.training + t.data_wait + t.save + t.eval + t.lost + t.recovery;
  t.other = std::max(0.0, wall - known);
}

void read_config(RunHistory& h) {
  const RunDir dir(h.run_dir);
  if (!dir.has(RunFile::config)) return;
  try {
    const JobConfig c = load_job_config(dir.config(), {}, {});
    h.total_steps = c.train.steps;
    h.global_batch = c.train.global_batch;
    h.precision = c.precision.dtype;
    h.model = c.model.name;
  } catch (const Error&) {
    // A config this gtrain no longer reads: the plan and the records still tell most of it.
  }
}

// chain.json's stages: submission times for the stages that ran, and the ones still queued.
void read_chain(RunHistory& h, double now) {
  if (!chain_exists(h.run_dir)) return;
  Chain c;
  try {
    c = read_chain_file(h.run_dir);
  } catch (const Error&) {
    return;  // gtrain status names a damaged chain.json; the report goes on without it
  }
  h.chain_state = state_name(c.state);
  for (const auto& cs : c.stages) {
    bool matched = false;
    for (auto& s : h.stages) {
      if (!cs.job.empty() && s.job == cs.job) {
        if (s.submitted == 0) s.submitted = cs.submitted;
        matched = true;
      }
    }
    if (matched || cs.job.empty() || cs.state != StageState::queued) continue;
    StageReport q;  // waiting in the queue now
    q.index = static_cast<int>(h.stages.size()) + 1;
    q.queued = true;
    q.submitted = cs.submitted;
    q.start = q.end = now;
    q.job = cs.job;
    q.units = cs.gpus;
    q.gpus = true;
    q.exit = "queued";
    h.stages.push_back(q);
  }
}

void read_state(RunHistory& h) {
  h.running = RunLock::held(h.run_dir);
  const StageReport* last = nullptr;
  for (const auto& s : h.stages)
    if (!s.queued) last = &s;
  h.complete = last && last->exit == "completed" && last->step_to == h.done && h.done >= h.total_steps;
  const bool queued = std::any_of(h.stages.begin(), h.stages.end(), [](const StageReport& s) { return s.queued; });
  if (h.complete)
    h.state = "complete";
  else if (h.running)
    h.state = "running";
  else if (queued && h.chain_state == "running")
    h.state = "queued";
  else if (last && last->exit.rfind("resumable", 0) == 0)
    h.state = "stopped (resumable)";
  else
    h.state = "failed";
  if (h.complete || h.attempts.empty() || h.total_steps <= 0) {
    h.eta_s = h.complete ? 0 : -1;
    return;
  }
  // At the latest attempt's wall-clock speed (saves and evaluations included).
  const Attempt& a = h.attempts.back();
  const auto first = std::find_if(h.train.begin(), h.train.end(), [&](const TrainPoint& p) {
    return p.attempt == static_cast<int>(h.attempts.size()) - 1;
  });
  double per_step = 0;
  if (first != h.train.end() && a.step_to > first->step) {
    per_step = (a.end - first->time) / static_cast<double>(a.step_to - first->step);
  } else if (a.step_to > a.step_from) {
    per_step = a.step_s / static_cast<double>(a.step_to - a.step_from);
  }
  if (per_step > 0) h.eta_s = per_step * static_cast<double>(std::max<int64_t>(0, h.total_steps - h.done));
}

// The queue waits (submission, or the previous stage's end, to the start) and the run's totals.
void total_up(RunHistory& h) {
  h.total = TimeBuckets{};
  h.unit_hours = 0;
  h.gpus = false;
  for (size_t i = 0; i < h.stages.size(); ++i) {
    StageReport& s = h.stages[i];
    const double ready = i > 0 ? std::max(s.submitted, h.stages[i - 1].end) : s.submitted;
    s.t.queue = s.submitted > 0 ? std::max(0.0, s.start - ready) : 0;
    h.gpus = h.gpus || s.gpus;
    if (s.queued) {
      h.total.queue += s.t.queue;
      continue;
    }
    TimeBuckets scaled = s.t.scaled(s.units);
    scaled.queue = s.t.queue;  // waiting holds no GPU: wall seconds
    h.total += scaled;
    h.unit_hours += s.unit_hours();
  }
  h.goodput = h.total.allocated() > 0 ? h.total.training / h.total.allocated() : 0;
}

}  // namespace

RunHistory read_run_history(const std::string& run_dir, double now) {
  RunHistory h;
  h.run_dir = run_dir;
  const RunDir dir(run_dir);
  if (!fs::is_directory(run_dir)) throw ConfigError(run_dir + ": no such run directory", kHint);
  if (!looks_like_run_dir(run_dir))
    throw ConfigError(run_dir + ": not a gtrain run directory (no " + run_marker_names() + ")", kHint);
  read_config(h);
  read_attempts(h, run_records(dir));
  if (h.train.empty()) {
    throw ConfigError(dir.metrics() + ": no train record yet" +
                          (RunLock::held(run_dir) ? std::string(" (the run is starting)") : std::string()) +
                          "; the report needs at least one step",
                      "gtrain status " + run_dir + " shows where the run is; report again after its first step");
  }
  h.done = h.train.back().step;
  for (const auto& p : h.train)
    if (p.tokens_per_s > 0 && p.samples_per_s > 0)
      h.tokens_per_sample = static_cast<int64_t>(std::llround(p.tokens_per_s / p.samples_per_s));
  h.plan = read_plan_record(run_dir);
  if (h.global_batch == 0 && h.plan) h.global_batch = h.plan->global_batch;
  if (h.precision.empty() && h.plan) h.precision = h.plan->precision;
  h.restarts = read_records_of<RestartRecord>(dir.restarts());

  // Stages: the ledger's, then attempts after its last record (a stage running now, or one killed
  // before anything recorded it).
  std::vector<double> save_s, load_s, prepare_s;
  for (const auto& r : read_stage_records(run_dir)) {
    h.stages.push_back(stage_from_ledger(r, static_cast<int>(h.stages.size()) + 1));
    save_s.push_back(r.save_s);
    load_s.push_back(r.load_s);
    prepare_s.push_back(r.prepare_s);
    if (h.total_steps == 0) h.total_steps = r.total_steps;
  }
  for (auto& a : h.attempts) {
    // The first stage that ended after the attempt's last step (and started after the one before ended).
    for (size_t i = 0; i < h.stages.size() && a.stage < 0; ++i)
      if (h.stages[i].end >= a.end - 1e-3) a.stage = static_cast<int>(i);
    if (a.stage >= 0) {
      StageReport& s = h.stages[static_cast<size_t>(a.stage)];
      s.start = std::min(s.start, a.start);  // a stage restarted in the job: its ledger line is the last attempt's
      continue;
    }
    StageReport s;  // after the ledger: running now, or killed before anything recorded it
    s.index = static_cast<int>(h.stages.size()) + 1;
    s.start = a.start;
    s.end = a.end;
    s.step_from = a.step_from;
    s.step_to = a.step_to;
    s.recorded = false;
    const int world = h.plan ? static_cast<int>(h.plan->world) : 1;
    s.world = s.units = world;
    s.gpus = h.plan && h.plan->on_gpus();
    s.exit = "unrecorded";
    a.stage = static_cast<int>(h.stages.size());
    h.stages.push_back(s);
    save_s.push_back(0);
    load_s.push_back(0);
    prepare_s.push_back(0);
  }
  if (!h.stages.empty() && !h.stages.back().recorded && RunLock::held(run_dir)) {
    h.stages.back().exit = "running";
    h.stages.back().end = std::max(h.stages.back().end, now);
  }
  read_chain(h, now);
  for (size_t i = 0; i < h.stages.size(); ++i) {
    StageReport& s = h.stages[i];
    if (!s.queued) attribute(s, h, save_s.at(i), load_s.at(i), prepare_s.at(i));
  }
  total_up(h);
  read_state(h);
  return h;
}

StepSpeed stage_step_speed(const RunHistory& h, const StageReport& s) {
  std::vector<double> step, est;
  for (const auto& p : h.train) {
    if (h.attempts[static_cast<size_t>(p.attempt)].stage != s.index - 1 || p.step_time_s <= 0) continue;
    step.push_back(p.step_time_s);
    if (p.est_step_s > 0) est.push_back(p.est_step_s);
  }
  const auto median = [](std::vector<double>& v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  return {median(step), median(est), step.size()};
}

void add_submit_times(RunHistory& h, const std::function<std::optional<double>(const StageReport&)>& lookup) {
  for (auto& s : h.stages) {
    if (s.submitted > 0 || s.job.empty()) continue;
    if (const auto t = lookup(s)) s.submitted = *t;
  }
  total_up(h);
}

}  // namespace gtrain
