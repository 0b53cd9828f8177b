// stage_sizing.cpp: the size a stage is submitted at when --gpus leaves it open (see stage_sizing.h).
#include "launcher/chain/stage_sizing.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <regex>
#include <set>
#include <sstream>

#include "launcher/base/text_util.h"
#include "launcher/launch/run_launch.h"
#include "launcher/report/run_history.h"
#include "launcher/scheduler/scheduler_backend.h"
#include "runtime/core/errors.h"
#include "runtime/core/format.h"

namespace gtrain {

std::vector<int> parse_gpu_candidates(const std::string& text, int most) {
  const auto bad = [&] {
    return ConfigError("--gpus '" + text + "': expected a count, auto, a range such as 2-8, or a list such as 1,2,4,8");
  };
  std::set<int> out;
  std::smatch m;
  if (text == "auto") {
    most = std::max(1, most);
    for (int g = 1; g <= most; g *= 2) out.insert(g);
    out.insert(most);
  } else if (std::regex_match(text, m, std::regex("([0-9]{1,5})-([0-9]{1,5})"))) {
    const int a = std::stoi(m[1]), b = std::stoi(m[2]);
    if (a < 1 || b < a) throw ConfigError("--gpus '" + text + "': expected a range from 1 up, such as 2-8");
    for (int g = a; g <= b; ++g) out.insert(g);
  } else if (std::regex_match(text, std::regex("[0-9]{1,5}(,[0-9]{1,5})+"))) {
    std::stringstream in(text);
    for (std::string item; std::getline(in, item, ',');) {
      if (std::stoi(item) < 1) throw bad();
      out.insert(std::stoi(item));
    }
  } else {
    throw bad();
  }
  return {out.begin(), out.end()};
}

std::vector<int> sizing_candidates(const SizingPolicy& policy, int64_t cap, int nodes) {
  if (policy.gpus != "auto") return policy.candidates;
  return parse_gpu_candidates("auto", cap > 0 ? static_cast<int>(cap) : 8 * std::max(1, nodes));
}

bool scheduler_unreachable(const CommandOutput& r) {
  if (r.rc < 0 || r.rc == 126 || r.rc == 127) return true;
  static const std::regex kUnreachable(
      "unable to contact slurm controller|slurm controller not responding|socket timed out|connection refused|"
      "connection timed out|no route to host|zero bytes were transmitted|cannot connect to (specified )?server|"
      "communication connection failure|could not be run|"
      // Slurm without a slurm.conf (configless lookup failed) or a controller it can resolve:
      "could not establish a configuration source|fetch_config: dns srv lookup failed",
      std::regex::icase);
  return std::regex_search(r.text, kUnreachable);
}

StageHistory read_stage_history(const std::string& run_dir, double now) {
  StageHistory out;
  RunHistory h;
  try {
    h = read_run_history(run_dir, now);
  } catch (const Error&) {
    return out;  // a new run directory, or one with no step yet
  }
  out.done = h.done;
  const StageReport* last = nullptr;
  for (const auto& s : h.stages)
    if (!s.queued) last = &s;
  const StepSpeed speed = last ? stage_step_speed(h, *last) : StepSpeed{};
  if (speed.steps > 0 && speed.est_s > 0) {
    out.factor = speed.step_s / speed.est_s;
    char b[240];
    std::snprintf(b, sizeof(b), "the planner's step times x %.3g: stage %d measured %.4g s/step on %s", out.factor,
                  last->index, speed.step_s, plural(last->world, "rank").c_str());
    out.calibration = b;
  }
  if (last) {
    const TimeBuckets& t = last->t;
    out.overhead_s = t.startup + t.load + t.save + t.eval + t.other;
  }
  return out;
}

namespace {

std::string clock(double unix_time) {
  return text::local_time(unix_time, "%m-%d %H:%M:%S");
}

}  // namespace

SizingDecision decide_stage_size(const SizingPolicy& policy, const SizingContext& ctx) {
  SizingDecision d;
  d.at = ctx.now;
  d.begin = ctx.begin > ctx.now ? ctx.begin : 0;
  d.cap = ctx.cap;
  d.objective = policy.objective;
  const double earliest = std::max(ctx.now, ctx.begin);
  const StageHistory hist = read_stage_history(ctx.run_dir, ctx.now);
  d.calibration = hist.calibration;
  d.steps = std::max<int64_t>(0, ctx.cfg.train.steps - hist.done);
  const auto stats = model_stats_from_config(ctx.cfg);
  JobConfig layout = ctx.cfg;
  if (layout.parallel.memory_gb <= 0) layout.parallel.memory_gb = 1e9;  // the stage's own hardware judges memory
  for (int g : sizing_candidates(policy, ctx.cap, ctx.nodes)) {
    SizingRow row;
    row.gpus = g;
    row.nodes = ctx.nodes;
    d.rows.push_back(row);
    SizingRow& r = d.rows.back();
    if (ctx.cap > 0 && g > ctx.cap) {
      r.refused = str("above the quota window's max_gpus ", ctx.cap);
      continue;
    }
    if (g % ctx.nodes != 0) {
      r.refused = str("not a multiple of --nodes ", ctx.nodes);
      continue;
    }
    if (!stats) {
      r.refused = "the model must be built to be planned (give --gpus N)";
      continue;
    }
    double step_s = 0;
    try {
      const Plan p = plan_run(layout, *stats, g, g / ctx.nodes);
      r.layout = p.summary();
      step_s = p.est_step_seconds * hist.factor;
    } catch (const ConfigError& e) {
      r.refused = std::string("no layout: ") + e.what();
      continue;
    }
    r.start = earliest;
    r.start_from = d.begin > 0 ? "begin" : "now (the scheduler gives no start estimate)";
    if (ctx.backend) {
      if (const auto argv = ctx.backend->test_submit_argv(ctx.submit_argv, ctx.nodes, g / ctx.nodes)) {
        const CommandOutput out = run_merged(ctx.runner, *argv);
        if (out.rc != 0 && scheduler_unreachable(out)) {
          // Not a verdict on this size: no other size would get one either.
          d.unreachable = text::trim(out.text);
          d.rows.clear();
          return d;
        }
        if (out.rc != 0) {
          r.refused = text::trim(first_line(out.text));
          continue;
        }
        if (const auto t = ctx.backend->test_submit_start(out.text)) {
          // The test submission has no --begin: a stage held for its window starts at the later of the two.
          r.start = std::max(earliest, *t);
          r.start_from = d.begin > 0 && *t < d.begin ? "begin" : "scheduler";
        } else if (d.begin == 0) {
          r.start_from = "now (no start time in the test submission's answer)";
        }
      }
    }
    // The steps, plus each stage's time outside steps; a stage trains for its limit less the lead.
    const double train_s = static_cast<double>(d.steps) * step_s;
    const double per_stage = std::max(60.0, ctx.limit_s - ctx.lead_s - hist.overhead_s);
    const double stages = std::max(1.0, std::ceil(train_s / per_stage));
    r.run_s = train_s + stages * hist.overhead_s;
    r.finish = r.start + r.run_s;
    r.gpu_hours = r.run_s * g / 3600.0;
  }
  // The earliest finish (ties: fewer GPU-hours); gpu-hours: the fewest within the slack.
  const SizingRow* best = nullptr;
  for (const auto& r : d.rows) {
    if (!r.refused.empty()) continue;
    if (!best || r.finish < best->finish - 1.0 ||
        (std::abs(r.finish - best->finish) <= 1.0 && r.gpu_hours < best->gpu_hours))
      best = &r;
  }
  if (best && policy.objective == "gpu-hours") {
    const double limit = earliest + (best->finish - earliest) * (1.0 + policy.slack);
    for (const auto& r : d.rows)
      if (r.refused.empty() && r.finish <= limit && r.gpu_hours < best->gpu_hours) best = &r;
  }
  if (best) {
    d.chosen = best->gpus;
    for (auto& r : d.rows) r.chosen = &r == best;
  }
  return d;
}

nlohmann::json SizingDecision::to_json() const {
  nlohmann::json rows_json = nlohmann::json::array();
  for (const auto& r : rows) {
    rows_json.push_back({{"gpus", r.gpus},
                         {"nodes", r.nodes},
                         {"layout", r.layout},
                         {"refused", r.refused},
                         {"start", r.start},
                         {"start_from", r.start_from},
                         {"run_s", r.run_s},
                         {"finish", r.finish},
                         {"gpu_hours", r.gpu_hours},
                         {"chosen", r.chosen}});
  }
  return {{"at", at},
          {"begin", begin},
          {"cap", cap},
          {"unreachable", unreachable},
          {"objective", objective},
          {"steps", steps},
          {"chosen", chosen},
          {"calibration", calibration},
          {"rows", rows_json}};
}

std::string render_sizing(const nlohmann::json& d) {
  std::ostringstream o;
  char b[320];
  std::snprintf(b, sizeof(b), "  %5s  %-52s %-15s %10s %-15s %9s\n", "GPUs", "layout", "expected start", "run time",
                "finish", "GPU-hours");
  o << b;
  for (const auto& r : d.value("rows", nlohmann::json::array())) {
    const std::string refused = r.value("refused", "");
    if (!refused.empty()) {
      std::snprintf(b, sizeof(b), "  %5d  out: %s\n", r.value("gpus", 0), refused.c_str());
      o << b;
      continue;
    }
    const std::string from = r.value("start_from", "");
    const std::string start = clock(r.value("start", 0.0)) + (from == "scheduler" || from == "begin" ? "" : "*");
    std::snprintf(b, sizeof(b), "  %5d  %-52s %-15s %10s %-15s %9.3g%s\n", r.value("gpus", 0),
                  r.value("layout", "").c_str(), start.c_str(), format_clock(r.value("run_s", 0.0)).c_str(),
                  clock(r.value("finish", 0.0)).c_str(), r.value("gpu_hours", 0.0),
                  r.value("chosen", false) ? "  <- chosen" : "");
    o << b;
  }
  bool estimated = false;
  for (const auto& r : d.value("rows", nlohmann::json::array()))
    estimated |= r.value("start_from", "") == "scheduler" || r.value("start_from", "") == "begin";
  if (const double begin = d.value("begin", 0.0); begin > 0)
    o << "  the stage is held until its quota window opens at " << clock(begin)
      << (d.value("cap", int64_t{0}) > 0 ? str(" (at most ", d.value("cap", int64_t{0}), " GPUs)") : std::string())
      << ": no size starts before\n";
  if (!estimated)
    o << "  no start estimates from the scheduler (PBS's qsub has no test submission; sbatch --test-only gave "
         "none): every size counts as starting now\n";
  o << "  (" << d.value("steps", int64_t{0}) << " steps to go; " << d.value("calibration", "") << "; objective "
    << d.value("objective", "finish") << "; * = no start estimate, now)\n";
  return o.str();
}

std::string render_sizing(const SizingDecision& d) {
  return render_sizing(d.to_json());
}

}  // namespace gtrain
