// html_chart.cpp: the reports' number formatting, SVG line chart and style.
#include "launcher/report/html_chart.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "launcher/report/report.h"

namespace gtrain {
namespace html {

using report_text::escape_html;

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof(b), f, v);
  return b;
}

// An axis or tooltip number: 4 digits, large ones as 45k / 1.2M, no "-0".
std::string num(double v) {
  if (std::abs(v) < 1e-12) return "0";
  const double a = std::abs(v);
  if (a >= 1e9) return fmt("%.3gG", v / 1e9);
  if (a >= 1e6) return fmt("%.3gM", v / 1e6);
  if (a >= 1e4) return fmt("%.3gk", v / 1e3);
  return fmt("%.4g", v);
}

// About five round tick values covering [lo, hi].
std::vector<double> ticks(double lo, double hi) {
  std::vector<double> out;
  if (!(hi > lo)) return {lo};
  const double raw = (hi - lo) / 5, mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = raw / mag < 1.5 ? mag : raw / mag < 3.5 ? 2 * mag : raw / mag < 7.5 ? 5 * mag : 10 * mag;
  for (double v = std::ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push_back(v);
  return out;
}

// A line chart over steps: the series, stage boundaries as dashed lines labelled with their GPU counts.
std::string line_chart(const std::string& id, const std::string& title, const std::string& y_label,
                       const std::vector<Series>& series, const std::vector<Marker>& marks, bool legend) {
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  for (const auto& s : series) {
    for (const auto& [x, y] : s.pts) {
      if (!std::isfinite(y)) continue;
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  }
  std::ostringstream o;
  o << "<svg class=\"chart\" id=\"" << id << "\" viewBox=\"0 0 " << kW << " " << kH << "\" role=\"img\">"
    << "<text x=\"" << kLeft << "\" y=\"18\" class=\"t\">" << escape_html(title) << "</text>";
  if (x0 > x1) {
    o << "<text x=\"" << kW / 2 << "\" y=\"" << kH / 2 << "\" class=\"none\">not recorded by this run</text></svg>";
    return o.str();
  }
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y1 = y0 + std::max(1e-9, std::abs(y0) * 0.1), y0 -= std::max(1e-9, std::abs(y0) * 0.1);
  const double pad = (y1 - y0) * 0.05;
  y0 -= pad, y1 += pad;
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  const auto X = [&](double x) { return kLeft + (x - x0) / (x1 - x0) * pw; };
  const auto Y = [&](double y) { return kTop + (1 - (y - y0) / (y1 - y0)) * ph; };
  o << "<rect x=\"" << kLeft << "\" y=\"" << kTop << "\" width=\"" << pw << "\" height=\"" << ph
    << "\" class=\"frame\"/>";
  for (double v : ticks(y0, y1)) {
    o << "<line x1=\"" << kLeft << "\" x2=\"" << kLeft + pw << "\" y1=\"" << Y(v) << "\" y2=\"" << Y(v)
      << "\" class=\"grid\"/><text x=\"" << kLeft - 6 << "\" y=\"" << Y(v) + 4 << "\" class=\"yl\">" << num(v)
      << "</text>";
  }
  for (double v : ticks(x0, x1)) {
    o << "<text x=\"" << X(v) << "\" y=\"" << kTop + ph + 16 << "\" class=\"xl\">" << num(v) << "</text>";
  }
  o << "<text x=\"" << kLeft + pw / 2 << "\" y=\"" << kH - 4 << "\" class=\"xl\">step</text>"
    << "<text x=\"14\" y=\"" << kTop + ph / 2 << "\" class=\"xl\" transform=\"rotate(-90 14 " << kTop + ph / 2 << ")\">"
    << escape_html(y_label) << "</text>";
  for (auto m : marks) {
    if (m.x > x1) continue;
    m.x = std::max(m.x, x0);  // the first stage starts before its first recorded step
    o << "<line x1=\"" << X(m.x) << "\" x2=\"" << X(m.x) << "\" y1=\"" << kTop << "\" y2=\"" << kTop + ph
      << "\" class=\"stage\"/><text x=\"" << X(m.x) + 3 << "\" y=\"" << kTop + 11 << "\" class=\"sl\">"
      << escape_html(m.label) << "</text>";
  }
  double legend_x = kW - kRight;
  for (auto s = series.rbegin(); legend && s != series.rend(); ++s) {
    legend_x -= 12 + 7.0 * static_cast<double>(s->name.size());
    o << "<rect x=\"" << legend_x << "\" y=\"10\" width=\"9\" height=\"9\" fill=\"" << s->color << "\"/><text x=\""
      << legend_x + 12 << "\" y=\"18\" class=\"lg\">" << escape_html(s->name) << "</text>";
  }
  for (const auto& s : series) {
    // At most ~1500 points a line: every k-th, and the last.
    const size_t n = s.pts.size(), k = std::max<size_t>(1, n / 1500);
    if (s.dots) {
      for (const auto& [x, y] : s.pts) {
        o << "<circle cx=\"" << X(x) << "\" cy=\"" << Y(y) << "\" r=\"3.5\" fill=\"" << s.color << "\"><title>step "
          << num(x) << ": " << escape_html(s.name) << " " << num(y) << "</title></circle>";
      }
      continue;
    }
    o << "<polyline fill=\"none\" stroke=\"" << s.color << "\" stroke-width=\"1.5\" points=\"";
    for (size_t i = 0; i < n; ++i) {
      if (i % k != 0 && i + 1 != n) continue;
      if (!std::isfinite(s.pts[i].second)) continue;
      o << fmt("%.1f", X(s.pts[i].first)) << "," << fmt("%.1f", Y(s.pts[i].second)) << " ";
    }
    o << "\"><title>" << escape_html(s.name) << "</title></polyline>";
  }
  o << "</svg>";
  return o.str();
}

const char* report_style() {
  return "body{font:14px/1.45 system-ui,sans-serif;margin:24px auto;max-width:960px;color:#222}"
         "h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd}"
         "table{border-collapse:collapse;margin:6px 0;font-size:13px}td,th{border:1px solid #ddd;padding:3px 7px;"
         "text-align:right}th{background:#f4f4f4}td.l,th.l{text-align:left}.kv td:first-child{font-weight:600;"
         "text-align:left}.kv td{text-align:left}svg.chart{width:100%;height:auto;margin:6px 0;display:block}"
         ".t{font-size:14px;font-weight:600}.xl{font-size:11px;text-anchor:middle;fill:#555}.yl{font-size:11px;"
         "text-anchor:end;fill:#555}.lg{font-size:11px;fill:#333}.sl{font-size:10px;fill:#666}.none{font-size:13px;"
         "text-anchor:middle;fill:#999}.frame{fill:none;stroke:#ccc}.grid{stroke:#eee}.stage{stroke:#888;"
         "stroke-dasharray:4 3}.state{font-weight:700}.advice li{margin:4px 0}blockquote{background:#f7f7f7;"
         "margin:8px 0;padding:8px 12px;border-left:3px solid #2f80ed}";
}

}  // namespace html
}  // namespace gtrain
