// safetensors_header.h: a safetensors file's header read and checked in full, without LibTorch (the
// launcher checks checkpoint.init_from before any rank starts; SafetensorsReader builds on it).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gtrain {

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // the format's name: "F32", "BF16", ...
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;  // byte range in the data (after the header)
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> tensors;  // by name
  std::map<std::string, std::string> metadata;
  int64_t data_start = 0;  // file offset of the data: 8 + the header's length
};

// Reads `path`'s header: its length, JSON, each tensor's dtype (one gtrain reads), shape, and byte
// range against the file (no holes, overlaps or trailing bytes). Throws CheckpointError naming the
// file and the tensor.
SafetensorsHeader read_safetensors_header(const std::string& path);

// Bytes of one element of a dtype the format names (0: not one gtrain reads).
int64_t safetensors_dtype_bytes(const std::string& dtype);
// Elements of a shape; -1 when the count (or its bytes at 8 an element) would overflow.
int64_t safetensors_numel(const std::vector<int64_t>& shape);

}  // namespace gtrain
