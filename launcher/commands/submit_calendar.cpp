// submit_calendar.cpp: the quota-window calendar and the resource request `gtrain submit` prints.
#include "launcher/commands/submit_calendar.h"

#include <map>
#include <set>

#include "launcher/base/text_util.h"
#include "launcher/chain/stage_sizing.h"
#include "launcher/chain/window_calendar.h"
#include "launcher/commands/plan_command.h"
#include "launcher/launch/run_launch.h"
#include "runtime/core/errors.h"
#include "runtime/core/format.h"

namespace gtrain {
namespace {

// The GPUs a stage starting in a window with cap `cap` takes: the cap (no --gpus), the fastest open size
// within it (--gpus auto, a range or a list with --stages auto), else the first stage's count.
int calendar_gpus(const Chain& chain, int first_gpus, int nodes, int64_t cap,
                  const std::function<double(int)>& step_at) {
  if (chain.gpus_from_windows) {
    const int g = cap > 0 ? static_cast<int>(cap) : 1;
    return g % nodes == 0 ? g : std::max(nodes, g / nodes * nodes);
  }
  if (!chain.sizing.active()) return first_gpus;
  int best = 0;
  for (int g : sizing_candidates(chain.sizing, cap, nodes)) {
    if (g % nodes != 0 || (cap > 0 && g > cap) || step_at(g) <= 0) continue;
    if (best == 0 || step_at(g) < step_at(best)) best = g;
  }
  return best;
}

// With quota windows: what a --time longer than the windows costs, when the run is done with each
// stage on the GPUs of the window it starts in (window_calendar.h), and the resource-request
// paragraph gtrain report has: the admin's question, answered before anything is queued.
}  // namespace

void print_windows_plan(const SubmitOptions& o, const JobConfig& cfg, const Chain& chain,
                        const std::vector<Window>& windows, const std::vector<StagePlan>& plans,
                        const std::string& run_dir, double limit_s, int lead, double now, std::ostream& out) {
  if (windows.empty()) return;
  if (const double longest = longest_window_stretch(windows, now); longest > 0 && limit_s > longest)
    out << "  --time " << o.time << " is longer than the longest quota window stretch (" << format_eta(longest)
        << "): each stage stops at its window's close anyway (as planned below); --time "
        << format_duration(static_cast<int64_t>(longest)) << " asks for no time a stage cannot use, and fits "
        << "backfill sooner\n";
  const StageHistory hist = read_stage_history(run_dir, now);
  const JobDescription job = describe_job(cfg);
  const int64_t total = cfg.train.steps > 0 ? cfg.train.steps : job.total_steps;
  const int nodes = plans.front().nodes;
  JobConfig layout = cfg;
  if (layout.parallel.memory_gb <= 0) layout.parallel.memory_gb = 1e9;  // the stage's own hardware judges memory
  std::map<int, std::pair<double, std::string>> plans_at;               // GPUs -> step seconds (0: none), layout
  const auto plan_at = [&](int g) -> const std::pair<double, std::string>& {
    auto it = plans_at.find(g);
    if (it != plans_at.end()) return it->second;
    std::pair<double, std::string> p{0, ""};
    try {
      const Plan plan = plan_run(layout, job.stats, g, std::max(1, g / nodes));
      p = {plan.est_step_seconds * hist.factor, plan.summary()};
    } catch (const ConfigError&) {
    }
    return plans_at.emplace(g, p).first->second;
  };
  const auto step_at = [&](int g) { return plan_at(g).first; };
  CalendarInput in;
  in.windows = windows;
  in.now = now;
  in.steps = std::max<int64_t>(0, total - hist.done);
  in.limit_s = limit_s - lead;
  in.overhead_s = hist.overhead_s;
  in.size_for = [&](int64_t cap) {
    const int g = calendar_gpus(chain, plans.front().gpus, nodes, cap, step_at);
    return CalendarSize{g, g > 0 ? step_at(g) : 0};
  };
  const WindowCalendar c = plan_calendar(in);
  for (const auto& line : text::split(render_calendar(c, cfg.schedule.window, now), '\n'))
    if (!line.empty()) out << "  " << line << "\n";
  PlannedRun run;
  run.model = cfg.model.name;
  run.params = job.stats.params;
  run.steps = in.steps;
  run.global_batch = cfg.train.global_batch;
  run.tokens_per_sample = job.stats.seq_len > 1 ? job.stats.seq_len : 0;
  run.precision = cfg.precision.dtype;
  std::set<int> counts = {1};
  for (const auto& x : c.stages) counts.insert(x.gpus);
  for (const auto& p : plans) counts.insert(p.gpus);
  for (int g : counts) {
    if (g % nodes != 0) continue;
    RequestRow q;
    q.units = g, q.nodes = nodes, q.step_s = step_at(g), q.layout = plan_at(g).second, q.feasible = q.step_s > 0;
    if (!q.feasible) q.why = "no layout";
    run.rows.push_back(q);
  }
  out << "  request: " << planned_request_paragraph(run) << "\n";
}

}  // namespace gtrain
