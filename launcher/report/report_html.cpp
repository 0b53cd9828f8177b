// report_html.cpp: `gtrain report`'s HTML: one self-contained file (inline CSS and SVG, no script,
// no network) that opens from disk and survives email: header, curves, timeline, time buckets,
// stages, resource request, advice. Every chart is an <svg class="chart">; hovering a point or a
// bar shows its numbers (<title>).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "launcher/report/html_chart.h"
#include "launcher/report/report.h"
#include "runtime/core/format.h"

namespace gtrain {

using namespace report_text;
using namespace html;

namespace {

const std::map<std::string, std::string>& bucket_colors() {
  static const std::map<std::string, std::string> c = {
      {"start-up", "#f2c14e"},   {"checkpoint load", "#f78154"}, {"data preparation", "#c9a227"},
      {"training", "#4caf50"},   {"data wait", "#9c89b8"},       {"save stall", "#2f80ed"},
      {"evaluation", "#56ccf2"}, {"lost work", "#d62828"},       {"failure recovery", "#8d0801"},
      {"other", "#bdbdbd"},      {"queued", "#e0e0e0"}};
  return c;
}

// Each stage as a bar over wall-clock time: queued, starting, training (saves marked), lost.
std::string timeline_chart(const Report& r) {
  const RunHistory& h = r.h;
  double t0 = 1e300, t1 = -1e300;
  for (const auto& s : h.stages) {
    t0 = std::min(t0, s.submitted > 0 ? s.submitted : s.start);
    t1 = std::max(t1, s.end);
  }
  const double row = 26, height = kTop + row * static_cast<double>(h.stages.size()) + kBottom;
  std::ostringstream o;
  o << "<svg class=\"chart\" id=\"timeline\" viewBox=\"0 0 " << kW << " " << height << "\" role=\"img\">"
    << "<text x=\"" << kLeft << "\" y=\"18\" class=\"t\">Timeline (wall clock): queued, starting, training, saving, "
    << "lost</text>";
  if (!(t1 > t0)) t1 = t0 + 1;
  const double left = 120, pw = kW - left - kRight;
  const auto X = [&](double t) { return left + (t - t0) / (t1 - t0) * pw; };
  const auto bar = [&](double a, double b, double y, const std::string& color, const std::string& tip, double hh) {
    if (!(b > a)) return;
    o << "<rect x=\"" << fmt("%.2f", X(a)) << "\" y=\"" << y << "\" width=\"" << fmt("%.2f", std::max(1.0, X(b) - X(a)))
      << "\" height=\"" << hh << "\" fill=\"" << color << "\"><title>" << escape_html(tip) << "</title></rect>";
  };
  const auto& col = bucket_colors();
  for (size_t i = 0; i < h.stages.size(); ++i) {
    const StageReport& s = h.stages[i];
    const double y = kTop + row * static_cast<double>(i);
    o << "<text x=\"" << left - 6 << "\" y=\"" << y + 15 << "\" class=\"yl\">stage " << s.index << ": " << s.units
      << " " << r.unit() << (s.units == 1 ? "" : "s") << "</text>";
    const double ready = i > 0 ? std::max(s.submitted, h.stages[i - 1].end) : s.submitted;
    if (s.submitted > 0)
      bar(ready, s.start, y + 4, col.at("queued"), "queued " + format_duration_words(s.start - ready), row - 8);
    if (s.queued) continue;
    double first = s.end, last = s.start;
    for (const auto& a : h.attempts) {
      if (a.stage != static_cast<int>(i)) continue;
      first = std::min(first, a.first_step);
      last = std::max(last, a.end);
    }
    bar(s.start, std::min(first, s.end), y + 4, col.at("start-up"),
        "starting " + format_duration_words(std::min(first, s.end) - s.start), row - 8);
    bar(first, last, y + 4, col.at("training"),
        "training steps " + std::to_string(s.step_from) + "-" + std::to_string(s.step_to), row - 8);
    for (const auto& p : h.retrained) {
      if (h.attempts[static_cast<size_t>(p.attempt)].stage != static_cast<int>(i)) continue;
      bar(p.time - p.step_time_s * static_cast<double>(p.span), p.time, y + 4, col.at("lost work"),
          "step " + std::to_string(p.step) + " trained again later (lost)", row - 8);
    }
    for (const auto& v : h.saves) {
      if (v.time >= s.start && v.time <= s.end + 1)
        bar(v.time - std::max(v.stall_s, (t1 - t0) / pw), v.time, y + 1, col.at("save stall"),
            "save at step " + std::to_string(v.step) + ", stall " + fmt("%.3f s", v.stall_s), row - 2);
    }
    bar(last, s.end, y + 4, col.at("other"), "ending: " + s.exit, row - 8);
  }
  const double axis_y = kTop + row * static_cast<double>(h.stages.size()) + 14;
  for (double f : {0.0, 0.25, 0.5, 0.75, 1.0}) {
    const double t = t0 + f * (t1 - t0);
    o << "<text x=\"" << X(t) << "\" y=\"" << axis_y << "\" class=\"xl\""
      << (f == 1.0 ? " style=\"text-anchor:end\"" : "") << ">" << date_time(t).substr(5) << "</text>";
  }
  o << "</svg>";
  return o.str();
}

// Allocated time by bucket: a stacked bar per stage and one for the run.
std::string buckets_chart(const Report& r) {
  const RunHistory& h = r.h;
  std::vector<std::pair<std::string, TimeBuckets>> rows;
  for (const auto& s : h.stages)
    if (!s.queued) rows.push_back({"stage " + std::to_string(s.index), s.t.scaled(s.units)});
  rows.push_back({"total", h.total});
  const double row = 28, height = kTop + row * static_cast<double>(rows.size()) + 40;
  std::ostringstream o;
  o << "<svg class=\"chart\" id=\"buckets\" viewBox=\"0 0 " << kW << " " << height << "\" role=\"img\">"
    << "<text x=\"" << kLeft << "\" y=\"18\" class=\"t\">Where the allocated " << r.unit() << " time went (goodput "
    << percent(h.goodput) << ")</text>";
  const double left = 90, pw = kW - left - kRight;
  const auto& col = bucket_colors();
  for (size_t i = 0; i < rows.size(); ++i) {
    const double y = kTop + row * static_cast<double>(i), total = rows[i].second.allocated();
    o << "<text x=\"" << left - 6 << "\" y=\"" << y + 16 << "\" class=\"yl\">" << rows[i].first << "</text>";
    double x = left;
    for (const auto& [name, v] : buckets(rows[i].second)) {
      if (total <= 0 || v <= 0) continue;
      const double w = v / total * pw;
      o << "<rect x=\"" << fmt("%.2f", x) << "\" y=\"" << y + 4 << "\" width=\"" << fmt("%.2f", w) << "\" height=\""
        << row - 8 << "\" fill=\"" << col.at(name) << "\"><title>" << rows[i].first << ": " << name << " "
        << hours(v / 3600.0) << " " << r.unit() << "-h (" << percent(v / total) << ")</title></rect>";
      x += w;
    }
  }
  double lx = left;
  const double ly = kTop + row * static_cast<double>(rows.size()) + 14;
  for (const auto& [name, v] : buckets(h.total)) {
    o << "<rect x=\"" << lx << "\" y=\"" << ly - 9 << "\" width=\"9\" height=\"9\" fill=\"" << col.at(name)
      << "\"/><text x=\"" << lx + 12 << "\" y=\"" << ly << "\" class=\"lg\">" << name << "</text>";
    lx += 24 + 6.5 * static_cast<double>(name.size());
  }
  o << "</svg>";
  return o.str();
}

void header(const Report& r, std::ostream& o) {
  const RunHistory& h = r.h;
  const double planned = static_cast<double>(h.total_steps * h.global_batch);
  const double seen = static_cast<double>(h.done * h.global_batch);
  o << "<h1>gtrain report</h1><div>" << escape_html(h.run_dir) << "</div><table class=\"kv\">";
  const auto kv = [&](const std::string& k, const std::string& v) {
    o << "<tr><td>" << k << "</td><td>" << v << "</td></tr>";
  };
  kv("Model", escape_html(r.model.empty() ? "-" : r.model) +
                  (r.params > 0 ? ", " + large_count(static_cast<double>(r.params)) + " parameters" : ""));
  kv("Status", "<span class=\"state\">" + escape_html(h.state) + "</span>, step " + std::to_string(h.done) + " / " +
                   std::to_string(h.total_steps));
  std::string samples = large_count(seen) + " of " + large_count(planned) + " samples";
  if (h.tokens_per_sample > 0)
    samples += " (" + large_count(seen * static_cast<double>(h.tokens_per_sample)) + " of " +
               large_count(planned * static_cast<double>(h.tokens_per_sample)) + " tokens)";
  kv("Seen", samples);
  kv("Global batch", std::to_string(h.global_batch) + ", " + (h.precision.empty() ? "fp32" : h.precision));
  if (!h.stages.empty()) {
    kv("First stage", date_time(h.stages.front().start));
    kv("Last stage", date_time(h.stages.back().start) + " (" + std::to_string(h.stages.size()) + " stages)");
  }
  kv("ETA", h.complete     ? "done"
            : h.eta_s >= 0 ? format_duration_words(h.eta_s) + " of training at the last stage's speed"
                           : "unknown");
  kv(r.unit() + "-hours", hours(h.unit_hours) + (r.price > 0 ? ", cost " + money(h.unit_hours * r.price) : ""));
  kv("Goodput", percent(h.goodput) + " of the allocated " + r.unit() + " time in training steps");
  o << "</table>";
}

void stages_table(const Report& r, std::ostream& o) {
  const bool gpus = r.h.gpus;  // CPU runs: the ranks are the units
  o << "<h2>Stages</h2><table><tr><th>#</th><th class=\"l\">start</th><th class=\"l\">end</th>"
    << (gpus ? "<th>GPUs</th>" : "") << "<th>ranks</th><th>steps</th><th class=\"l\">exit</th><th>" << r.unit()
    << "-hours</th>" << (r.price > 0 ? "<th>cost</th>" : "")
    << "<th>goodput</th><th>utilisation</th><th>memory/rank</th></tr>";
  for (const auto& s : r.h.stages) {
    const double alloc = s.t.allocated();
    o << "<tr><td>" << s.index << "</td><td class=\"l\">" << (s.queued ? "queued" : date_time(s.start))
      << "</td><td class=\"l\">" << (s.queued ? "-" : date_time(s.end)) << "</td>"
      << (gpus ? "<td>" + std::to_string(s.units) + "</td>" : "") << "<td>"
      << (s.queued ? "-" : std::to_string(s.world)) << "</td><td>" << s.step_from << "-" << s.step_to
      << "</td><td class=\"l\">" << escape_html(s.exit)
      << (s.restarts > 0 ? " (" + std::to_string(s.restarts) + " restarts)" : "") << "</td><td>"
      << hours(s.unit_hours()) << "</td>" << (r.price > 0 ? "<td>" + money(s.unit_hours() * r.price) + "</td>" : "")
      << "<td>" << (alloc > 0 ? percent(s.t.training / alloc) : "-") << "</td><td>"
      << (s.gpu_util >= 0   ? fmt("%.0f%% GPU", s.gpu_util)
          : s.cpu_util >= 0 ? fmt("%.2f cores", s.cpu_util)
                            : "-")
      << "</td><td>" << (s.mem_mb >= 0 ? format_size(s.mem_mb * 1048576.0) : "-") << "</td></tr>";
  }
  o << "</table>";
}

void buckets_table(const Report& r, std::ostream& o) {
  const RunHistory& h = r.h;
  o << "<table><tr><th class=\"l\">bucket</th>";
  for (const auto& s : h.stages) o << "<th>stage " << s.index << "</th>";
  o << "<th>total " << r.unit() << "-h</th><th>share</th></tr>";
  const double alloc = h.total.allocated();
  const auto rows = buckets(h.total);
  for (size_t b = 0; b < rows.size(); ++b) {
    o << "<tr><td class=\"l\">" << rows[b].first << "</td>";
    for (const auto& s : h.stages)
      o << "<td>" << hours(buckets(s.t.scaled(s.units), h.total.prepare > 0)[b].second / 3600.0) << "</td>";
    o << "<td>" << hours(rows[b].second / 3600.0) << "</td><td>" << (alloc > 0 ? percent(rows[b].second / alloc) : "-")
      << "</td></tr>";
  }
  o << "<tr><td class=\"l\">idle in the queue (wall h)</td>";
  for (const auto& s : h.stages) o << "<td>" << hours(s.t.queue / 3600.0) << "</td>";
  o << "<td>" << hours(h.total.queue / 3600.0) << "</td><td>-</td></tr></table>";
}

void request_section(const Report& r, std::ostream& o) {
  const ResourceRequest& q = r.request;
  o << "<h2>Resource request</h2>";
  if (!q.error.empty()) {
    o << "<p>No table: " << escape_html(q.error) << "</p>";
    return;
  }
  o << "<p>" << escape_html(q.calibration.empty() ? "Step times as the planner models them." : q.calibration)
    << " Finish times are for " << (q.complete ? "a rerun of all " : "the ") << q.steps
    << (q.complete ? " steps (the run is complete)." : " steps to go.")
    << (q.left_out.empty() ? "" : " (" + escape_html(q.left_out) + ".)") << "</p><table><tr><th>" << r.unit()
    << "s</th><th>nodes</th><th class=\"l\">layout</th><th>step time</th><th>finish</th><th>" << r.unit()
    << "-hours</th>" << (r.price > 0 ? "<th>cost</th>" : "") << "<th>speed-up</th><th>efficiency</th></tr>";
  for (const auto& row : q.rows) {
    o << "<tr><td>" << row.units << "</td><td>" << row.nodes << "</td>";
    if (!row.feasible) {
      o << "<td class=\"l\" colspan=\"" << (r.price > 0 ? 7 : 6) << "\">does not fit: " << escape_html(row.why)
        << "</td></tr>";
      continue;
    }
    o << "<td class=\"l\">" << escape_html(row.layout) << "</td><td>" << step_time(row.step_s) << "</td><td>"
      << format_duration_words(row.finish_s) << "</td><td>" << hours(row.unit_hours) << "</td>"
      << (r.price > 0 ? "<td>" + money(row.unit_hours * r.price) + "</td>" : "") << "<td>" << fmt("%.2fx", row.speedup)
      << "</td><td>" << percent(row.efficiency) << "</td></tr>";
  }
  o << "</table>";
  if (!q.windows.empty()) o << "<p>Quota windows in use: " << escape_html(q.windows) << "</p>";
  const auto facts = cluster_lines(r);
  if (!facts.empty()) {
    o << "<ul class=\"cluster\">";
    for (const auto& l : facts) o << "<li>" << escape_html(l) << "</li>";
    o << "</ul>";
  }
  o << "<blockquote>" << escape_html(request_summary(r)) << "</blockquote>";
}

}  // namespace

std::string render_html(const Report& r) {
  const RunHistory& h = r.h;
  std::vector<Marker> marks;
  for (const auto& s : h.stages)
    if (!s.queued)
      marks.push_back(
          {static_cast<double>(s.step_from), std::to_string(s.units) + " " + r.unit() + (s.units == 1 ? "" : "s")});
  Series train{"train loss", "#2f80ed", {}, false}, eval{"eval loss", "#d62828", {}, true};
  Series lr{"learning rate", "#6a4c93", {}, false},
      rate{h.tokens_per_sample > 0 ? "tokens/s" : "samples/s", "#4caf50", {}, false};
  Series mfu{"MFU %", "#f78154", {}, false};
  for (const auto& p : h.train) {
    const double x = static_cast<double>(p.step);
    train.pts.push_back({x, p.loss});
    lr.pts.push_back({x, p.lr});
    rate.pts.push_back({x, h.tokens_per_sample > 0 && p.tokens_per_s > 0 ? p.tokens_per_s : p.samples_per_s});
    if (p.mfu >= 0) mfu.pts.push_back({x, 100.0 * p.mfu});
  }
  for (const auto& e : h.eval) eval.pts.push_back({static_cast<double>(e.step), e.loss});
  std::ostringstream o;
  o << "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>gtrain report: " << escape_html(h.run_dir)
    << "</title><style>" << report_style() << "</style></head><body>";
  header(r, o);
  o << "<h2>Curves</h2>";
  o << line_chart("loss", "Loss (dashed lines: stage starts, with their " + r.unit() + " counts)", "loss",
                  eval.pts.empty() ? std::vector<Series>{train} : std::vector<Series>{train, eval}, marks);
  o << line_chart("lr", "Learning rate", "lr", {lr}, marks);
  o << line_chart("throughput", "Throughput", rate.name, {rate}, marks);
  o << line_chart("mfu", "Model FLOPs utilisation", "MFU %", {mfu}, marks);
  o << "<h2>Timeline</h2>" << timeline_chart(r);
  o << "<h2>Where the time went</h2>" << buckets_chart(r);
  buckets_table(r, o);
  stages_table(r, o);
  request_section(r, o);
  o << "<h2>Advice</h2><ul class=\"advice\">";
  if (r.advice.empty()) o << "<li>Nothing to flag.</li>";
  for (const auto& a : r.advice) o << "<li>" << escape_html(a) << "</li>";
  o << "</ul><p style=\"color:#888\">Made by gtrain report at " << date_time(r.made_at) << ".</p></body></html>\n";
  return o.str();
}

}  // namespace gtrain
