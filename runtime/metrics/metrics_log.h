// metrics_log.h: metrics.jsonl, one JSON object a line, flushed per record so a killed run keeps it;
// with log.tensorboard, the same training and evaluation numbers as TensorBoard scalars.
#pragma once

#include <cstdio>
#include <memory>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

namespace gtrain {

// Before a resume appends to `path`: removes the records of steps after `step` (a stage killed
// after its last checkpoint ran them; the resumed stage runs them again) and a torn last line, and
// appends the removed records to superseded_records_path(path) (gtrain report's lost work).
// Returns how many lines went; `last_step` (when given) gets the latest step among them (-1: none).
int64_t drop_records_after(const std::string& path, int64_t step, int64_t* last_step = nullptr);
// metrics.jsonl -> metrics.superseded.jsonl: the records of steps a later stage trained again.
std::string superseded_records_path(const std::string& metrics_path);

class MetricsLog {
 public:
  // An empty path disables logging (non-zero ranks). The file is opened (appended to, or truncated)
  // at the first record, so a start that is refused before training leaves it as it was.
  explicit MetricsLog(const std::string& path, bool append = false);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  void write(const nlohmann::json& record);
  bool enabled() const { return !path_.empty(); }
  // Also TensorBoard events in `dir` (a new file for this stage, opened with the first record) for
  // "train" and "eval" records: every number in them but the step and time, as "train/<key>" or
  // "eval/<key>". The stage trains from step `resumed_at` + 1: TensorBoard's reader drops what
  // earlier files hold from there on.
  void tensorboard(const std::string& dir, int64_t resumed_at);

 private:
  std::string path_;
  std::string tb_dir_;
  int64_t tb_resumed_at_ = 0;
  std::unique_ptr<class TensorBoardWriter> tb_;
  bool append_ = false;
  std::FILE* f_ = nullptr;
  std::mutex mu_;
};

}  // namespace gtrain
