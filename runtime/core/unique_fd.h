// unique_fd.h: UniqueFd, a file descriptor closed when its owner goes (RAII, move-only),
// make_pipe(), a pipe as two of them, and write_all(), a whole buffer to a descriptor.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <utility>

namespace gtrain {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  explicit operator bool() const { return valid(); }
  // Gives up ownership: the caller closes the descriptor.
  int release() { return std::exchange(fd_, -1); }
  // Closes the descriptor held (if any) and holds `fd` instead.
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

struct Pipe {
  UniqueFd read, write;
};

// pipe2(flags); both ends invalid when it fails (errno says why).
inline Pipe make_pipe(int flags = O_CLOEXEC) {
  int fds[2] = {-1, -1};
  if (::pipe2(fds, flags) != 0) return {};
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

// Writes all of `s` to `fd` (retrying short writes and EINTR); false when the other end is gone
// (EPIPE) or any other write fails.
inline bool write_all(int fd, const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace gtrain
