// report_command.cpp: `gtrain report`: reads the run directory (run_history.cpp), asks the planner
// for its what-if table over device counts, calibrates it with the step time the run measured,
// and writes the report (report_html.cpp, report_markdown.cpp, report.cpp).
#include "launcher/commands/report_command.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "launcher/base/program_runner.h"
#include "launcher/cluster/run_cluster_facts.h"
#include "launcher/commands/plan_command.h"
#include "launcher/commands/sweep_command.h"
#include "launcher/report/report.h"
#include "launcher/scheduler/scheduler_backend.h"
#include "launcher/sweep/sweep_report.h"
#include "runtime/core/config/job_config.h"
#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/core/run_dir/chain_file.h"
#include "runtime/core/run_dir/cluster_facts.h"
#include "runtime/core/run_dir/run_files.h"
#include "runtime/core/schedule.h"

namespace fs = std::filesystem;

namespace gtrain {
namespace {

std::string layout_text(const nlohmann::json& p) {
  return str("dp=", p.value("dp", 1), " tp=", p.value("tp", 1), " pp=", p.value("pp", 1), " zero=", p.value("zero", 0),
             " micro_batch=", p.value("micro_batch", 0), " grad_accum=", p.value("grad_accum", 1),
             p.value("recompute", false) ? " recompute" : "",
             p.value("offload", std::string("none")) != "none" ? " offload" : "");
}

// The stage the calibration comes from: the latest with train records.
struct Measured {
  const StageReport* stage = nullptr;
  StepSpeed speed;
};

Measured measured_step(const RunHistory& h) {
  for (auto s = h.stages.rbegin(); s != h.stages.rend(); ++s) {
    const StepSpeed speed = stage_step_speed(h, *s);
    if (speed.steps > 0) return {&*s, speed};
  }
  return {};
}

// Scales the modelled rows by what the latest measured stage ran at. The factor compares the stage
// with the row for its own count, modelled by the same planner and hardware profile as every other
// row, so that row shows exactly the measured step time and the layout that ran; only when the table
// has no row for that count does the stage's own estimate serve.
void calibrate_request(const RunHistory& h, ResourceRequest& q) {
  const Measured m = measured_step(h);
  if (!m.stage || m.speed.step_s <= 0) return;
  RequestRow* same = nullptr;
  for (auto& row : q.rows)
    if (row.feasible && row.units == m.stage->world && row.step_s > 0) same = &row;
  const double modelled = same ? same->step_s : m.speed.est_s;
  if (modelled <= 0) return;
  q.factor = m.speed.step_s / modelled;
  for (auto& row : q.rows) row.step_s *= q.factor;
  const std::string unit = h.gpus ? "GPU" : "rank";
  if (same) {
    same->step_s = m.speed.step_s;  // exactly, not through the rounding of a product
    same->measured = true;
    if (!m.stage->plan.empty()) same->layout = m.stage->plan + " (ran)";
  }
  q.calibration = str("Calibrated on this run: stage ", m.stage->index, " measured ",
                      report_text::step_time(m.speed.step_s), " a step on ", plural(m.stage->world, unit),
                      " (median of ", m.speed.steps, " steps) where the planner models ",
                      report_text::step_time(modelled), same ? " for that count" : " (the stage's own estimate)",
                      "; every row's modelled step time is scaled by ", strf("%.3g", q.factor), ".");
}

// The planner's what-if rows for this run's config: GPU counts (the GPU type the run planned with)
// or, for CPU runs, rank counts on this machine; scaled by measured / modelled.
ResourceRequest resource_request(const RunHistory& h, const std::string& config_path, const JobConfig& cfg,
                                 const std::map<std::string, std::string>& env) {
  ResourceRequest q;
  q.complete = h.complete || h.done >= h.total_steps;
  q.steps = q.complete ? h.total_steps : h.total_steps - h.done;
  std::vector<std::string> windows;
  for (const auto& w : cfg.schedule.window)
    windows.push_back(w.days + " " + w.hours + (w.max_gpus > 0 ? str(" (at most ", w.max_gpus, " GPUs)") : ""));
  q.windows = join(windows, "; ");
  PlanOptions o;
  o.config_path = config_path;
  o.json = true;
  o.runnable = true;
  int64_t most = 1;
  for (const auto& s : h.stages) most = std::max<int64_t>(most, s.units);
  const std::string profile = h.plan ? h.plan->profile : std::string();
  if (h.gpus) {
    std::set<int64_t> counts;
    for (int64_t n = 1; n <= std::max<int64_t>(8, 4 * most); n *= 2) counts.insert(n);
    for (const auto& s : h.stages) counts.insert(s.units);
    o.gpus = join(std::vector<int64_t>(counts.begin(), counts.end()), ",");
    if (!profile.empty() && profile != "cpu") o.gpu_type = profile;
  } else {
    o.ranks = static_cast<int>(std::max<int64_t>(1, h.stages.empty() ? 1 : h.stages.back().world));
  }
  std::ostringstream out;
  try {
    run_plan_command(o, env, out);
  } catch (const Error& e) {
    if (out.str().empty()) {
      q.error = std::string("the planner could not plan this run's config: ") + e.what();
      return q;
    }
  }
  const auto doc = nlohmann::json::parse(out.str(), nullptr, false);
  if (!doc.is_object() || !doc.contains("what_if") || !doc["what_if"].is_array()) {
    q.error = "the planner gave no what-if table";
    return q;
  }
  // CPU ranks on this host share its cores: a count past them would only be modelled faster.
  const int64_t cores = std::max<int64_t>(1, static_cast<int64_t>(std::thread::hardware_concurrency()));
  for (const auto& w : doc["what_if"]) {
    if (!h.gpus && w.value("gpus", int64_t{0}) > std::max<int64_t>(cores, most)) {
      q.left_out = str("counts past this host's ", plural(cores, "core"), " left out: CPU ranks share them");
      continue;
    }
    RequestRow row;
    row.units = w.value("gpus", int64_t{0});
    row.nodes = w.value("nodes", int64_t{1});
    row.feasible = w.value("feasible", false);
    if (row.feasible && w.contains("plan")) {
      row.layout = layout_text(w["plan"]);
      row.step_s = w.value("step_seconds", 0.0);
    } else {
      row.feasible = false;
      row.why = w.value("why", std::string("no layout fits"));
    }
    q.rows.push_back(row);
  }
  calibrate_request(h, q);
  finish_request_rows(q);
  return q;
}

std::string format_of(const ReportOptions& o) {
  std::string f = o.format;
  if (f.empty()) {
    const std::string ext = fs::path(o.output).extension().string();
    f = ext == ".md" ? "md" : ext == ".json" ? "json" : "html";
  }
  if (f == "markdown") f = "md";
  if (f != "html" && f != "md" && f != "json")
    throw ConfigError("--format '" + o.format + "': expected html, md or json");
  return f;
}

// Writes `text` to `path` through a temporary file (a reader never sees half a report).
void write_report_file(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << text;
    f.close();
    if (!f) throw ConfigError(path + ": cannot write the report", "check that its directory exists and is writable");
  }
  fs::rename(tmp, path);
}

// A sweep directory's report (launcher/sweep/sweep_report.h): report.<format> beside sweep.json.
int sweep_report(const ReportOptions& o, const std::string& format) {
  const auto l = read_sweep_ledger(o.run_dir);
  const std::string best = best_trial_toml(o.run_dir, {});
  const std::string text = format == "html" ? render_sweep_html(*l, o.run_dir, best)
                           : format == "md" ? render_sweep_markdown(*l, o.run_dir, best)
                                            : l->to_json().dump(2) + "\n";
  if (o.output == "-") {
    std::cout << text;
    return kExitOk;
  }
  const std::string path = o.output.empty() ? (fs::path(o.run_dir) / ("report." + format)).string() : o.output;
  write_report_file(path, text);
  std::printf("gtrain report: %s (sweep of %zu trials, %s)\n", path.c_str(), l->trials.size(),
              l->finished ? "finished" : "not finished");
  return kExitOk;
}

// The run's cluster facts: read afresh from the scheduler a submitted run (chain.json) names, unless
// --no-cluster or it tells nothing, and then kept in cluster.json; else as cluster.json keeps them.
std::optional<ClusterFacts> report_cluster_facts(const ReportOptions& o, const Report& r,
                                                 const std::map<std::string, std::string>& env) {
  auto kept = read_cluster_facts(o.run_dir);
  if (o.no_cluster || !chain_exists(o.run_dir)) return kept;
  const SchedulerBackend* b = nullptr;
  try {
    b = &scheduler_backend(read_chain_file(o.run_dir).scheduler);
  } catch (const Error&) {
    return kept;
  }
  if (!b->can_submit()) return kept;
  const RequestRow* best = recommended_row(r.request);
  const int64_t want = best && r.h.gpus ? best->units : kept ? kept->quiet_for_gpus : 0;
  try {
    ClusterFacts now =
        read_run_cluster_facts(*b, kept ? kept->partition : "", want, "", env, system_command_runner(20.0),
                               static_cast<int64_t>(r.made_at), "gtrain report");
    if (now.partition.empty()) return kept;  // the scheduler did not answer here
    write_cluster_facts(o.run_dir, now);
    return now;
  } catch (const Error&) {
    return kept;
  }
}

}  // namespace

