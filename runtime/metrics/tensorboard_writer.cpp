// tensorboard_writer.cpp: TFRecord-framed tensorflow.Event messages, encoded by hand.
#include "runtime/metrics/tensorboard_writer.h"

#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "runtime/checkpoint/crc32c.h"
#include "runtime/core/disk_space.h"
#include "runtime/core/errors.h"

namespace gtrain {
namespace {

// Protobuf wire format: a field's key is (number << 3) | wire type.
constexpr int kVarint = 0, k64Bit = 1, kLengthDelimited = 2, k32Bit = 5;

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_key(std::string& out, int field, int wire_type) {
  put_varint(out, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire_type));
}

template <class T>
void put_fixed(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian hosts only (x86-64, aarch64)
  out.append(b, sizeof(T));
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

// tensorflow.Event: wall_time = 1 (double), step = 2 (int64), file_version = 3 (string),
// summary = 5 (Summary), session_log = 7 (SessionLog).
std::string event_head(double wall_time, int64_t step) {
  std::string e;
  put_key(e, 1, k64Bit);
  put_fixed(e, wall_time);
  if (step != 0) {
    put_key(e, 2, kVarint);
    put_varint(e, static_cast<uint64_t>(step));
  }
  return e;
}

double unix_now() {
  timeval tv{};
  ::gettimeofday(&tv, nullptr);
  return static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) * 1e-6;
}

}  // namespace

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t crc = crc32c(data, n);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  timeval tv{};
  ::gettimeofday(&tv, nullptr);
  char host[256] = {0};
  if (::gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "localhost");
  char name[512];
  std::snprintf(name, sizeof(name), "events.out.tfevents.%010lld.%06lld.%s.%d", static_cast<long long>(tv.tv_sec),
                static_cast<long long>(tv.tv_usec), host, static_cast<int>(::getpid()));
  path_ = (std::filesystem::path(dir) / name).string();
  f_ = std::fopen(path_.c_str(), "wb");
  if (!f_)
    throw Error(path_ + ": cannot create the TensorBoard events file: " + std::strerror(errno),
                "check that the run directory is writable, or set log.tensorboard = false");
  std::string e = event_head(static_cast<double>(tv.tv_sec) + static_cast<double>(tv.tv_usec) * 1e-6, 0);
  put_bytes(e, 3, "brain.Event:2");
  record(e);
}

TensorBoardWriter::~TensorBoardWriter() {
  if (f_) std::fclose(f_);
}

void TensorBoardWriter::session_start(int64_t first_step, double wall_time) {
  // SessionLog: status = 1 (enum SessionStatus, START = 1).
  std::string log;
  put_key(log, 1, kVarint);
  put_varint(log, 1);
  std::string e = event_head(wall_time > 0 ? wall_time : unix_now(), first_step);
  put_bytes(e, 7, log);
  record(e);
}

void TensorBoardWriter::scalars(int64_t step, double wall_time,
                                const std::vector<std::pair<std::string, double>>& values) {
  // Summary: repeated Value value = 1; Value: tag = 1 (string), simple_value = 2 (float).
  std::string summary;
  for (const auto& [tag, v] : values) {
    std::string value;
    put_bytes(value, 1, tag);
    put_key(value, 2, k32Bit);
    put_fixed(value, static_cast<float>(v));
    put_bytes(summary, 1, value);
  }
  std::string e = event_head(wall_time > 0 ? wall_time : unix_now(), step);
  put_bytes(e, 5, summary);
  record(e);
}

void TensorBoardWriter::record(const std::string& event) {
  // TFRecord: uint64 length, uint32 masked CRC of those 8 bytes, the data, uint32 masked CRC of it.
  std::string r;
  put_fixed(r, static_cast<uint64_t>(event.size()));
  put_fixed(r, masked_crc32c(r.data(), 8));
  r += event;
  put_fixed(r, masked_crc32c(event.data(), event.size()));
  if (std::fwrite(r.data(), 1, r.size(), f_) != r.size() || std::fflush(f_) != 0) {
    const int err = errno;
    throw_if_disk_full(path_, err, "the TensorBoard event file (log.tensorboard)");
    throw Error(path_ + ": write failed: " + std::strerror(err),
                "check the run directory, or set log.tensorboard = false");
  }
}

}  // namespace gtrain
