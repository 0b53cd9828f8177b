// tensorboard_writer.h: TensorBoardWriter, TensorBoard event files written by gtrain itself (no
// TensorFlow, no protobuf library): TFRecord framing (length, masked CRC-32C of the length, data,
// masked CRC-32C of the data) around tensorflow.Event messages in protobuf's wire format, holding
// the file version, a SessionLog START where a stage begins, and scalar summaries.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace gtrain {

// TensorFlow's masked CRC-32C of a record's bytes (tensorflow/core/lib/hash/crc32c.h).
uint32_t masked_crc32c(const void* data, size_t n);

class TensorBoardWriter {
 public:
  // Creates `dir` and a new events file in it, named so that files sort in the order they were
  // written (events.out.tfevents.<unix seconds>.<microseconds>.<host>.<pid>), and writes the file
  // version record. Throws Error naming the file when it cannot be written.
  explicit TensorBoardWriter(const std::string& dir);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  // A stage starts training at `first_step`: TensorBoard's reader drops what earlier files hold
  // for this step and later (steps a resume trains again), keeping steps before it.
  void session_start(int64_t first_step, double wall_time);
  // One event at `step` with these tag / value pairs (written and flushed at once).
  void scalars(int64_t step, double wall_time, const std::vector<std::pair<std::string, double>>& values);
  const std::string& path() const { return path_; }

 private:
  void record(const std::string& event);
  std::string path_;
  std::FILE* f_ = nullptr;
};

}  // namespace gtrain
