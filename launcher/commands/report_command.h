// report_command.h: `gtrain report RUN_DIR [-o FILE] [--format html|md|json] [--price-per-gpu-hour P]`:
// what a run used and what it needs, as one self-contained HTML file, Markdown or JSON.
#pragma once

#include <map>
#include <string>

namespace gtrain {

struct ReportOptions {
  std::string run_dir;
  std::string output;       // "" = <run dir>/report.<format>; "-" = stdout
  std::string format;       // html | md | json ("" = from the output's extension, else html)
  double price = -1;        // per GPU-hour (-1 = log.price_per_gpu_hour)
  bool no_cluster = false;  // --no-cluster: cluster.json as kept, no scheduler query
};

// Writes the report; returns the exit code. ConfigError (exit 2) for a directory that is not a run,
// one of an older layout, or one with no step yet.
int run_report_command(const ReportOptions& o, const std::map<std::string, std::string>& env);

}  // namespace gtrain
