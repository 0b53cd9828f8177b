// metrics_log.cpp: JSON-lines metrics writer.
#include "runtime/metrics/metrics_log.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "runtime/core/disk_space.h"
#include "runtime/core/errors.h"
#include "runtime/core/run_dir/run_files.h"
#include "runtime/core/run_dir/run_records.h"
#include "runtime/metrics/tensorboard_writer.h"

namespace gtrain {

MetricsLog::MetricsLog(const std::string& path, bool append) : path_(path), append_(append) {}

MetricsLog::~MetricsLog() {
  if (f_) std::fclose(f_);
}

void MetricsLog::write(const nlohmann::json& record) {
  if (path_.empty()) return;
  std::string line = record.dump() + "\n";
  std::lock_guard<std::mutex> lock(mu_);
  if (!f_) {
    f_ = std::fopen(path_.c_str(), append_ ? "a" : "w");
    if (!f_) throw_if_disk_full(path_, errno, run_file_info(RunFile::metrics).name);
    if (!f_)
      throw Error(path_ + ": cannot open metrics file: " + std::strerror(errno),
                  "check that the disk is not full and the run directory is writable");
  }
  // A record that does not reach the file is an error, not a silent gap in the run's history.
  if (std::fwrite(line.data(), 1, line.size(), f_) != line.size() || std::fflush(f_) != 0) {
    const int err = errno;
    std::clearerr(f_);
    throw_if_disk_full(path_, err, run_file_info(RunFile::metrics).name);
    throw Error(path_ + ": cannot write metrics file: " + std::strerror(err),
                "check that the run directory is writable");
  }
  if (tb_dir_.empty()) return;
  const auto kind = record_kind(record);
  const auto step = record_step(record);
  if ((kind != RecordKind::train && kind != RecordKind::eval) || !step) return;
  if (!tb_) {
    tb_ = std::make_unique<TensorBoardWriter>(tb_dir_);
    tb_->session_start(tb_resumed_at_ + 1, record_time(record));
  }
  std::vector<std::pair<std::string, double>> values;
  for (const auto& [key, v] : record.items()) {
    if (is_record_axis(key) || !v.is_number()) continue;
    values.emplace_back(std::string(record_kind_name(*kind)) + "/" + key, v.get<double>());
  }
  tb_->scalars(*step, record_time(record), values);
}

void MetricsLog::tensorboard(const std::string& dir, int64_t resumed_at) {
  if (path_.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  tb_dir_ = dir;
  tb_resumed_at_ = resumed_at;
  tb_.reset();
}

std::string superseded_records_path(const std::string& metrics_path) {
  const std::string ext = ".jsonl";
  const bool jsonl =
      metrics_path.size() > ext.size() && metrics_path.compare(metrics_path.size() - ext.size(), ext.size(), ext) == 0;
  return (jsonl ? metrics_path.substr(0, metrics_path.size() - ext.size()) : metrics_path) + ".superseded.jsonl";
}

int64_t drop_records_after(const std::string& path, int64_t step, int64_t* last_step) {
  if (last_step) *last_step = -1;
  std::ifstream in(path);
  if (!in) return 0;
  std::string kept, superseded, line;
  int64_t dropped = 0;
  while (std::getline(in, line)) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    const auto at = record_step(j);
    const bool later = at && *at > step;
    if (later && last_step) *last_step = std::max(*last_step, *at);
    // A torn last line (a kill mid-write) goes too; anything else without a later step stays.
    if (j.is_discarded() || later) {
      ++dropped;
      if (later) superseded += line + "\n";
      continue;
    }
    kept += line + "\n";
  }
  in.close();
  if (dropped == 0) return 0;
  if (!superseded.empty()) {
    // Kept beside it for gtrain report: the work a failure or kill lost, trained again from here.
    const std::string side = superseded_records_path(path);
    std::ofstream out(side, std::ios::app);
    out << superseded;
    if (!out.flush())
      throw Error(side + ": cannot write superseded metrics: " + std::strerror(errno),
                  "check that the disk is not full and the run directory is writable");
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << kept;
    if (!out.flush())
      throw Error(tmp + ": cannot write metrics file: " + std::strerror(errno),
                  "check that the disk is not full and the run directory is writable");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    throw Error(path + ": cannot replace metrics file: " + std::strerror(errno),
                "check that the disk is not full and the run directory is writable");
  }
  return dropped;
}

}  // namespace gtrain
