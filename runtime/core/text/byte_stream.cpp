// byte_stream.cpp: plain, gzip (zlib's inflate, concatenated members too) and zstd streams.
#include "runtime/core/text/byte_stream.h"

#include <zlib.h>
#include <zstd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "runtime/core/crc32c.h"
#include "runtime/core/errors.h"
#include "runtime/core/format.h"

namespace gtrain::text {

namespace {
constexpr size_t kRawBlock = 1 << 20;

std::FILE* open_input(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw DataError(path + ": is a directory, expected a file");
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw DataError(path + ": cannot read (" + std::strerror(errno) + ")");
  return f;
}
}  // namespace

struct ByteStream::Codec {
  enum Kind { none, gzip, zstd } kind = none;
  z_stream z{};
  bool z_open = false, z_ended = false;
  ZSTD_DCtx* zd = nullptr;
  ~Codec() {
    if (z_open) inflateEnd(&z);
    if (zd) ZSTD_freeDCtx(zd);
  }
};

ByteStream::ByteStream(const std::string& path)
    : path_(path), file_(open_input(path)), raw_(kRawBlock), codec_(std::make_unique<Codec>()) {
  fill_raw();
  const auto* b = reinterpret_cast<const unsigned char*>(raw_.data());
  if (raw_len_ >= 2 && b[0] == 0x1f && b[1] == 0x8b) {
    codec_->kind = Codec::gzip;
    if (inflateInit2(&codec_->z, 15 + 16) != Z_OK) throw Error(path_ + ": zlib could not start");
    codec_->z_open = true;
  } else if (raw_len_ >= 4 && b[0] == 0x28 && b[1] == 0xb5 && b[2] == 0x2f && b[3] == 0xfd) {
    codec_->kind = Codec::zstd;
    codec_->zd = ZSTD_createDCtx();
    if (!codec_->zd) throw Error(path_ + ": libzstd could not start");
  }
}

ByteStream::~ByteStream() {
  if (file_) std::fclose(file_);
}

const char* ByteStream::compression() const {
  return codec_->kind == Codec::gzip ? "gzip" : codec_->kind == Codec::zstd ? "zstd" : "none";
}

bool ByteStream::fill_raw() {
  if (raw_eof_) return false;
  raw_pos_ = 0;
  raw_len_ = std::fread(raw_.data(), 1, raw_.size(), file_);
  if (std::ferror(file_)) throw DataError(path_ + ": read error (" + std::strerror(errno) + ")");
  raw_read_ += raw_len_;
  if (raw_len_ == 0) raw_eof_ = true;
  return raw_len_ > 0;
}

size_t ByteStream::read(char* buf, size_t n) {
  Codec& c = *codec_;
  while (true) {
    if (raw_pos_ == raw_len_ && !fill_raw()) {
      if (c.kind == Codec::gzip && !c.z_ended)
        throw DataError(path_ + ": the gzip stream ends early (a truncated .gz file?)");
      return 0;
    }
    const char* in = raw_.data() + raw_pos_;
    const size_t avail = raw_len_ - raw_pos_;
    if (c.kind == Codec::none) {
      const size_t k = std::min(n, avail);
      std::memcpy(buf, in, k);
      raw_pos_ += k;
      return k;
    }
    if (c.kind == Codec::gzip) {
      if (c.z_ended) {  // another gzip member follows (cat a.gz b.gz)
        inflateReset(&c.z);
        c.z_ended = false;
      }
      c.z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in));
      c.z.avail_in = static_cast<uInt>(avail);
      c.z.next_out = reinterpret_cast<Bytef*>(buf);
      c.z.avail_out = static_cast<uInt>(n);
      const int rc = inflate(&c.z, Z_NO_FLUSH);
      if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
        throw DataError(str(path_, ": not a valid gzip stream (", c.z.msg ? c.z.msg : "zlib error ", rc, ")"));
      raw_pos_ += avail - c.z.avail_in;
      if (rc == Z_STREAM_END) c.z_ended = true;
      const size_t out = n - c.z.avail_out;
      if (out > 0) return out;
      continue;
    }
    ZSTD_inBuffer zin{in, avail, 0};
    ZSTD_outBuffer zout{buf, n, 0};
    const size_t rc = ZSTD_decompressStream(c.zd, &zout, &zin);
    if (ZSTD_isError(rc)) throw DataError(path_ + ": not a valid zstd stream (" + ZSTD_getErrorName(rc) + ")");
    raw_pos_ += zin.pos;
    if (zout.pos > 0) return zout.pos;
  }
}

std::string file_crc32c(const std::string& path) {
  std::FILE* f = open_input(path);
  std::vector<char> buf(kRawBlock);
  uint32_t crc = 0;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) crc = crc32c(buf.data(), n, crc);
  const bool bad = std::ferror(f);
  std::fclose(f);
  if (bad) throw DataError(path + ": read error");
  return strf("%08x", crc);
}

}  // namespace gtrain::text
