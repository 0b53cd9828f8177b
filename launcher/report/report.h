// report.h: the content of `gtrain report` (torch-free): the run's history, its model and price,
// the resource request (the planner's what-if table calibrated by what the run measured) and the
// advice; rendered as one self-contained HTML file (report_html.cpp), Markdown or JSON (report.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/report/run_history.h"
#include "runtime/core/run_dir/cluster_facts.h"

namespace gtrain {

// One row of the resource request: a device count and what the run would take on it.
struct RequestRow {
  int64_t units = 0, nodes = 0;
  bool feasible = false;
  std::string layout;                  // "dp=4 tp=1 pp=1 zero=1 micro_batch=8" (feasible rows)
  bool measured = false;               // a stage ran on this count: step_s is measured, layout the one it ran
  std::string why;                     // why nothing fits (infeasible rows)
  double step_s = 0;                   // calibrated seconds per step
  double finish_s = 0;                 // the steps to go (or the whole run, once complete) at step_s
  double unit_hours = 0;               // finish_s x units / 3600
  double speedup = 0, efficiency = 0;  // against the smallest feasible count
};

struct ResourceRequest {
  std::vector<RequestRow> rows;
  std::string calibration;  // how the rows were calibrated ("" = the model alone)
  double factor = 1;        // measured / modelled seconds per step
  int64_t steps = 0;        // the steps finish_s counts
  bool complete = false;    // the run is done: the rows say what a rerun would take
  std::string windows;      // the quota windows in use ("" = none)
  std::string left_out;     // counts the table leaves out, and why ("" = none)
  std::string error;        // why there is no table ("" = there is)
};

struct Report {
  RunHistory h;
  std::string model;  // name
  int64_t params = 0;
  double price = 0;  // per GPU-hour (0 = none)
  ResourceRequest request;
  std::vector<std::string> advice;
  std::optional<ClusterFacts> cluster;  // what gtrain last read of the run's cluster (none: not submitted)
  double made_at = 0;                   // unix time
  std::string unit() const { return h.gpus ? "GPU" : "rank"; }
};

// Jobstats-style advice from what the run measured (empty: nothing to flag).
std::vector<std::string> report_advice(const RunHistory& h);

// The rows' speed-up, efficiency, finish time and unit-hours from their step times.
void finish_request_rows(ResourceRequest& r);

// The row the request recommends: the largest count that still scales at 70% (nullptr = none fits).
const RequestRow* recommended_row(const ResourceRequest& q);

// A plain-text paragraph for a resource request (goal, plan, time plan, release; with the cluster's
// facts: the quota it needs against what is left, and when to run it).
std::string request_summary(const Report& r);

// The cluster's facts as lines for the resource request section (none without them).
std::vector<std::string> cluster_lines(const Report& r);

nlohmann::json report_json(const Report& r);
std::string render_markdown(const Report& r);
std::string render_html(const Report& r);

// Shared by the renderers.
namespace report_text {
std::string money(double v);
// Hours a person reads: "12.5", "0.42", "< 0.01" (never "6.91e-06").
std::string hours(double h);
// A step time in the unit that shows it: "4.39 ms", "0.351 s", "2.5 min".
std::string step_time(double seconds);
std::string percent(double fraction);
std::string large_count(double v);  // "1.23 M", "45.6 k"
std::string date_time(double unix_time);
std::string escape_html(const std::string& s);
// The buckets of `t` as (name, seconds) in display order (queue excluded); "data preparation" first
// when `with_prepare` (a run on text data: the run's total has it), so stages' rows line up with it.
std::vector<std::pair<std::string, double>> buckets(const TimeBuckets& t, bool with_prepare);
inline std::vector<std::pair<std::string, double>> buckets(const TimeBuckets& t) {
  return buckets(t, t.prepare > 0);
}
}  // namespace report_text

}  // namespace gtrain
