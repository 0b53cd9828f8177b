// mpirun_output.cpp: drops Open MPI's MPI_ABORT banner from mpirun's stderr, forwards the rest.
#include "launcher/mpirun_output.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace gtrain {
namespace {

// Open MPI frames its help messages with a line of dashes (74 of them in 4.x).
bool is_separator(const std::string& line) {
  size_t n = 0;
  while (n < line.size() && line[n] == '-') ++n;
  return n >= 20 && line.find_first_not_of("\r\n", n) == std::string::npos;
}

bool starts_with(const std::string& s, const char* prefix) {
  return s.rfind(prefix, 0) == 0;
}

constexpr size_t kMaxBannerLines = 12;  // the mpi-abort text is 6 lines; more is not that banner
constexpr size_t kMaxHeldBytes = 4096;  // a line start held longer than this is not one to drop
constexpr const char* kAbortLine = "MPI_ABORT was invoked on rank";

// Whether `a` and `b` agree as far as the shorter goes.
bool agree(const std::string& a, const char* b) {
  const size_t n = std::min(a.size(), std::strlen(b));
  return a.compare(0, n, b, n) == 0;
}

// Whether a line's start may still become the banner's first line (after a separator).
bool may_open_banner(const std::string& start) {
  return agree(start, kAbortLine);
}

// Whether a line's start may still become a line the filter drops: a separator (dashes so far), or
// one of mpirun's "[host:pid] ..." lines; a rank's own lines start "[rank " and pass at once.
bool may_be_dropped(const std::string& start) {
  if (start.find_first_not_of('-') == std::string::npos) return true;
  return start[0] == '[' && !starts_with(start, "[rank ");
}

void write_all(const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    const ssize_t n = ::write(2, s.data() + done, s.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace

std::string MpirunStderrFilter::line(const std::string& text) {
  std::string out;
  if (in_banner_) {
    if (is_separator(text)) {  // its closing line: the banner goes
      in_banner_ = false;
      banner_.clear();
      dropped_ = true;
      return out;
    }
    banner_.push_back(text);
    if (banner_.size() <= kMaxBannerLines) return out;
    // Not the banner after all: everything held goes out as it came.
    in_banner_ = false;
    for (const auto& l : banner_) out += l;
    banner_.clear();
    return out;
  }
  if (!separator_.empty()) {
    if (starts_with(text, kAbortLine)) {
      in_banner_ = true;
      banner_ = {separator_, text};
      separator_.clear();
      return out;
    }
    out += separator_;
    separator_.clear();
  }
  if (is_separator(text)) {
    separator_ = text;
    return out;
  }
  // "[host:pid] 1 more process has sent help message help-mpi-api.txt / mpi-abort", then
  // "[host:pid] Set MCA parameter "orte_base_help_aggregate" to 0 to see all help / error messages".
  if (text.find("help message help-mpi-api.txt / mpi-abort") != std::string::npos) {
    after_aggregate_note_ = true;
    dropped_ = true;
    return out;
  }
  // Open MPI 4.1's mpirun sometimes fails to unpack a help message that reaches it while the job is
  // being torn down ("ORTE_ERROR_LOG: Out of resource in file .../orte/util/show_help.c", 4 runs in
  // 10 here after a rank's MPI_Abort): a line about a message it could not show, with nothing for the user.
  if (text.find("ORTE_ERROR_LOG") != std::string::npos && text.find("util/show_help.c") != std::string::npos) {
    dropped_ = true;
    return out;
  }
  const bool hint = after_aggregate_note_ && text.find("orte_base_help_aggregate") != std::string::npos;
  after_aggregate_note_ = false;
  if (hint) return out;
  return out + text;
}

std::string MpirunStderrFilter::feed(const std::string& bytes) {
  std::string out;
  size_t from = 0;
  if (mid_line_) {  // the rest of a line already let out goes out as it is
    const size_t nl = bytes.find('\n');
    out = bytes.substr(0, nl == std::string::npos ? nl : nl + 1);
    if (nl == std::string::npos) return out;
    mid_line_ = false;
    from = nl + 1;
  }
  partial_ += bytes.substr(from);
  size_t start = 0;
  for (size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1)
    out += line(partial_.substr(start, nl + 1 - start));
  partial_.erase(0, start);
  if (partial_.empty()) return out;
  // The start of a line: out at once (a progress bar's "\r" updates, a prompt) unless it may still
  // become a line this filter drops, which waits for its newline or a quiet moment (idle()).
  if (!separator_.empty() && !may_open_banner(partial_)) {
    out += separator_;
    separator_.clear();
  }
  if (!in_banner_ && separator_.empty() && !may_be_dropped(partial_)) {
    out += partial_;
    partial_.clear();
    mid_line_ = true;
  } else if (partial_.size() > kMaxHeldBytes) {  // longer than any line it drops
    out += finish();
    mid_line_ = true;
  }
  return out;
}

std::string MpirunStderrFilter::idle() {
  if (in_banner_) return {};  // its closing line is coming (12 lines at most, or the stream's end)
  std::string out = separator_ + partial_;
  separator_.clear();
  if (!partial_.empty()) mid_line_ = true;
  partial_.clear();
  return out;
}

std::string MpirunStderrFilter::finish() {
  std::string out = separator_;
  for (const auto& l : banner_) out += l;
  out += partial_;
  separator_.clear();
  banner_.clear();
  partial_.clear();
  in_banner_ = false;
  mid_line_ = false;
  return out;
}

MpirunStderrForwarder::MpirunStderrForwarder(int read_fd) : fd_(read_fd), thread_([this] { loop(); }) {}

MpirunStderrForwarder::~MpirunStderrForwarder() {
  stop();
}

void MpirunStderrForwarder::stop() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void MpirunStderrForwarder::loop() {
  MpirunStderrFilter filter;
  char buf[65536];
  std::chrono::steady_clock::time_point stop_deadline{};
  for (;;) {
    if (stopping_ && stop_deadline == std::chrono::steady_clock::time_point{})
      stop_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    if (stopping_ && std::chrono::steady_clock::now() > stop_deadline) break;
    const bool was_stopping = stopping_;  // quiet after mpirun ended: done (else look once more)
    pollfd p{fd_, POLLIN, 0};
    const int ready = ::poll(&p, 1, was_stopping ? 200 : 100);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) break;
    if (ready == 0) {
      write_all(filter.idle());
      if (was_stopping) break;
      continue;
    }
    const ssize_t n = ::read(fd_, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // every writer is gone
    write_all(filter.feed(std::string(buf, static_cast<size_t>(n))));
  }
  write_all(filter.finish());
}

}  // namespace gtrain
