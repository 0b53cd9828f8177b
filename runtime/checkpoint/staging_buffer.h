// staging_buffer.h: StagingBuffer, the host memory a rank's checkpoint shard is copied into before
// it is written: page-aligned, kept from one save to the next (touching fresh pages costs more than
// the copy), and written with write_staged(), which bypasses the page cache (O_DIRECT) where the
// file system allows it, so a save costs the disk's time, not the CPU's.
#pragma once

#include <cstddef>
#include <string>

namespace gtrain {

class StagingBuffer {
 public:
  static constexpr size_t kAlign = 4096;  // O_DIRECT's address, offset and length unit

  StagingBuffer() = default;
  ~StagingBuffer();
  StagingBuffer(const StagingBuffer&) = delete;
  StagingBuffer& operator=(const StagingBuffer&) = delete;

  // At least `bytes` (rounded up to kAlign, zero-filled past the previous size). Keeps the memory
  // (and its contents) when it is already large enough; otherwise allocates anew (contents lost).
  // Throws CheckpointError when the host has no room.
  char* reserve(size_t bytes);
  char* data() const { return data_; }
  size_t capacity() const { return capacity_; }

 private:
  char* data_ = nullptr;
  size_t capacity_ = 0;
};

// Writes buf[0, n) to `fd` (opened for writing at offset 0) and leaves the file exactly n bytes
// long. `direct` says the descriptor was opened with O_DIRECT: then buf must be kAlign-aligned
// with room up to n rounded up to kAlign (StagingBuffer::reserve gives both); when the file system
// refuses an O_DIRECT write, the rest is written through the page cache. Throws CheckpointError
// naming `path` on a failed write.
void write_staged(int fd, bool direct, const char* buf, size_t n, const std::string& path);

// Opens `path` for writing (created, truncated), with O_DIRECT when the file system supports it;
// `direct` says which. Returns -1 (errno set) when it cannot be opened at all.
int open_for_staged_write(const std::string& path, bool* direct);

}  // namespace gtrain
