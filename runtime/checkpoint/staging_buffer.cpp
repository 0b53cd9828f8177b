// staging_buffer.cpp: the reusable, page-aligned checkpoint staging memory and its O_DIRECT writer.
#include "runtime/checkpoint/staging_buffer.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "runtime/core/disk_space.h"
#include "runtime/core/errors.h"

namespace gtrain {
namespace {

constexpr size_t kChunk = size_t{64} << 20;  // one write() at most: bounded, interruptible pieces

size_t round_up(size_t n, size_t unit) {
  return (n + unit - 1) / unit * unit;
}

[[noreturn]] void fail(const std::string& path) {
  throw_if_disk_full(path, errno, "a checkpoint");
  throw CheckpointError(path + ": write failed: " + std::strerror(errno),
                        "free space on the checkpoint's disk (checkpoint.dir), or set checkpoint.keep lower");
}

}  // namespace

StagingBuffer::~StagingBuffer() {
  std::free(data_);
}

char* StagingBuffer::reserve(size_t bytes) {
  const size_t want = round_up(bytes == 0 ? 1 : bytes, kAlign);
  if (want <= capacity_) return data_;
  std::free(data_);
  data_ = nullptr;
  capacity_ = 0;
  // Page-aligned; filled once here, so later saves copy into memory the kernel has already
  // mapped. (No MADV_HUGEPAGE: its compaction took seconds on a fragmented host.)
  void* p = nullptr;
  if (::posix_memalign(&p, kAlign, want) != 0)
    throw CheckpointError("checkpoint staging: cannot allocate " + std::to_string(want >> 20) +
                              " MiB of host memory for this rank's shard",
                          "the host needs room for one more copy of each rank's checkpoint state: use fewer ranks "
                          "per host, or ZeRO to spread the optimizer state");
  data_ = static_cast<char*>(p);
  capacity_ = want;
  std::memset(data_, 0, capacity_);
  return data_;
}

int open_for_staged_write(const std::string& path, bool* direct) {
#ifdef O_DIRECT
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
  if (fd >= 0) {
    *direct = true;
    return fd;
  }
  if (errno != EINVAL) return -1;  // EINVAL: this file system has no O_DIRECT (tmpfs)
#endif
  *direct = false;
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
}

void write_staged(int fd, bool direct, const char* buf, size_t n, const std::string& path) {
  // Direct: whole kAlign blocks (the last one padded with whatever the buffer holds past n), then
  // the file is cut back to n bytes.
  const size_t total = direct ? round_up(n, StagingBuffer::kAlign) : n;
  size_t done = 0;
  while (done < total) {
    const ssize_t w = ::write(fd, buf + done, std::min(kChunk, total - done));
    if (w < 0 && errno == EINTR) continue;
#ifdef O_DIRECT
    if (w < 0 && errno == EINVAL && direct) {
      // The file system accepted O_DIRECT at open but not this write: go on through the page cache.
      const int flags = ::fcntl(fd, F_GETFL);
      if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_DIRECT) < 0) fail(path);
      direct = false;
      if (done >= n) break;
      while (done < n) {
        const ssize_t b = ::write(fd, buf + done, n - done);
        if (b < 0 && errno == EINTR) continue;
        if (b <= 0) fail(path);
        done += static_cast<size_t>(b);
      }
      break;
    }
#endif
    if (w <= 0) fail(path);
    done += static_cast<size_t>(w);
    // A short direct write leaves `done` unaligned; the next write would be refused. Finish it
    // through the page cache.
    if (direct && done % StagingBuffer::kAlign != 0 && done < total) {
      const int flags = ::fcntl(fd, F_GETFL);
      if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_DIRECT) < 0) fail(path);
      direct = false;
    }
  }
  if (::ftruncate(fd, static_cast<off_t>(n)) != 0) fail(path);
}

}  // namespace gtrain
