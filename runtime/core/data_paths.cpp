// data_paths.cpp: data paths expanded and checked.
#include "runtime/core/data_paths.h"

#include <glob.h>

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "runtime/core/errors.h"
#include "runtime/core/format.h"

namespace gtrain {

void require_regular_file(const std::string& path, const std::string& key) {
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || st.type() == std::filesystem::file_type::not_found) return;  // opening it says what is wrong
  if (st.type() == std::filesystem::file_type::directory) {
    throw DataError(path + ": is a directory", str("make ", key, " name a file"));
  }
  if (st.type() != std::filesystem::file_type::regular) {
    throw DataError(path + ": not a regular file (a device, FIFO or socket)", str("make ", key, " name a file"));
  }
}

std::vector<std::string> expand_data_path(const std::string& path, const std::string& key) {
  if (path.empty()) throw DataError(key + ": empty; expected a file or a glob of files");
  // A path that names a file is that file, glob characters and all ("data[1].bin").
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) return {path};
  // Megatron-LM's indexed dataset named by its prefix: prefix.bin, read with prefix.idx beside it.
  if (std::filesystem::exists(path + ".bin", ec) && std::filesystem::exists(path + ".idx", ec)) return {path + ".bin"};
  if (path.find_first_of("*?[") == std::string::npos)
    throw DataError(str(key, ": file \"", path, "\" does not exist"), str("check the path in ", key));
  glob_t g{};
  const int rc = ::glob(path.c_str(), GLOB_ERR, nullptr, &g);
  std::vector<std::string> out;
  for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  if (rc == GLOB_NOMATCH || (rc == 0 && out.empty())) {
    throw DataError(str(key, ": no file matches \"", path, "\""), str("check the pattern in ", key));
  }
  if (rc != 0) throw DataError(key + ": cannot expand \"" + path + "\" (a directory on the way unreadable?)");
  std::sort(out.begin(), out.end());  // glob sorts by locale; the shard order must not
  // A directory matched by a broad pattern is not a shard: name it rather than skip it silently.
  for (const auto& f : out) require_regular_file(f, key);
  return out;
}

}  // namespace gtrain
