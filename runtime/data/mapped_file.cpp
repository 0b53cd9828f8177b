// mapped_file.cpp: read-only mmap of data files.
#include "runtime/data/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/core/rank_output.h"
#include "runtime/core/unique_fd.h"
#include "runtime/data/dataset.h"

namespace gtrain {
namespace {

// Reading a mapped page whose file was truncated (data regenerated under a running job, a network
// file system dropping it) raises SIGBUS. The handler names the file and exits 2 instead of dying
// with "Bus error"; it reads only this fixed table, async-signal-safely.
struct MapEntry {
  std::atomic<uintptr_t> begin{0}, end{0};
  char path[512] = {};
};
constexpr int kMaxMaps = 4096;
MapEntry g_maps[kMaxMaps];
std::mutex g_maps_mu;  // writers only
struct sigaction g_previous_bus {};

void on_bus_error(int, siginfo_t* info, void*) {
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (auto& e : g_maps) {
    const uintptr_t b = e.begin.load(std::memory_order_acquire), en = e.end.load(std::memory_order_acquire);
    if (b != 0 && addr >= b && addr < en) {
      const char* parts[] = {"gtrain: data error: ", e.path,
                             ": the data file shrank or vanished while the run read it (bus error); do not rewrite "
                             "data files under a running job"};
      write_fatal_parts_signal_safe(parts, 3);
      ::_exit(2);
    }
  }
  // Not a data map: the previous disposition takes the re-executed fault.
  ::sigaction(SIGBUS, &g_previous_bus, nullptr);
}

void register_map(const std::string& path, const uint8_t* data, size_t size) {
  static std::once_flag installed;
  std::call_once(installed, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_bus_error;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, &g_previous_bus);
  });
  std::lock_guard<std::mutex> lock(g_maps_mu);
  for (auto& e : g_maps) {
    if (e.begin.load(std::memory_order_relaxed) != 0) continue;
    std::strncpy(e.path, path.c_str(), sizeof(e.path) - 1);
    e.path[sizeof(e.path) - 1] = '\0';
    e.end.store(reinterpret_cast<uintptr_t>(data) + size, std::memory_order_release);
    e.begin.store(reinterpret_cast<uintptr_t>(data), std::memory_order_release);
    return;
  }
  // More maps than the table holds: those beyond it die with the plain bus error.
}

void unregister_map(const uint8_t* data) {
  std::lock_guard<std::mutex> lock(g_maps_mu);
  for (auto& e : g_maps) {
    if (e.begin.load(std::memory_order_relaxed) == reinterpret_cast<uintptr_t>(data)) {
      e.begin.store(0, std::memory_order_release);
      e.end.store(0, std::memory_order_release);
      return;
    }
  }
}

}  // namespace

MappedFile::MappedFile(const std::string& path, const std::string& key) : path_(path) {
  require_regular_file(path, key);
  const UniqueFd file(::open(path.c_str(), O_RDONLY | O_CLOEXEC));  // the map keeps the file once closed
  const int fd = file.get();
  if (fd < 0) {
    throw DataError(path + ": cannot open data file (" + std::strerror(errno) + "; " + key + ")");
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    throw DataError(path + ": cannot stat data file (" + std::strerror(err) + "; " + key + ")");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      throw DataError(path + ": cannot map data file (" + std::strerror(err) + "; " + key + ")");
    }
    data_ = static_cast<const uint8_t*>(p);
    register_map(path, data_, size_);
  }
}

MappedFile::~MappedFile() {
  if (data_) {
    unregister_map(data_);
    ::munmap(const_cast<uint8_t*>(data_), size_);
  }
}

}  // namespace gtrain
