// byte_stream.h: ByteStream, a file's bytes read in order, decompressed when it is gzip (zlib) or
// zstd (libzstd), told by their magic bytes; and the CRC-32C of a file's bytes (an input's hash).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace gtrain::text {

class ByteStream {
 public:
  // Opens `path`; a DataError naming it when it cannot be read (missing, a directory, no permission).
  explicit ByteStream(const std::string& path);
  ~ByteStream();
  ByteStream(const ByteStream&) = delete;
  ByteStream& operator=(const ByteStream&) = delete;

  // Up to n decompressed bytes into buf; 0 at the end. A DataError naming the file for a read
  // error or a damaged compressed stream.
  size_t read(char* buf, size_t n);
  uint64_t raw_read() const { return raw_read_; }  // bytes of the file consumed so far (progress)
  const std::string& path() const { return path_; }
  const char* compression() const;  // "gzip", "zstd" or "none"

  struct Codec;

 private:
  bool fill_raw();  // reads the next raw block; false at the file's end
  std::string path_;
  std::FILE* file_ = nullptr;
  std::vector<char> raw_;
  size_t raw_pos_ = 0, raw_len_ = 0;
  uint64_t raw_read_ = 0;
  bool raw_eof_ = false;
  std::unique_ptr<Codec> codec_;
};

// CRC-32C of the whole file's bytes as stored (compressed ones as they are), as 8 hex digits.
std::string file_crc32c(const std::string& path);

}  // namespace gtrain::text