int run_report_command(const ReportOptions& o, const std::map<std::string, std::string>& env) {
  const std::string format = format_of(o);
  if (is_sweep_dir(o.run_dir)) return sweep_report(o, format);
  Report r;
  r.made_at = unix_now();
  r.h = read_run_history(o.run_dir, r.made_at);
  // Queue waits of stages chain.json does not time (submitted by hand): the scheduler's record.
  const CommandRunner run = system_command_runner(5.0);
  add_submit_times(r.h, [&](const StageReport& s) -> std::optional<double> {
    const SchedulerBackend* b = find_scheduler_backend(s.scheduler);
    return b ? b->job_submit_time(s.job, run) : std::nullopt;
  });
  const std::string config_path = RunDir(o.run_dir).config();
  JobConfig cfg;
  bool have_config = false;
  if (fs::exists(config_path)) {
    try {
      cfg = load_job_config(config_path, {}, env);
      have_config = true;
    } catch (const Error& e) {
      std::cerr << "gtrain report: warning: " << e.what() << " (no model size, price or resource request)\n";
    }
  }
  if (have_config) {
    r.model = cfg.model.name;
    try {
      r.params = describe_job(cfg).stats.params;
    } catch (const Error&) {
    }
    r.request = resource_request(r.h, config_path, cfg, env);
  } else {
    r.request.error = config_path + " is missing or no longer loads";
  }
  r.cluster = report_cluster_facts(o, r, env);
  r.price = o.price >= 0 ? o.price : have_config ? cfg.log.price_per_gpu_hour : 0;
  r.advice = report_advice(r.h);
  const std::string text = format == "html" ? render_html(r)
                           : format == "md" ? render_markdown(r)
                                            : report_json(r).dump(2) + "\n";
  if (o.output == "-") {
    std::cout << text;
    return kExitOk;
  }
  // The default: report.html beside the run's files (report.md, report.json for the other formats).
  const std::string page = RunDir(o.run_dir).path(RunFile::report);
  const std::string path = o.output.empty() ? fs::path(page).replace_extension("." + format).string() : o.output;
  write_report_file(path, text);
  std::printf("gtrain report: %s (%s, %zu stages, step %lld / %lld, goodput %s, %s %s-hours)\n", path.c_str(),
              r.h.state.c_str(), r.h.stages.size(), (long long)r.h.done, (long long)r.h.total_steps,
              report_text::percent(r.h.goodput).c_str(), report_text::hours(r.h.unit_hours).c_str(), r.unit().c_str());
  return kExitOk;
}

}  // namespace gtrain
