// report_markdown.cpp: `gtrain report --format md`: the HTML report's content as Markdown tables,
// for email and issue trackers (the curves as a table of sampled steps).
#include <cstdio>
#include <sstream>

#include "launcher/report/report.h"
#include "runtime/core/format.h"
#include "runtime/core/text/text_data.h"

namespace gtrain {

using namespace report_text;

namespace {

std::string fixed(double v, const char* fmt) {
  char b[64];
  std::snprintf(b, sizeof(b), fmt, v);
  return b;
}

std::string utilisation(const StageReport& s) {
  if (s.gpu_util >= 0) return fixed(s.gpu_util, "%.0f%% GPU");
  if (s.cpu_util >= 0) return fixed(s.cpu_util, "%.2f cores/rank");
  return "-";
}

void header(const Report& r, std::ostream& o) {
  const RunHistory& h = r.h;
  const double planned = static_cast<double>(h.total_steps * h.global_batch);
  const double seen = static_cast<double>(h.done * h.global_batch);
  o << "# gtrain report: " << h.run_dir << "\n\n| | |\n|---|---|\n";
  o << "| Model | " << (r.model.empty() ? "-" : r.model)
    << (r.params > 0 ? ", " + large_count(static_cast<double>(r.params)) + " parameters" : std::string()) << " |\n";
  o << "| Status | " << h.state << ", step " << h.done << " / " << h.total_steps << " |\n";
  o << "| Samples seen | " << large_count(seen) << " of " << large_count(planned);
  if (h.tokens_per_sample > 0) {
    o << " (" << large_count(seen * static_cast<double>(h.tokens_per_sample)) << " of "
      << large_count(planned * static_cast<double>(h.tokens_per_sample)) << " tokens)";
  }
  o << " |\n| Global batch | " << h.global_batch << ", " << (h.precision.empty() ? "fp32" : h.precision) << " |\n";
  if (!h.stages.empty()) {
    o << "| First stage | " << date_time(h.stages.front().start) << " |\n";
    o << "| Last stage | " << date_time(h.stages.back().start) << " |\n";
  }
  o << "| ETA | "
    << (h.complete     ? "done"
        : h.eta_s >= 0 ? format_duration_words(h.eta_s) + " of training at the last stage's speed"
                       : "unknown")
    << " |\n| " << r.unit() << "-hours | " << hours(h.unit_hours)
    << (r.price > 0 ? ", cost " + money(h.unit_hours * r.price) : std::string()) << " |\n";
  o << "| Goodput | " << percent(h.goodput) << " of the allocated " << r.unit() << " time in training steps |\n\n";
}

void stages(const Report& r, std::ostream& o) {
  const bool gpus = r.h.gpus;  // CPU runs: the ranks are the units
  o << "## Stages\n\n| # | start | end |" << (gpus ? " GPUs |" : "") << " ranks | steps | exit | " << r.unit()
    << "-hours |" << (r.price > 0 ? " cost |" : "") << " goodput | utilisation |\n"
    << "|---|---|---|---|---|---|---|" << (gpus ? "---|" : "") << (r.price > 0 ? "---|" : "") << "---|---|\n";
  for (const auto& s : r.h.stages) {
    const double alloc = s.t.allocated();
    o << "| " << s.index << " | " << (s.queued ? "queued" : date_time(s.start)) << " | "
      << (s.queued ? "-" : date_time(s.end)) << " |" << (gpus ? " " + std::to_string(s.units) + " |" : "") << " "
      << (s.queued ? "-" : std::to_string(s.world)) << " | " << s.step_from << "-" << s.step_to << " | " << s.exit
      << (s.restarts > 0 ? fixed(s.restarts, " (%.0f restarts)") : "") << " | " << hours(s.unit_hours()) << " |"
      << (r.price > 0 ? " " + money(s.unit_hours() * r.price) + " |" : "") << " "
      << (alloc > 0 ? percent(s.t.training / alloc) : "-") << " | " << utilisation(s) << " |\n";
  }
  o << "\n";
  // Conversations: what each stage's rows kept and left out.
  for (const auto& s : r.h.stages)
    if (s.data.is_object()) o << "Stage " << s.index << " data: " << text::data_counts_line(s.data) << ".\n\n";
}

void time_table(const Report& r, std::ostream& o) {
  const RunHistory& h = r.h;
  o << "## Where the time went\n\n"
    << r.unit() << "-hours by bucket (wall time x " << r.unit()
    << "s allocated); the queue in wall-clock hours.\n\n| bucket |";
  for (const auto& s : h.stages) o << " stage " << s.index << " |";
  o << " total | share |\n|---|";
  for (size_t i = 0; i < h.stages.size(); ++i) o << "---|";
  o << "---|---|\n";
  const double alloc = h.total.allocated();
  const auto rows = buckets(h.total);
  for (size_t b = 0; b < rows.size(); ++b) {
    o << "| " << rows[b].first << " |";
    for (const auto& s : h.stages)
      o << " " << hours(buckets(s.t.scaled(s.units), h.total.prepare > 0)[b].second / 3600.0) << " |";
    o << " " << hours(rows[b].second / 3600.0) << " | " << (alloc > 0 ? percent(rows[b].second / alloc) : "-")
      << " |\n";
  }
  o << "| idle in the queue (wall) |";
  for (const auto& s : h.stages) o << " " << hours(s.t.queue / 3600.0) << " |";
  o << " " << hours(h.total.queue / 3600.0) << " | - |\n\n";
}

void curves(const Report& r, std::ostream& o) {
  const RunHistory& h = r.h;
  o << "## Curves (sampled steps)\n\n| step | train loss | eval loss | lr | samples/s | MFU "
       "|\n|---|---|---|---|---|---|\n";
  const size_t n = h.train.size(), every = n > 20 ? (n + 19) / 20 : 1;
  for (size_t i = 0; i < n; ++i) {
    if (i % every != 0 && i + 1 != n) continue;
    const TrainPoint& p = h.train[i];
    std::string eval = "-";
    for (const auto& e : h.eval)
      if (e.step == p.step) eval = fixed(e.loss, "%.4f");
    o << "| " << p.step << " | " << fixed(p.loss, "%.4f") << " | " << eval << " | " << fixed(p.lr, "%.3g") << " | "
      << fixed(p.samples_per_s, "%.1f") << " | " << (p.mfu >= 0 ? percent(p.mfu) : "-") << " |\n";
  }
  o << "\n";
}

void request(const Report& r, std::ostream& o) {
  const ResourceRequest& q = r.request;
  o << "## Resource request\n\n";
  if (!q.error.empty()) {
    o << "No table: " << q.error << "\n\n";
    return;
  }
  o << (q.calibration.empty() ? "Step times as the planner models them." : q.calibration) << " Finish times are for "
    << (q.complete ? "a rerun of all " : "the ") << q.steps
    << (q.complete ? " steps (the run is complete)." : " steps to go.")
    << (q.left_out.empty() ? "" : " (" + q.left_out + ".)") << "\n\n| " << r.unit()
    << "s | nodes | layout | step time | finish | " << r.unit() << "-hours |" << (r.price > 0 ? " cost |" : "")
    << " speed-up | efficiency |\n|---|---|---|---|---|---|" << (r.price > 0 ? "---|" : "") << "---|---|\n";
  for (const auto& row : q.rows) {
    if (!row.feasible) {
      o << "| " << row.units << " | " << row.nodes << " | does not fit: " << row.why << " | | | |"
        << (r.price > 0 ? " |" : "") << " | |\n";
      continue;
    }
    o << "| " << row.units << " | " << row.nodes << " | " << row.layout << " | " << step_time(row.step_s) << " | "
      << format_duration_words(row.finish_s) << " | " << hours(row.unit_hours) << " |"
      << (r.price > 0 ? " " + money(row.unit_hours * r.price) + " |" : "") << " " << fixed(row.speedup, "%.2fx")
      << " | " << percent(row.efficiency) << " |\n";
  }
  if (!q.windows.empty()) o << "\nQuota windows in use: " << q.windows << "\n";
  const auto facts = cluster_lines(r);
  if (!facts.empty()) o << "\n";
  for (const auto& l : facts) o << "- " << l << "\n";
  o << "\n> " << request_summary(r) << "\n\n";
}

}  // namespace

std::string render_markdown(const Report& r) {
  std::ostringstream o;
  header(r, o);
  stages(r, o);
  time_table(r, o);
  curves(r, o);
  request(r, o);
  o << "## Advice\n\n";
  if (r.advice.empty()) o << "Nothing to flag.\n";
  for (const auto& a : r.advice) o << "- " << a << "\n";
  o << "\n_Made by gtrain report at " << date_time(r.made_at) << "._\n";
  return o.str();
}

}  // namespace gtrain
