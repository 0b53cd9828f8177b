// safetensors_header.cpp: a safetensors header read and checked in full, torch-free.
#include "runtime/core/safetensors_header.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/core/errors.h"

namespace fs = std::filesystem;

namespace gtrain {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the format's own limit (100 MB)

const std::vector<std::pair<const char*, int64_t>>& dtype_sizes() {
  static const std::vector<std::pair<const char*, int64_t>> sizes = {{"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2},
                                                                     {"I64", 8}, {"I32", 4}, {"I16", 2}, {"I8", 1},
                                                                     {"U8", 1},  {"BOOL", 1}};
  return sizes;
}

}  // namespace

int64_t safetensors_dtype_bytes(const std::string& dtype) {
  for (const auto& [name, bytes] : dtype_sizes())
    if (dtype == name) return bytes;
  return 0;
}

int64_t safetensors_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return -1;
  return n > (int64_t{1} << 59) ? -1 : n;  // bytes at 8 an element must fit too
}

SafetensorsHeader read_safetensors_header(const std::string& path) {
  SafetensorsHeader out;
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw CheckpointError(path + ": cannot open (" + std::strerror(errno) + ")", "check the path and its permissions");
  std::error_code ec;
  const auto file_size = static_cast<uint64_t>(fs::file_size(path, ec));
  unsigned char len[8] = {};
  if (ec || !in.read(reinterpret_cast<char*>(len), 8))
    throw CheckpointError(
        path + ": not a safetensors file (shorter than its 8-byte header length)",
        "give a file written by gtrain ckpt export or by transformers' save_pretrained (model.safetensors)");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (n == 0 || n > kMaxHeaderBytes || 8 + n > file_size)
    throw CheckpointError(
        path + ": not a safetensors file (header length " + std::to_string(n) + " for a file of " +
            std::to_string(file_size) + " bytes)",
        "give a file written by gtrain ckpt export or by transformers' save_pretrained (model.safetensors)");
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(path + ": the safetensors header is not JSON (" + e.what() + ")",
                          "the file is damaged or not safetensors: export it again");
  }
  if (!header.is_object()) throw CheckpointError(path + ": the safetensors header is not a JSON object");
  const int64_t data_start = 8 + static_cast<int64_t>(n);
  out.data_start = data_start;
  const int64_t data_bytes = static_cast<int64_t>(file_size) - data_start;
  std::vector<std::pair<std::pair<int64_t, int64_t>, std::string>> by_offset;
  for (const auto& [name, entry] : header.items()) {
    const std::string where = path + ": tensor '" + name + "'";
    if (name == "__metadata__") {
      if (!entry.is_object()) throw CheckpointError(path + ": __metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) throw CheckpointError(path + ": __metadata__ value '" + k + "' is not a string");
        out.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() || !entry.contains("shape") ||
        !entry["shape"].is_array() || !entry.contains("data_offsets") || !entry["data_offsets"].is_array() ||
        entry["data_offsets"].size() != 2)
      throw CheckpointError(where + ": needs dtype (string), shape (array) and data_offsets ([begin, end])");
    SafetensorsEntry s;
    s.name = name;
    s.dtype = entry["dtype"].get<std::string>();
    const int64_t element = safetensors_dtype_bytes(s.dtype);
    if (element == 0) {
      std::string known;
      for (const auto& [dtype, bytes] : dtype_sizes()) known += (known.empty() ? "" : ", ") + std::string(dtype);
      throw CheckpointError(where + ": dtype '" + s.dtype + "' is not one gtrain reads (" + known + ")");
    }
    for (const auto& d : entry["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 50))
        throw CheckpointError(where + ": shape " + entry["shape"].dump() + " is not a list of sizes");
      s.shape.push_back(d.get<int64_t>());
    }
    const auto& off = entry["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      throw CheckpointError(where + ": data_offsets are not byte offsets");
    const int64_t begin = off[0].get<int64_t>(), end = off[1].get<int64_t>();
    const int64_t numel = safetensors_numel(s.shape);
    const int64_t want = numel < 0 ? -1 : numel * element;
    if (want < 0 || begin < 0 || end < begin || end > data_bytes || end - begin != want)
      throw CheckpointError(where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                            "] do not hold its " + std::to_string(want) + " bytes within the file's " +
                            std::to_string(data_bytes) + " bytes of data");
    by_offset.push_back({{begin, end}, name});
    s.begin = begin;
    s.end = end;
    out.tensors.push_back(std::move(s));
  }
  std::sort(by_offset.begin(), by_offset.end());
  int64_t at = 0;
  for (const auto& [range, name] : by_offset) {
    if (range.first != at)
      throw CheckpointError(path + ": tensor '" + name + "' starts at byte " + std::to_string(range.first) +
                            " of the data, not at " + std::to_string(at) + " (a hole or an overlap)");
    at = range.second;
  }
  if (at != data_bytes)
    throw CheckpointError(path + ": the tensors hold " + std::to_string(at) + " bytes, the file " +
                          std::to_string(data_bytes) + " after its header");
  return out;
}

}  // namespace gtrain
