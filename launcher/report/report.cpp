// report.cpp: the report's advice, resource request and summary, and its JSON and Markdown forms.
#include "launcher/report/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "launcher/base/text_util.h"
#include "runtime/core/format.h"

namespace gtrain {

namespace report_text {

std::string money(double v) {
  char b[48];
  std::snprintf(b, sizeof(b), "%.2f", v);
  return b;
}

std::string hours(double h) {
  if (h <= 0) return "0";
  if (h < 1e-4) return "< 0.0001";  // where %g would switch to an exponent
  char b[48];
  std::snprintf(b, sizeof(b), h < 10 ? "%.3g" : "%.1f", h);
  return b;
}

std::string step_time(double s) {
  char b[48];
  if (s <= 0)
    return "unknown";
  else if (s < 1e-3)
    std::snprintf(b, sizeof(b), "%.3g us", s * 1e6);
  else if (s < 1.0)
    std::snprintf(b, sizeof(b), "%.3g ms", s * 1e3);
  else if (s < 120.0)
    std::snprintf(b, sizeof(b), "%.3g s", s);
  else
    return format_duration_words(s);
  return b;
}

std::string large_count(double v) {
  char b[48];
  if (v >= 1e9)
    std::snprintf(b, sizeof(b), "%.3g B", v / 1e9);
  else if (v >= 1e6)
    std::snprintf(b, sizeof(b), "%.3g M", v / 1e6);
  else if (v >= 1e4)
    std::snprintf(b, sizeof(b), "%.3g k", v / 1e3);
  else
    std::snprintf(b, sizeof(b), "%.0f", v);
  return b;
}

std::string percent(double f) {
  char b[48];
  std::snprintf(b, sizeof(b), "%.1f%%", 100.0 * f);
  return b;
}

std::string date_time(double t) {
  return text::local_time(t, "%Y-%m-%d %H:%M:%S");
}

std::string escape_html(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

std::vector<std::pair<std::string, double>> buckets(const TimeBuckets& t, bool with_prepare) {
  if (with_prepare) {  // only runs on text data have the bucket
    return {{"data preparation", t.prepare},  {"start-up", t.startup},
            {"checkpoint load", t.load},      {"training", t.training},
            {"data wait", t.data_wait},       {"save stall", t.save},
            {"evaluation", t.eval},           {"lost work", t.lost},
            {"failure recovery", t.recovery}, {"other", t.other}};
  }
  return {{"start-up", t.startup},    {"checkpoint load", t.load},      {"training", t.training},
          {"data wait", t.data_wait}, {"save stall", t.save},           {"evaluation", t.eval},
          {"lost work", t.lost},      {"failure recovery", t.recovery}, {"other", t.other}};
}

}  // namespace report_text

using namespace report_text;

namespace {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

std::vector<std::string> report_advice(const RunHistory& h) {
  std::vector<std::string> out;
  const std::string unit = h.gpus ? "GPU" : "rank";
  std::vector<double> mfu, ratio;
  for (const auto& p : h.train) {
    if (p.mfu >= 0) mfu.push_back(p.mfu);
    if (p.est_step_s > 0 && p.step_time_s > 0) ratio.push_back(p.step_time_s / p.est_step_s);
  }
  const double m = median(mfu);
  if (!mfu.empty() && m > 1.0) {
    out.push_back(
        "MFU above 100% (median " + percent(m) +
        "): the hardware profile's peak is below what this machine "
        "does (an uncalibrated default); run gtrain plan --calibrate on it so MFU and plans use measured rates.");
  } else if (!mfu.empty() && m < (h.gpus ? 0.25 : 0.05)) {
    out.push_back("Low MFU: " + percent(m) + " of the " + unit + "s' peak (median over " + std::to_string(mfu.size()) +
                  " steps). " +
                  (h.gpus ? "Try precision.dtype = \"bf16\", a larger micro-batch (gtrain plan --explain shows the "
                            "layouts), or fewer GPUs for this model size."
                          : "On CPU ranks the peak is the profile's; gtrain plan --calibrate measures this machine."));
  }
  const double stepping = h.total.training + h.total.data_wait + h.total.lost;
  if (stepping > 0 && h.total.data_wait / stepping > 0.05) {
    out.push_back("Data wait is " + percent(h.total.data_wait / stepping) +
                  " of the step time: raise data.workers or data.prefetch, or put the data on local disk.");
  }
  const double allocated = h.total.allocated();
  if (allocated > 0 && h.total.save / allocated > 0.05) {
    out.push_back("Saves stalled training for " + percent(h.total.save / allocated) +
                  " of the allocated time: set checkpoint.async = true or a longer checkpoint.interval.");
  }
  if (allocated > 0 && h.total.eval / allocated > 0.10) {
    out.push_back("Evaluation took " + percent(h.total.eval / allocated) +
                  " of the allocated time: a longer train.eval_interval or a smaller evaluation set trains more.");
  }
  if (allocated > 0 && h.total.lost / allocated > 0.02) {
    int64_t steps = 0;
    for (const auto& a : h.attempts) steps += a.lost_steps;
    out.push_back(std::to_string(steps) + " steps (" + percent(h.total.lost / allocated) +
                  " of the allocated time) were trained again after a failure or kill: a shorter "
                  "checkpoint.interval loses less.");
  }
  for (const auto& s : h.stages) {
    if (!s.queued && s.gpus && s.world < s.units) {
      out.push_back("Stage " + std::to_string(s.index) + " used " + std::to_string(s.world) + " of the " +
                    std::to_string(s.units) + " GPUs it was allocated (" + s.plan +
                    "): request what the plan uses (gtrain plan --gpus " + std::to_string(s.units) + " says why).");
    }
  }
  const double r = median(ratio);
  if (!ratio.empty() && (r > 1.25 || r < 0.75)) {
    char b[200];
    std::snprintf(b, sizeof(b), "The planner's step-time estimate was off by %+.0f%% (measured / estimated = %.2f): ",
                  100.0 * (r - 1), r);
    out.push_back(std::string(b) +
                  "run gtrain plan --calibrate on this machine so plans and this report's request "
                  "table start from measured rates.");
  }
  return out;
}

void finish_request_rows(ResourceRequest& r) {
  const RequestRow* base = nullptr;
  for (auto& row : r.rows) {
    if (!row.feasible) continue;
    row.finish_s = row.step_s * static_cast<double>(r.steps);
    row.unit_hours = row.finish_s * static_cast<double>(row.units) / 3600.0;
    if (!base) base = &row;
  }
  for (auto& row : r.rows) {
    if (!row.feasible || !base || row.finish_s <= 0) continue;
    row.speedup = base->finish_s / row.finish_s;
    row.efficiency = row.speedup / (static_cast<double>(row.units) / static_cast<double>(base->units));
  }
}

const RequestRow* recommended_row(const ResourceRequest& q) {
  const RequestRow* best = nullptr;
  for (const auto& row : q.rows)
    if (row.feasible && row.efficiency >= 0.7) best = &row;  // the largest count that still scales well
  return best;
}

namespace {

// The request's sentences from the cluster's facts: the GPU-hours it needs against the quota it
// charges, and the quiet window to run it in.
std::string cluster_request(const Report& r, const RequestRow& best) {
  const ClusterFacts& f = *r.cluster;
  std::ostringstream o;
  if (!f.partition.empty() && best.units > f.gpus && r.h.gpus)
    o << " Partition " << f.partition << " has " << plural(f.gpus, "GPU") << ", fewer than that.";
  if (const QuotaLeft* q = f.charged(); q && r.h.gpus) {
    const double need = best.unit_hours;
    o << " It needs " << strf("%.1f", need) << " GPU-hours; " << q->kind << " " << q->name << " has "
      << strf("%.1f", q->left_gpu_hours) << " left";
    if (need <= q->left_gpu_hours) {
      o << ", enough";
      if (q->runs_out > 0)
        o << " if it is not used up first (at its present rate it runs out " << date_time(q->runs_out) << ")";
      o << ".";
    } else {
      const double more = need - q->left_gpu_hours;
      const int64_t reach =
          (r.request.complete ? 0 : r.h.done) +
          static_cast<int64_t>(static_cast<double>(r.request.steps) * std::max(0.0, q->left_gpu_hours) / need);
      o << ": we ask for " << strf("%.1f", more) << " GPU-hours more on " << q->name
        << "; without them the run stops near step " << reach << " of " << r.h.total_steps << ".";
    }
  }
  if (!f.quiet_windows.empty() && best.units <= f.quiet_for_gpus)
    o << " It starts soonest in the cluster's quiet hours: " << f.quiet_windows.front() << ".";
  return o.str();
}

}  // namespace

std::string request_summary(const Report& r) {
  const RunHistory& h = r.h;
  std::ostringstream o;
  o << "Project: training " << (r.model.empty() ? "a model" : r.model);
  if (r.params > 0) o << " (" << large_count(static_cast<double>(r.params)) << " parameters)";
  o << " for " << h.total_steps << " steps of " << h.global_batch << " samples";
  if (h.tokens_per_sample > 0)
    o << " (" << large_count(static_cast<double>(h.total_steps * h.global_batch * h.tokens_per_sample)) << " tokens)";
  o << ", " << (h.precision.empty() ? "fp32" : h.precision) << ", with gtrain.";
  if (h.done > 0 || !h.stages.empty())  // a run not yet started (gtrain plan) has no history to tell
    o << " So far " << h.done << " steps ("
      << percent(h.total_steps > 0 ? static_cast<double>(h.done) / static_cast<double>(h.total_steps) : 0) << ") in "
      << plural(static_cast<int64_t>(h.stages.size()), "stage") << ", " << hours(h.unit_hours) << " " << r.unit()
      << "-hours at a goodput of " << percent(h.goodput) << ".";
  const RequestRow* best = recommended_row(r.request);
  if (best) {
    const RequestRow& base = r.request.rows.front();
    o << (r.request.complete ? " A rerun of all " : " Plan for the ") << r.request.steps
      << (r.request.complete ? " steps would take " : " steps to go: ") << plural(best->units, r.unit()) << " ("
      << best->layout << "), " << step_time(best->step_s) << " a step"
      << (best->measured                  ? " as measured on this run"
          : r.request.calibration.empty() ? " as the planner models it"
                                          : " as calibrated on this run")
      << ", " << format_duration_words(best->finish_s) << " in all (" << hours(best->unit_hours) << " " << r.unit()
      << "-hours, " << percent(best->efficiency) << " scaling efficiency against " << plural(base.units, r.unit())
      << ").";
    if (!r.request.complete)
      o << " Time plan: gtrain stages the run to the granted time limit and resumes on any count, so the request "
           "can be met in windows; the resources are released when the steps are done.";
    if (r.cluster) o << cluster_request(r, *best);
  }
  return o.str();
}

std::vector<std::string> cluster_lines(const Report& r) {
  std::vector<std::string> out;
  if (!r.cluster) return out;
  const ClusterFacts& f = *r.cluster;
  std::string head = "Cluster facts (read by " + f.read_by + ", " + date_time(f.read_at) + ")";
  if (!f.partition.empty()) {
    head += ": partition " + f.partition + ", " + plural(f.gpus, "GPU");
    if (f.free_gpus >= 0) head += " (" + std::to_string(f.free_gpus) + " free then)";
    if (!f.max_time.empty()) head += ", MaxTime " + f.max_time;
  }
  out.push_back(head + ".");
  if (!f.partition.empty()) {
    std::string w = "Quiet windows for " + plural(f.quiet_for_gpus, "GPU") + ": ";
    if (f.history_weeks == 0)
      w += "none known (less than a week of history).";
    else if (f.quiet_windows.empty())
      w += "none (no hour has them free in 80% of the " + std::to_string(f.history_weeks) + " weeks).";
    else
      w += join(f.quiet_windows, "; ") + " (from " + plural(f.history_weeks, "week") + ").";
    out.push_back(w);
  }
  for (const auto& q : f.quotas) {
    std::string l = "Quota: " + q.kind + " " + q.name + (q.is_default ? " (default)" : "") + ": " +
                    strf("%.1f", q.left_gpu_hours) + " of " + strf("%.1f", q.limit_gpu_hours) + " GPU-hours left";
    if (q.burn_gpu_hours_per_day > 0)
      l += "; burning " + strf("%.2f", q.burn_gpu_hours_per_day) + " a day" +
           (q.runs_out > 0 ? ": runs out " + date_time(q.runs_out) : "");
    out.push_back(l + ".");
  }
  if (f.quotas.empty()) out.push_back("Quota: no GPU-hour quota read.");
  return out;
}

nlohmann::json report_json(const Report& r) {
  const RunHistory& h = r.h;
  const auto bucket_json = [](const TimeBuckets& t) {
    nlohmann::json j = {{"queue_s", t.queue}};
    for (const auto& [name, v] : buckets(t)) j[name] = v;
    j["allocated"] = t.allocated();
    return j;
  };
  nlohmann::json stages = nlohmann::json::array();
  for (const auto& s : h.stages) {
    stages.push_back({{"index", s.index},
                      {"start", s.start},
                      {"end", s.end},
                      {"submitted", s.submitted},
                      {"world", s.world},
                      {"units", s.units},
                      {"gpus", s.gpus},
                      {"exit", s.exit},
                      {"plan", s.plan},
                      {"job", s.job},
                      {"step_from", s.step_from},
                      {"step_to", s.step_to},
                      {"recorded", s.recorded},
                      {"queued", s.queued},
                      {"restarts", s.restarts},
                      {"unit_hours", s.unit_hours()},
                      {"seconds", bucket_json(s.t)}});
    if (s.data.is_object()) stages.back()["data"] = s.data;
  }
  int64_t lost_steps = 0;
  for (const auto& a : h.attempts) lost_steps += a.lost_steps;
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : r.request.rows) {
    rows.push_back({{"units", row.units},
                    {"nodes", row.nodes},
                    {"feasible", row.feasible},
                    {"layout", row.layout},
                    {"measured", row.measured},
                    {"why", row.why},
                    {"step_s", row.step_s},
                    {"finish_s", row.finish_s},
                    {"unit_hours", row.unit_hours},
                    {"speedup", row.speedup},
                    {"efficiency", row.efficiency}});
  }
  nlohmann::json j = {{"run_dir", h.run_dir},
                      {"model", r.model},
                      {"params", r.params},
                      {"state", h.state},
                      {"step", h.done},
                      {"total_steps", h.total_steps},
                      {"eta_s", h.eta_s},
                      {"unit", r.unit()},
                      {"unit_hours", h.unit_hours},
                      {"goodput", h.goodput},
                      {"lost_steps", lost_steps},
                      {"attempts", h.attempts.size()},
                      {"seconds", bucket_json(h.total)},
                      {"stages", stages},
                      {"request",
                       {{"rows", rows},
                        {"calibration", r.request.calibration},
                        {"steps", r.request.steps},
                        {"complete", r.request.complete},
                        {"left_out", r.request.left_out},
                        {"windows", r.request.windows},
                        {"error", r.request.error}}},
                      {"summary", request_summary(r)},
                      {"advice", r.advice}};
  if (r.price > 0) j["cost"] = h.unit_hours * r.price;
  if (r.cluster) j["cluster"] = r.cluster->to_json();
  return j;
}

}  // namespace gtrain
