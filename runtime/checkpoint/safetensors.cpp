// safetensors.cpp: safetensors files written (atomically) and read, with the header checked in full.
#include "runtime/checkpoint/safetensors.h"

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/core/errors.h"

namespace fs = std::filesystem;

namespace gtrain {
namespace {

const std::vector<std::pair<torch::ScalarType, const char*>>& dtype_names() {
  static const std::vector<std::pair<torch::ScalarType, const char*>> names = {
      {torch::kFloat64, "F64"}, {torch::kFloat32, "F32"}, {torch::kFloat16, "F16"}, {torch::kBFloat16, "BF16"},
      {torch::kInt64, "I64"},   {torch::kInt32, "I32"},   {torch::kInt16, "I16"},   {torch::kInt8, "I8"},
      {torch::kUInt8, "U8"},    {torch::kBool, "BOOL"}};
  return names;
}

// The temporary file a write in progress would leave behind: removed when INT, TERM or HUP ends the
// process (the handlers are in place only while write_safetensors runs).
char g_tmp_path[4096];
constexpr int kTmpSignals[3] = {SIGINT, SIGTERM, SIGHUP};

void remove_tmp_and_reraise(int sig) {
  if (g_tmp_path[0]) ::unlink(g_tmp_path);
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

class TmpFileGuard {
 public:
  explicit TmpFileGuard(const std::string& path) {
    std::snprintf(g_tmp_path, sizeof(g_tmp_path), "%s", path.c_str());
    for (int i = 0; i < 3; ++i) previous_[i] = std::signal(kTmpSignals[i], remove_tmp_and_reraise);
  }
  ~TmpFileGuard() {
    for (int i = 0; i < 3; ++i) std::signal(kTmpSignals[i], previous_[i]);
    g_tmp_path[0] = '\0';
  }

 private:
  void (*previous_[3])(int);
};

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
  // read_safetensors_header names the dtypes it reads; this table holds the same ones.
  throw CheckpointError(where + ": dtype '" + name + "' has no LibTorch type here");
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
    const int64_t numel = safetensors_numel(s.shape);
    if (numel < 0) throw CheckpointError(path + ": tensor '" + s.name + "' has an impossible shape");
    const int64_t bytes = numel * static_cast<int64_t>(c10::elementSize(s.dtype));
    header[s.name] = {
        {"dtype", safetensors_dtype_name(s.dtype)}, {"shape", s.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned, as the reference writer does
  const fs::path target(path);
  const fs::path tmp = target.parent_path() / (target.filename().string() + ".tmp-" + std::to_string(::getpid()));
  TmpFileGuard guard(tmp.string());
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out)
    throw CheckpointError(path + ": cannot write (" + std::strerror(errno) + ")",
                          "check that the folder exists and is writable, and that the disk has room");
  write_le64(out, text.size());
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  try {
    for (size_t i = 0; i < specs.size(); ++i) {
      torch::Tensor t = produce(i).to(torch::kCPU).contiguous();
      if (t.scalar_type() != specs[i].dtype || t.sizes().vec() != specs[i].shape)
        throw CheckpointError(path + ": tensor '" + specs[i].name + "' is not the dtype and shape its header gives");
      out.write(static_cast<const char*>(t.data_ptr()), static_cast<std::streamsize>(t.nbytes()));
      if (!out)
        throw CheckpointError(path + ": write failed at tensor '" + specs[i].name + "' (disk full?)",
                              "free space on that disk, or write the file elsewhere");
    }
    out.flush();
    out.close();
    if (!out)
      throw CheckpointError(path + ": write failed (disk full?)",
                            "free space on that disk, or write the file elsewhere");
    std::error_code ec;
    fs::rename(tmp, target, ec);
    if (ec)
      throw CheckpointError(path + ": cannot put the file in place: " + ec.message(),
                            "check that the folder is writable and on one file system with the file");
  } catch (...) {
    std::error_code ec;
    fs::remove(tmp, ec);
    throw;
  }
  return 8 + static_cast<int64_t>(text.size()) + offset;
}

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  const SafetensorsHeader h = read_safetensors_header(path);
  metadata_ = h.metadata;
  for (const auto& e : h.tensors) {
    SafetensorsSpec s;
    s.name = e.name;
    s.dtype = safetensors_dtype(e.dtype, path + ": tensor '" + e.name + "'");
    s.shape = e.shape;
    index_[e.name] = specs_.size();
    specs_.push_back(std::move(s));
    ranges_.push_back({h.data_start + e.begin, h.data_start + e.end});
  }
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
    throw CheckpointError(path_ + ": cannot read tensor '" + name + "' (the file changed?)",
                          "export the file again (gtrain ckpt export) and do not change it while it is read");
  return t;
}

}  // namespace gtrain
