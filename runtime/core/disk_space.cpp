// disk_space.cpp: full-disk errors that name the writer and what holds the space; the records' reserve.
#include "runtime/core/disk_space.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "runtime/core/checkpoint_dirs.h"
#include "runtime/core/errors.h"
#include "runtime/core/format.h"

namespace fs = std::filesystem;

namespace gtrain {
namespace {

std::mutex g_mu;
DiskUsageContext g_context;

int64_t tree_bytes(const fs::path& dir) {
  int64_t total = 0;
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(dir, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    std::error_code size_ec;
    if (it->is_regular_file(size_ec)) total += static_cast<int64_t>(it->file_size(size_ec));
  }
  return total;
}

// The free bytes of the file system holding `path` (or its nearest existing parent); -1 unknown.
int64_t free_bytes(fs::path path) {
  std::error_code ec;
  while (!path.empty() && !fs::exists(path, ec)) path = path.parent_path();
  struct statvfs st {};
  if (path.empty() || ::statvfs(path.c_str(), &st) != 0) return -1;
  return static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
}

}  // namespace

void set_disk_usage_context(const DiskUsageContext& c) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_context = c;
}

std::string disk_space_hint(const std::string& path) {
  DiskUsageContext c;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    c = g_context;
  }
  std::string out;
  if (!c.checkpoint_dir.empty()) {
    const auto committed = committed_checkpoint_dirs(c.checkpoint_dir);
    out = str(committed.size(), committed.size() == 1 ? " checkpoint in " : " checkpoints in ", c.checkpoint_dir,
              committed.size() == 1 ? " holds " : " hold ",
              format_size(static_cast<double>(tree_bytes(c.checkpoint_dir))));
    if (c.keep > 0) out += str(" (checkpoint.keep = ", c.keep, ")");
  }
  const int64_t free = free_bytes(path);
  if (free >= 0) out += str(out.empty() ? "" : ", ", format_size(static_cast<double>(free)), " free on its disk");
  out += str(out.empty() ? "" : "; ", "lower checkpoint.keep, move checkpoint.dir (or the run) to a larger disk, ",
             "or free space; then run the same command to resume from the last committed checkpoint");
  return out;
}

void throw_if_disk_full(const std::string& path, int err, const std::string& writer) {
  if (!is_disk_full_errno(err)) return;
  throw DiskFullError(str(path, ": ", std::strerror(err), " while writing ", writer), disk_space_hint(path));
}

void make_disk_reserve(const std::string& run_dir) {
  const fs::path p = fs::path(run_dir) / kDiskReserveFile;
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT, 0644);
  if (fd < 0) return;  // a read-only or full disk: the records will say so when they fail
  struct stat st {};
  if (::fstat(fd, &st) == 0 && st.st_size < kDiskReserveBytes) {
    // Real blocks, not a sparse file: posix_fallocate, or zeros where the file system has no fallocate.
    if (::posix_fallocate(fd, 0, kDiskReserveBytes) != 0) {
      static const char zeros[4096] = {};
      for (int64_t done = 0; done < kDiskReserveBytes;) {
        const ssize_t w = ::write(fd, zeros, sizeof(zeros));
        if (w <= 0) break;
        done += w;
      }
    }
  }
  ::close(fd);
}

bool release_disk_reserve(const std::string& run_dir) {
  std::error_code ec;
  return fs::remove(fs::path(run_dir) / kDiskReserveFile, ec);
}

namespace {

// One O_APPEND write of the whole line: it lands whole or not at all (a short write is cut back).
int append_once(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (fd < 0) return errno;
  struct stat st {};
  const off_t before = ::fstat(fd, &st) == 0 ? st.st_size : -1;
  const ssize_t w = ::write(fd, text.data(), text.size());
  int err = w == static_cast<ssize_t>(text.size()) ? 0 : (w < 0 ? errno : ENOSPC);
  if (err == 0 && ::fsync(fd) != 0 && errno != EINVAL) err = errno;
  if (err != 0 && w > 0 && before >= 0 && ::ftruncate(fd, before) != 0) err = errno;
  ::close(fd);
  return err;
}

}  // namespace

bool append_record_line(const std::string& path, const std::string& line) {
  const std::string text = line + "\n";
  int err = append_once(path, text);
  if (err != 0 && is_disk_full_errno(err) && release_disk_reserve(fs::path(path).parent_path().string()))
    err = append_once(path, text);
  return err == 0;
}

}  // namespace gtrain
