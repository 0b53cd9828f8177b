// safetensors.cpp: safetensors files written (atomically) and read, with the header checked in full.
#include "runtime/checkpoint/safetensors.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/common/errors.h"

namespace fs = std::filesystem;

namespace gtrain {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // the format's own limit (100 MB)

const std::vector<std::pair<torch::ScalarType, const char*>>& dtype_names() {
  static const std::vector<std::pair<torch::ScalarType, const char*>> names = {
      {torch::kFloat64, "F64"}, {torch::kFloat32, "F32"}, {torch::kFloat16, "F16"}, {torch::kBFloat16, "BF16"},
      {torch::kInt64, "I64"},   {torch::kInt32, "I32"},   {torch::kInt16, "I16"},   {torch::kInt8, "I8"},
      {torch::kUInt8, "U8"},    {torch::kBool, "BOOL"}};
  return names;
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void write_le64(std::ostream& out, uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out.write(b, 8);
}

}  // namespace

std::string safetensors_dtype_name(torch::ScalarType t) {
  for (const auto& [type, name] : dtype_names())
    if (type == t) return name;
  throw CheckpointError(std::string("safetensors has no dtype for ") + c10::toString(t));
}

torch::ScalarType safetensors_dtype(const std::string& name, const std::string& where) {
  for (const auto& [type, n] : dtype_names())
    if (name == n) return type;
  throw CheckpointError(where + ": dtype '" + name + "' is not one gtrain reads (F64, F32, F16, BF16, I64, I32, " +
                        "I16, I8, U8, BOOL)");
}

int64_t write_safetensors(const std::string& path, const std::vector<SafetensorsSpec>& specs,
                          const std::map<std::string, std::string>& metadata,
                          const std::function<torch::Tensor(size_t)>& produce) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  int64_t offset = 0;
  for (const auto& s : specs) {
    if (s.name.empty() || s.name == "__metadata__" || header.contains(s.name))
      throw CheckpointError(path + ": tensor name '" + s.name + "' is empty, reserved or given twice");
    const int64_t bytes = numel_of(s.shape) * static_cast<int64_t>(c10::elementSize(s.dtype));
    header[s.name] = {
        {"dtype", safetensors_dtype_name(s.dtype)}, {"shape", s.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned, as the reference writer does
  const fs::path target(path);
  const fs::path tmp = target.parent_path() / (target.filename().string() + ".tmp-" + std::to_string(::getpid()));
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) throw CheckpointError(path + ": cannot write (" + std::strerror(errno) + ")");
  write_le64(out, text.size());
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  try {
    for (size_t i = 0; i < specs.size(); ++i) {
      torch::Tensor t = produce(i).to(torch::kCPU).contiguous();
      if (t.scalar_type() != specs[i].dtype || t.sizes().vec() != specs[i].shape)
        throw CheckpointError(path + ": tensor '" + specs[i].name + "' is not the dtype and shape its header gives");
      out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
      if (!out) throw CheckpointError(path + ": write failed at tensor '" + specs[i].name + "' (disk full?)");
    }
    out.flush();
    out.close();
    if (!out) throw CheckpointError(path + ": write failed (disk full?)");
    std::error_code ec;
    fs::rename(tmp, target, ec);
    if (ec) throw CheckpointError(path + ": cannot put the file in place: " + ec.message());
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  return 8 + static_cast<int64_t>(text.size()) + offset;
}

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError(path + ": cannot open (" + std::strerror(errno) + ")");
  std::error_code ec;
  const auto file_size = static_cast<uint64_t>(fs::file_size(path, ec));
  unsigned char len[8] = {};
  if (ec || !in.read(reinterpret_cast<char*>(len), 8))
    throw CheckpointError(path + ": not a safetensors file (shorter than its 8-byte header length)");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  if (n == 0 || n > kMaxHeaderBytes || 8 + n > file_size)
    throw CheckpointError(path + ": not a safetensors file (header length " + std::to_string(n) + " for a file of " +
                          std::to_string(file_size) + " bytes)");
  std::string text(n, '\0');
  in.read(text.data(), static_cast<std::streamsize>(n));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(path + ": the safetensors header is not JSON (" + e.what() + ")");
  }
  if (!header.is_object()) throw CheckpointError(path + ": the safetensors header is not a JSON object");
  const int64_t data_start = 8 + static_cast<int64_t>(n);
  const int64_t data_bytes = static_cast<int64_t>(file_size) - data_start;
  std::vector<std::pair<std::pair<int64_t, int64_t>, std::string>> by_offset;
  for (const auto& [name, entry] : header.items()) {
    const std::string where = path + ": tensor '" + name + "'";
    if (name == "__metadata__") {
      if (!entry.is_object()) throw CheckpointError(path + ": __metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) throw CheckpointError(path + ": __metadata__ value '" + k + "' is not a string");
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() || !entry.contains("shape") ||
        !entry["shape"].is_array() || !entry.contains("data_offsets") || !entry["data_offsets"].is_array() ||
        entry["data_offsets"].size() != 2)
      throw CheckpointError(where + ": needs dtype (string), shape (array) and data_offsets ([begin, end])");
    SafetensorsSpec s;
    s.name = name;
    s.dtype = safetensors_dtype(entry["dtype"].get<std::string>(), where);
    for (const auto& d : entry["shape"]) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > (uint64_t{1} << 50))
        throw CheckpointError(where + ": shape " + entry["shape"].dump() + " is not a list of sizes");
      s.shape.push_back(d.get<int64_t>());
    }
    const auto& off = entry["data_offsets"];
    if (!off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      throw CheckpointError(where + ": data_offsets are not byte offsets");
    const int64_t begin = off[0].get<int64_t>(), end = off[1].get<int64_t>();
    const int64_t want = numel_of(s.shape) * static_cast<int64_t>(c10::elementSize(s.dtype));
    if (begin < 0 || end < begin || end > data_bytes || end - begin != want)
      throw CheckpointError(where + ": data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                            "] do not hold its " + std::to_string(want) + " bytes within the file's " +
                            std::to_string(data_bytes) + " bytes of data");
    by_offset.push_back({{begin, end}, name});
    index_[name] = specs_.size();
    specs_.push_back(std::move(s));
    ranges_.push_back({data_start + begin, data_start + end});
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
}

torch::Tensor SafetensorsReader::read(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw CheckpointError(path_ + ": has no tensor '" + name + "'");
  const auto& s = specs_[it->second];
  const auto [begin, end] = ranges_[it->second];
  torch::Tensor t = torch::empty(s.shape, torch::TensorOptions().dtype(s.dtype));
  std::ifstream in(path_, std::ios::binary);
  in.seekg(begin);
  if (!in || !in.read(static_cast<char*>(t.data_ptr()), end - begin))
    throw CheckpointError(path_ + ": cannot read tensor '" + name + "' (the file changed?)");
  return t;
}

}  // namespace gtrain
