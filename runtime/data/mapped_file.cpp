// mapped_file.cpp: read-only mmap of data files and glob expansion of data paths.
#include "runtime/data/mapped_file.h"

#include <fcntl.h>
#include <glob.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "runtime/common/errors.h"
#include "runtime/data/dataset.h"

namespace gtrain {

MappedFile::MappedFile(const std::string& path, const std::string& key) : path_(path) {
  require_regular_file(path, key);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    throw DataError(path + ": cannot open data file (" + std::strerror(errno) + "; " + key + ")");
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw DataError(path + ": cannot stat data file (" + std::strerror(err) + "; " + key + ")");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw DataError(path + ": cannot map data file (" + std::strerror(err) + "; " + key + ")");
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);  // the map keeps the file
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

std::vector<std::string> expand_data_path(const std::string& path, const std::string& key) {
  if (path.empty()) throw DataError(key + ": empty; expected a file or a glob of files");
  if (path.find_first_of("*?[") == std::string::npos) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) throw DataError(key + ": file \"" + path + "\" does not exist");
    return {path};
  }
  glob_t g{};
  const int rc = ::glob(path.c_str(), GLOB_ERR, nullptr, &g);
  std::vector<std::string> out;
  for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  if (rc == GLOB_NOMATCH || (rc == 0 && out.empty())) {
    throw DataError(key + ": no file matches \"" + path + "\"");
  }
  if (rc != 0) throw DataError(key + ": cannot expand \"" + path + "\" (a directory on the way unreadable?)");
  std::sort(out.begin(), out.end());  // glob sorts by locale; the shard order must not
  // A directory matched by a broad pattern is not a shard: name it rather than skip it silently.
  for (const auto& f : out) require_regular_file(f, key);
  return out;
}

}  // namespace gtrain
