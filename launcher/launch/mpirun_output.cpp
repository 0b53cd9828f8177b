// mpirun_output.cpp: drops Open MPI's MPI_ABORT banner and repeated rank errors from mpirun's
// stderr, forwards the rest (and mpirun's stdout) to a console that may go away.
#include "launcher/launch/mpirun_output.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <regex>

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

// Whether a line's start may still become a rank's "[rank N] gtrain: ..." line, which may be an
// error other ranks repeat.
bool may_be_rank_message(const std::string& start) {
  if (!agree(start, "[rank ")) return false;
  size_t i = 6;
  while (i < start.size() && std::isdigit(static_cast<unsigned char>(start[i]))) ++i;
  return i >= start.size() || agree(start.substr(i), "] gtrain: ");
}

// Whether a line's start may still become a line the filter drops: a separator (dashes so far), one
// of mpirun's "[host:pid] ..." lines, or a rank's message; a rank's other lines pass at once.
bool may_be_dropped(const std::string& start) {
  if (start.find_first_not_of('-') == std::string::npos) return true;
  if (may_be_rank_message(start)) return true;
  return start[0] == '[' && !starts_with(start, "[rank ");
}

// "0-3, 5, 7-8"
std::string rank_ranges(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") + std::to_string(ranks[i]);
    if (j > i) out += "-" + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace

bool MpirunStderrFilter::repeated_error(const std::string& text) {
  // format_error's line in a multi-rank job: "[rank N] gtrain: <kind> error: what [rank N on host] (file:line)".
  static const std::regex kErrorLine(R"(^\[rank (\d+)\] (gtrain: [a-z ]*error: .*))");
  static const std::regex kWhere(R"( ?[\[(]rank \d+ on [^\])]*[\])])");
  std::smatch m;
  if (!std::regex_search(text, m, kErrorLine)) return false;
  const int rank = std::stoi(m[1].str());
  const std::string key = std::regex_replace(m[2].str(), kWhere, "");
  auto it = errors_.find(key);
  if (it == errors_.end()) {
    errors_[key].first_rank = rank;
    error_order_.push_back(key);
    return false;
  }
  if (rank == it->second.first_rank) return false;  // the same rank again: its own, shown
  it->second.others.push_back(rank);
  return true;
}

std::string MpirunStderrFilter::line(const std::string& text) {
  std::string out;
  if (noticed_rank_ < 0) {
    const std::string key = "noticed that process rank ";
    const size_t at = text.find(key);
    if (at != std::string::npos) {
      noticed_rank_ = std::atoi(text.c_str() + at + key.size());
      const size_t node = text.find(" on node ", at);
      if (node != std::string::npos) {
        const size_t from = node + 9, to = text.find(' ', from);
        noticed_host_ = text.substr(from, to == std::string::npos ? std::string::npos : to - from);
      }
    }
    // A rank that exited non-zero: "  Process name: [[22845,1],3]" in the banner that follows.
    const std::string name = "Process name: [[";
    const size_t p = text.find(name);
    const size_t job_end = p == std::string::npos ? std::string::npos : text.find("],", p);
    if (job_end != std::string::npos && std::isdigit(static_cast<unsigned char>(text[job_end + 2])))
      noticed_rank_ = std::atoi(text.c_str() + job_end + 2);
  }
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
  // An error every rank reports alike (a config or data problem each finds) is shown once; its
  // indented continuation lines (the rest of a message of several lines, written
  // with it and without a rank prefix) go with the copies.
  if (dropping_hint_ && starts_with(text, "  ")) return out;
  dropping_hint_ = repeated_error(text);
  if (dropping_hint_) return out;
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
  // A repeated error's hint lines go with it: their start waits too.
  const bool may_be_hint = dropping_hint_ && agree(partial_, "  ");
  if (!in_banner_ && separator_.empty() && !may_be_dropped(partial_) && !may_be_hint) {
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
  for (const auto& key : error_order_) {
    SameError& e = errors_[key];
    if (e.others.empty()) continue;
    std::vector<int> all = e.others;
    all.push_back(e.first_rank);
    if (!out.empty() && out.back() != '\n') out += '\n';
    const std::string what = key.size() > 100 ? key.substr(0, 100) + "..." : key;
    out += "gtrain: " + std::to_string(all.size()) + " ranks (" + rank_ranges(all) +
           ") reported the same error, shown once above from rank " + std::to_string(e.first_rank) + ": " + what + "\n";
    e.others.clear();
  }
  return out;
}

MpirunOutputForwarder::MpirunOutputForwarder(int read_fd, int out_fd, bool filtered)
    : fd_(read_fd), out_fd_(out_fd), filtered_(filtered), thread_([this] { loop(); }) {}

void MpirunOutputForwarder::write_out(const std::string& s) {
  if (console_gone_ || s.empty()) return;
  if (!write_all(out_fd_, s)) console_gone_ = true;  // the console is gone: keep draining, write nothing
}

MpirunOutputForwarder::~MpirunOutputForwarder() {
  stop();
}

void MpirunOutputForwarder::stop() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
  fd_.reset();
}

void MpirunOutputForwarder::loop() {
  MpirunStderrFilter filter;
  char buf[65536];
  std::chrono::steady_clock::time_point stop_deadline{};
  for (;;) {
    if (stopping_ && stop_deadline == std::chrono::steady_clock::time_point{})
      stop_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    if (stopping_ && std::chrono::steady_clock::now() > stop_deadline) break;
    const bool was_stopping = stopping_;  // quiet after mpirun ended: done (else look once more)
    pollfd p{fd_.get(), POLLIN, 0};
    const int ready = ::poll(&p, 1, was_stopping ? 200 : 100);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) break;
    if (ready == 0) {
      if (filtered_) write_out(filter.idle());
      if (was_stopping) break;
      continue;
    }
    const ssize_t n = ::read(fd_.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // every writer is gone
    const std::string bytes(buf, static_cast<size_t>(n));
    write_out(filtered_ ? filter.feed(bytes) : bytes);
  }
  if (filtered_) write_out(filter.finish());
  noticed_rank_ = filter.noticed_rank();
  noticed_host_ = filter.noticed_host();
}

}  // namespace gtrain
