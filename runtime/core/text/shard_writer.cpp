// shard_writer.cpp: shards streamed to disk, their header's count written last, their CRC read back.
#include "runtime/core/text/shard_writer.h"

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "runtime/core/crc32c.h"
#include "runtime/core/errors.h"
#include "runtime/core/format.h"

namespace gtrain::text {

namespace {
constexpr size_t kHeaderInts = 256;

[[noreturn]] void write_failed(const std::string& path) {
  throw Error(path + ": cannot write (" + std::strerror(errno) + ")", "check that the disk is not full");
}
}  // namespace

ShardWriter::ShardWriter(std::string dir, std::string prefix, size_t vocab_size, int64_t shard_tokens, bool masks)
    : dir_(std::move(dir)),
      prefix_(std::move(prefix)),
      width_(vocab_size <= 65536 ? 2 : 4),
      shard_tokens_(std::max<int64_t>(1, shard_tokens)),
      masks_(masks) {}

ShardWriter::~ShardWriter() {
  if (file_) std::fclose(file_);
  if (mask_file_) std::fclose(mask_file_);
}

void ShardWriter::open_next() {
  path_ = (std::filesystem::path(dir_) / strf("%s_%06zu.bin", prefix_.c_str(), done_.size())).string();
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_) write_failed(path_);
  const std::vector<int32_t> header(kHeaderInts, 0);  // the real one is written at close
  if (std::fwrite(header.data(), 4, kHeaderInts, file_) != kHeaderInts) write_failed(path_);
  in_shard_ = 0;
  if (masks_) {
    mask_path_ = (std::filesystem::path(dir_) / strf("%s_%06zu.mask", prefix_.c_str(), done_.size())).string();
    mask_file_ = std::fopen(mask_path_.c_str(), "wb");
    if (!mask_file_) write_failed(mask_path_);
    mask_crc_ = 0;
  }
}

void ShardWriter::append(const uint32_t* ids, size_t n, const uint8_t* mask) {
  while (n > 0) {
    if (!file_) open_next();
    const size_t k = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(n), shard_tokens_ - in_shard_));
    if (masks_) {
      if (std::fwrite(mask, 1, k, mask_file_) != k) write_failed(mask_path_);
      mask_crc_ = crc32c(mask, k, mask_crc_);
      mask += k;
    }
    if (width_ == 4) {
      if (std::fwrite(ids, 4, k, file_) != k) write_failed(path_);
    } else {
      staging_.resize(k * 2);
      for (size_t i = 0; i < k; ++i) {
        const auto v = static_cast<uint16_t>(ids[i]);
        std::memcpy(staging_.data() + 2 * i, &v, 2);
      }
      if (std::fwrite(staging_.data(), 2, k, file_) != k) write_failed(path_);
    }
    ids += k;
    n -= k;
    in_shard_ += static_cast<int64_t>(k);
    if (in_shard_ == shard_tokens_) close_current();
  }
}

void ShardWriter::close_current() {
  if (!file_) return;
  std::vector<int32_t> header(kHeaderInts, 0);
  const auto [magic, version] = llmc_magic_version(width_);
  header[0] = magic;
  header[1] = version;
  header[2] = static_cast<int32_t>(in_shard_);
  if (std::fseek(file_, 0, SEEK_SET) != 0 || std::fwrite(header.data(), 4, kHeaderInts, file_) != kHeaderInts ||
      std::fflush(file_) != 0)
    write_failed(path_);
  // The checksum of the file as it is on disk (read back from the page cache).
  std::rewind(file_);
  std::FILE* in = std::fopen(path_.c_str(), "rb");
  if (!in) write_failed(path_);
  std::vector<char> buf(1 << 20);
  uint32_t crc = 0;
  size_t got;
  while ((got = std::fread(buf.data(), 1, buf.size(), in)) > 0) crc = crc32c(buf.data(), got, crc);
  std::fclose(in);
  if (std::fclose(file_) != 0) {
    file_ = nullptr;
    write_failed(path_);
  }
  file_ = nullptr;
  std::string mask_crc;
  if (mask_file_) {
    const bool ok = std::fclose(mask_file_) == 0;
    mask_file_ = nullptr;
    if (!ok) write_failed(mask_path_);
    mask_crc = strf("%08x", mask_crc_);
  }
  done_.push_back({std::filesystem::path(path_).filename().string(), in_shard_, strf("%08x", crc), mask_crc});
}

std::vector<WrittenShard> ShardWriter::finish() {
  close_current();
  return done_;
}

DocIndexWriter::DocIndexWriter(const std::string& dir, const std::string& split)
    : path_((std::filesystem::path(dir) / (split + "_docs.bin")).string()) {
  file_ = std::fopen(path_.c_str(), "wb");
  if (!file_) write_failed(path_);
  put(0);
}

DocIndexWriter::~DocIndexWriter() {
  if (file_) std::fclose(file_);
}

void DocIndexWriter::put(uint64_t v) {
  unsigned char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<unsigned char>(v >> (8 * i));
  if (std::fwrite(b, 1, 8, file_) != 8) write_failed(path_);
  crc_ = crc32c(b, 8, crc_);
}

void DocIndexWriter::add(uint64_t ids) {
  at_ += ids;
  put(at_);  // the next document's first id, or the total
  ++documents_;
}

void DocIndexWriter::finish(std::string* file, int64_t* documents, std::string* crc) {
  const bool ok = std::fclose(file_) == 0;
  file_ = nullptr;
  if (!ok) write_failed(path_);
  *file = std::filesystem::path(path_).filename().string();
  *documents = documents_;
  *crc = strf("%08x", crc_);
}

}  // namespace gtrain::text
