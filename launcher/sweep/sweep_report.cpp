// sweep_report.cpp: a sweep's HTML and Markdown report from its ledger and its trials' metrics.
#include "launcher/sweep/sweep_report.h"

#include <cmath>
#include <map>
#include <sstream>

#include "launcher/report/html_chart.h"
#include "launcher/report/report.h"
#include "runtime/core/format.h"
#include "runtime/core/run_dir/run_records.h"

namespace gtrain {
namespace {

using report_text::escape_html;

std::string values_of(const TrialRecord& t) {
  std::string v;
  for (const auto& [k, x] : t.params) v += (v.empty() ? "" : ", ") + k + " = " + x.dump();
  return v;
}

// "finished", "stopped: why" or "not finished".
std::string state_of(const SweepLedger& l) {
  return l.finished ? "finished" : !l.stop_reason.empty() ? "stopped: " + l.stop_reason : "not finished";
}

// Trial i's colour: spread around the hue circle.
std::string color(size_t i, size_t n) {
  return strf("hsl(%d,65%%,45%%)",
              static_cast<int>(360.0 * static_cast<double>(i) / static_cast<double>(std::max<size_t>(1, n))));
}

// Every trial's metric at its rungs and its training loss, one series each.
std::pair<std::vector<html::Series>, std::vector<html::Series>> curves(const SweepLedger& l, const std::string& dir) {
  std::vector<html::Series> metric, loss;
  for (size_t i = 0; i < l.trials.size(); ++i) {
    const auto& t = l.trials[i];
    html::Series m{t.name(), color(i, l.trials.size()), {}, false};
    for (size_t k = 0; k < t.results.size(); ++k) {
      if (t.results[k]) m.pts.emplace_back(static_cast<double>(l.rungs[k].steps), *t.results[k]);
    }
    if (m.pts.size() == 1) m.dots = true;  // one point: a marker, not a line
    metric.push_back(std::move(m));
    html::Series s{t.name(), color(i, l.trials.size()), {}, false};
    for (const auto& r : read_records_of<TrainRecord>(trial_run_dir(dir, t) + "/metrics.jsonl"))
      s.pts.emplace_back(static_cast<double>(r.step), r.loss);
    loss.push_back(std::move(s));
  }
  return {metric, loss};
}

void trials_table_html(const SweepLedger& l, std::ostream& o) {
  o << "<table><tr><th class=\"l\">trial</th><th class=\"l\">state</th><th>rung</th><th>steps</th><th>"
    << escape_html(l.metric) << "</th><th>runs</th><th>rank-hours</th><th>outside steps</th>"
    << "<th class=\"l\">values</th></tr>";
  for (size_t i = 0; i < l.trials.size(); ++i) {
    const auto& t = l.trials[i];
    const int64_t rung = t.reached_rung();
    o << "<tr" << (static_cast<int64_t>(i) == l.best ? " style=\"font-weight:700\"" : "") << "><td class=\"l\">"
      << t.name() << "</td><td class=\"l\">" << name_of(t.state) << "</td><td>"
      << (rung < 0 ? "-" : std::to_string(rung)) << "</td><td>" << t.steps << "</td><td>" << t.reached_result()
      << "</td><td>" << t.runs << "</td><td>" << report_text::hours(t.rank_seconds / 3600.0) << "</td><td>"
      << (t.rank_seconds > 0 ? report_text::percent(t.pause_rank_seconds / t.rank_seconds) : "-")
      << "</td><td class=\"l\">" << escape_html(values_of(t))
      << (t.failure.empty() ? "" : "<br><i>" + escape_html(t.failure) + "</i>") << "</td></tr>";
  }
  o << "</table>";
}

}  // namespace

std::string render_sweep_html(const SweepLedger& l, const std::string& dir, const std::string& best_toml) {
  const SweepLedger::Totals s = l.totals();
  std::ostringstream o;
  o << "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>gtrain sweep report: " << escape_html(dir)
    << "</title><style>" << html::report_style() << "</style></head><body>";
  o << "<h1>gtrain sweep report</h1><div>" << escape_html(dir) << "</div><table class=\"kv\">";
  const auto kv = [&](const std::string& k, const std::string& v) {
    o << "<tr><td>" << k << "</td><td>" << v << "</td></tr>";
  };
  kv("search", escape_html(l.method + ", " + l.metric + " " + l.mode + ", " + std::to_string(l.trials.size()) +
                           " trials; rungs " + l.rungs_text() + " trials"));
  kv("state", "<span class=\"state\">" + escape_html(state_of(l)) + "</span>");
  std::string counts;
  for (const char* st : {"done", "stopped", "failed", "running", "paused", "pending"}) {
    counts += (counts.empty() ? "" : ", ") + std::to_string(s.counts.at(st)) + " " + st;
  }
  kv("trials", counts + "; " + std::to_string(l.promotions.size()) + " promotions");
  kv("cost", report_text::hours(s.rank_s / 3600.0) + " rank-hours (GPU-hours with GPUs); " +
                 report_text::percent(s.rank_s > 0 ? s.outside_s / s.rank_s : 0.0) +
                 " of it outside training steps (start-up, resume, rung evaluations and saves)");
  if (l.best >= 0) {
    const auto& b = l.trials[static_cast<size_t>(l.best)];
    kv("best", escape_html(b.name() + ": " + l.metric + " " + b.reached_result() + " (" + values_of(b) + ")"));
  }
  o << "</table>";
  auto [metric, loss] = curves(l, dir);
  const bool many = l.trials.size() > 8;  // the lines' own titles name them
  std::vector<html::Marker> marks;
  for (size_t k = 0; k + 1 < l.rungs.size(); ++k)
    marks.push_back({static_cast<double>(l.rungs[k].steps), "rung " + std::to_string(k)});
  o << "<h2>Every trial</h2>"
    << html::line_chart("metric", l.metric + " at each rung a trial reached (dashed: rungs)", l.metric, metric, marks,
                        !many)
    << html::line_chart("loss", "Training loss of every trial", "loss", loss, marks, !many);
  o << "<h2>Trials</h2>";
  trials_table_html(l, o);
  o << "<h2>Promotions</h2><table><tr><th>to rung</th><th>steps</th><th class=\"l\">trials, in the order "
       "promoted</th></tr>";
  for (size_t k = 1; k < l.rungs.size(); ++k) {
    std::string names;
    for (const auto& p : l.promotions) {
      if (p.to_rung == static_cast<int64_t>(k))
        names += (names.empty() ? "" : ", ") + l.trials[static_cast<size_t>(p.trial)].name();
    }
    o << "<tr><td>" << k << "</td><td>" << l.rungs[k].steps << "</td><td class=\"l\">" << (names.empty() ? "-" : names)
      << "</td></tr>";
  }
  o << "</table>";
  if (!best_toml.empty()) o << "<h2>The best trial's job</h2><pre>" << escape_html(best_toml) << "</pre>";
  o << "</body></html>\n";
  return o.str();
}

std::string render_sweep_markdown(const SweepLedger& l, const std::string& dir, const std::string& best_toml) {
  const SweepLedger::Totals s = l.totals();
  std::ostringstream o;
  o << "# gtrain sweep report: " << dir << "\n\n"
    << "- search: " << l.method << ", " << l.metric << " " << l.mode << ", " << l.trials.size() << " trials; rungs "
    << l.rungs_text() << " trials\n- state: " << state_of(l) << "\n- promotions: " << l.promotions.size()
    << "\n- cost: " << report_text::hours(s.rank_s / 3600.0) << " rank-hours, "
    << report_text::percent(s.rank_s > 0 ? s.outside_s / s.rank_s : 0.0) << " outside training steps\n";
  if (l.best >= 0) o << "- best: " << l.trials[static_cast<size_t>(l.best)].name() << "\n";
  o << "\n| trial | state | steps | " << l.metric << " | runs | rank-hours | values |\n|---|---|---|---|---|---|---|\n";
  for (const auto& t : l.trials) {
    o << "| " << t.name() << " | " << name_of(t.state) << " | " << t.steps << " | " << t.reached_result() << " | "
      << t.runs << " | " << report_text::hours(t.rank_seconds / 3600.0) << " | " << values_of(t)
      << (t.failure.empty() ? "" : " (" + t.failure + ")") << " |\n";
  }
  if (!best_toml.empty()) o << "\n## The best trial's job\n\n```toml\n" << best_toml << "```\n";
  return o.str();
}

}  // namespace gtrain
