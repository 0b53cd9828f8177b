// data_paths.h: the data files a config names: a data path expanded (one file or a glob of
// shards) and the check that each is a regular file; no torch, so gtrain submit checks them before
// the queue wait without LibTorch.
#pragma once

#include <string>
#include <vector>

namespace gtrain {

// Throws DataError unless `path` is a regular file (or a link to one): a directory, FIFO or device
// (/dev/zero would be read forever) is named as such, with `key`, the config key that gave it.
void require_regular_file(const std::string& path, const std::string& key);

// The files a data path names: the path itself when it exists, a Megatron-LM prefix's .bin (with
// its .idx beside it), or else, when it holds a glob
// character (* ? [), every regular file matching it in sorted order. A pattern matching nothing, or a missing file, is
// a DataError naming `key`.
std::vector<std::string> expand_data_path(const std::string& path, const std::string& key);

}  // namespace gtrain
