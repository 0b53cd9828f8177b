// html_chart.h: the pieces of gtrain's self-contained HTML reports (gtrain report, a sweep's
// report): the page style, number formatting for axes and tooltips, and the SVG line chart over
// steps (series as lines or dots, dashed markers; hovering shows the numbers through <title>).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace gtrain {
namespace html {

constexpr double kW = 920, kH = 260, kLeft = 64, kRight = 16, kTop = 34, kBottom = 38;  // a chart's box

std::string fmt(const char* f, double v);         // printf of one double
std::string num(double v);                        // an axis or tooltip number: 4 digits, 45k / 1.2M, no "-0"
std::vector<double> ticks(double lo, double hi);  // about five round values covering [lo, hi]

struct Series {
  std::string name, color;
  std::vector<std::pair<double, double>> pts;
  bool dots = false;  // markers instead of a line (eval points)
};

struct Marker {
  double x;
  std::string label;
};

// A line chart over steps: the series, `marks` as dashed vertical lines with their labels; a legend
// of the series' names unless `legend` is false (many series: each line's <title> names it).
std::string line_chart(const std::string& id, const std::string& title, const std::string& y_label,
                       const std::vector<Series>& series, const std::vector<Marker>& marks, bool legend = true);

// The reports' CSS (inline in each page).
const char* report_style();

}  // namespace html
}  // namespace gtrain
