// metrics_log.cpp: JSON-lines metrics writer.
#include "runtime/metrics/metrics_log.h"

#include <cerrno>
#include <cstring>

#include "runtime/common/errors.h"

namespace gtrain {

MetricsLog::MetricsLog(const std::string& path, bool append) {
  if (path.empty()) return;
  f_ = std::fopen(path.c_str(), append ? "a" : "w");
  if (!f_) throw Error(path + ": cannot open metrics file: " + std::strerror(errno));
}

MetricsLog::~MetricsLog() {
  if (f_) std::fclose(f_);
}

void MetricsLog::write(const nlohmann::json& record) {
  if (!f_) return;
  std::string line = record.dump() + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  std::fwrite(line.data(), 1, line.size(), f_);
  std::fflush(f_);
}

}  // namespace gtrain
