// mapped_file.h: a read-only memory map of a regular data file (a data path's files:
// runtime/core/data_paths.h). Every rank on a host shares the mapped pages through the page cache,
// so a 20 GB token file costs no private memory and no read at start.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/data_paths.h"  // expand_data_path

namespace gtrain {

class MappedFile {
 public:
  // Maps `path` read-only; `key` is the config key that named it, for errors (DataError). Reading a
  // page the file no longer holds (truncated under the run) exits 2 naming the file, not "Bus error".
  MappedFile(const std::string& path, const std::string& key);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }  // null for an empty file
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace gtrain
