// checkpoint.cpp: sharded checkpoint writing (async, atomic commit) and resharding reads.
#include "runtime/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "runtime/checkpoint/crc32c.h"
#include "runtime/common/errors.h"

namespace fs = std::filesystem;

namespace gtrain {
namespace {

using Clock = std::chrono::steady_clock;

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step_%08lld", static_cast<long long>(step));
  return buf;
}

void fsync_path(const fs::path& p) {
  int fd = ::open(p.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

uint32_t crc_of(const void* data, size_t n) { return crc32c(data, n); }

std::string dtype_name(c10::ScalarType t) {
  switch (t) {
    case torch::kFloat: return "float32";
    case torch::kDouble: return "float64";
    case torch::kHalf: return "float16";
    case torch::kBFloat16: return "bfloat16";
    case torch::kLong: return "int64";
    case torch::kInt: return "int32";
    case torch::kByte: return "uint8";
    default: throw CheckpointError(std::string("cannot checkpoint dtype ") + c10::toString(t));
  }
}

c10::ScalarType dtype_of(const std::string& s, const std::string& where) {
  if (s == "float32") return torch::kFloat;
  if (s == "float64") return torch::kDouble;
  if (s == "float16") return torch::kHalf;
  if (s == "bfloat16") return torch::kBFloat16;
  if (s == "int64") return torch::kLong;
  if (s == "int32") return torch::kInt;
  if (s == "uint8") return torch::kByte;
  throw CheckpointError(where + ": unknown dtype '" + s + "'");
}

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) throw CheckpointError(path + ": write failed: " + std::strerror(errno));
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void write_file_atomic(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".part";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw CheckpointError(tmp.string() + ": cannot create: " + std::strerror(errno));
  write_all(fd, text.data(), text.size(), tmp.string());
  ::fsync(fd);
  ::close(fd);
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw CheckpointError(path.string() + ": rename failed: " + ec.message());
}

nlohmann::json read_json(const fs::path& p) {
  std::ifstream f(p);
  if (!f) throw CheckpointError(p.string() + ": missing");
  try {
    return nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(p.string() + ": unreadable JSON (" + std::string(e.what()) + ")");
  }
}

// The directory entries of committed checkpoints, oldest first.
std::vector<std::pair<int64_t, fs::path>> committed_dirs(const std::string& dir) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step_", 0) != 0 || name.size() != 13) continue;
    if (name.find_first_not_of("0123456789", 5) != std::string::npos) continue;
    if (!fs::exists(e.path() / "manifest.json")) continue;
    out.emplace_back(std::stoll(name.substr(5)), e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

std::vector<CheckpointInfo> list_checkpoints(const std::string& dir) {
  std::vector<CheckpointInfo> out;
  for (const auto& [step, path] : committed_dirs(dir)) {
    try {
      auto m = read_json(path / "manifest.json");
      out.push_back({path.string(), m.at("step").get<int64_t>(), m.at("consumed_samples").get<int64_t>()});
    } catch (const std::exception&) {
      continue;
    }
  }
  return out;
}

// ---- writing ----

CheckpointWriter::CheckpointWriter(bool async) : async_(async) {}

CheckpointWriter::~CheckpointWriter() {
  if (thread_.joinable()) thread_.join();
}

void CheckpointWriter::wait() {
  if (thread_.joinable()) thread_.join();
  if (error_) {
    auto e = error_;
    error_ = nullptr;
    std::rethrow_exception(e);
  }
}

double CheckpointWriter::save(SaveRequest r) {
  wait();
  const auto t0 = Clock::now();
  // Async: host copies, since training changes the live tensors as soon as we return. Sync:
  // nothing changes them while we write, so no copy.
  std::vector<TensorShard> mine;
  for (auto& s : r.shards) {
    if (!s.write) continue;
    auto host = s.data.detach().to(torch::kCPU).contiguous();
    s.data = (async_ && host.data_ptr() == s.data.data_ptr()) ? host.clone() : host;
    mine.push_back(std::move(s));
  }
  r.shards = std::move(mine);
  const double stall = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!async_) {
    write(r);
    return stall + last_write_s_.load();
  }
  thread_ = std::thread([this, req = std::move(r)]() mutable {
    try {
      write(req);
    } catch (...) {
      error_ = std::current_exception();
    }
  });
  return stall;
}

void CheckpointWriter::write(SaveRequest& r) {
  const auto t0 = Clock::now();
  std::error_code ec;
  fs::create_directories(r.dir, ec);
  if (ec) throw CheckpointError(r.dir + ": cannot create checkpoint directory: " + ec.message());
  const fs::path tmp = fs::path(r.dir) / (step_name(r.step) + ".tmp-" + r.token);
  fs::create_directories(tmp, ec);
  if (ec) throw CheckpointError(tmp.string() + ": cannot create: " + ec.message());

  // 1. This rank's data file and its piece list.
  const std::string file = "shard_" + std::to_string(r.rank) + ".bin";
  const fs::path data_path = tmp / file;
  int fd = ::open(data_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) throw CheckpointError(data_path.string() + ": cannot create: " + std::strerror(errno));
  nlohmann::json pieces = nlohmann::json::array();
  int64_t offset = 0;
  for (const auto& s : r.shards) {
    const size_t n = s.data.nbytes();
    write_all(fd, s.data.data_ptr(), n, data_path.string());
    pieces.push_back({{"name", s.name},
                      {"dtype", dtype_name(s.data.scalar_type())},
                      {"shape", s.global_shape},
                      {"region_offsets", s.region_offsets},
                      {"region_shape", s.region_shape},
                      {"flat_begin", s.flat_begin},
                      {"numel", s.data.numel()},
                      {"file", file},
                      {"offset", offset},
                      {"nbytes", n},
                      {"crc32c", crc_of(s.data.data_ptr(), n)}});
    offset += static_cast<int64_t>(n);
  }
  ::fsync(fd);
  ::close(fd);
  write_file_atomic(tmp / ("shard_" + std::to_string(r.rank) + ".json"), pieces.dump());
  last_bytes_ = offset;

  // 2. Rank 0 commits once every rank has published its pieces.
  if (r.rank == 0) {
    nlohmann::json manifest = r.meta;
    manifest["format"] = "gtrain-checkpoint";
    manifest["version"] = kCheckpointFormatVersion;
    manifest["step"] = r.step;
    manifest["consumed_samples"] = r.consumed_samples;
    manifest["world"] = r.world;
    nlohmann::json tensors = nlohmann::json::object();
    const auto deadline = Clock::now() + std::chrono::duration<double>(r.commit_timeout_s);
    for (int k = 0; k < r.world; ++k) {
      const fs::path part = tmp / ("shard_" + std::to_string(k) + ".json");
      while (!fs::exists(part)) {
        if (Clock::now() > deadline) {
          throw CheckpointError(part.string() + ": rank " + std::to_string(k) + " did not finish its part of the "
                                "checkpoint in time; the checkpoint was not committed");
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      for (const auto& p : read_json(part)) {
        auto& t = tensors[p.at("name").get<std::string>()];
        t["dtype"] = p.at("dtype");
        t["shape"] = p.at("shape");
        nlohmann::json piece = p;
        piece.erase("name");
        piece.erase("dtype");
        piece.erase("shape");
        piece["rank"] = k;
        t["pieces"].push_back(piece);
      }
    }
    manifest["tensors"] = tensors;
    write_file_atomic(tmp / "manifest.json", manifest.dump(1));
    fsync_path(tmp);
    const fs::path final_dir = fs::path(r.dir) / step_name(r.step);
    if (fs::exists(final_dir)) fs::remove_all(final_dir, ec);  // a re-save of the same step
    fs::rename(tmp, final_dir, ec);
    if (ec) throw CheckpointError(final_dir.string() + ": commit (rename) failed: " + ec.message());
    fsync_path(r.dir);
    // 3. Prune only now that the new checkpoint is committed; clean leftovers of crashed saves.
    auto all = committed_dirs(r.dir);
    for (size_t i = 0; i + static_cast<size_t>(r.keep) < all.size(); ++i) fs::remove_all(all[i].second, ec);
    for (const auto& e : fs::directory_iterator(r.dir, ec)) {
      const std::string name = e.path().filename().string();
      if (name.find(".tmp-") != std::string::npos && name.find(".tmp-" + r.token) == std::string::npos) {
        fs::remove_all(e.path(), ec);
      }
    }
  }
  last_write_s_ = std::chrono::duration<double>(Clock::now() - t0).count();
}

CheckpointInfo write_checkpoint(SaveRequest request) {
  CheckpointWriter w(false);
  const std::string dir = request.dir;
  const int64_t step = request.step, samples = request.consumed_samples;
  w.save(std::move(request));
  return {(fs::path(dir) / step_name(step)).string(), step, samples};
}

// ---- reading ----

CheckpointReader::CheckpointReader(const std::string& path) : path_(path) {
  manifest_ = read_json(fs::path(path) / "manifest.json");
  const std::string where = (fs::path(path) / "manifest.json").string();
  if (manifest_.value("format", "") != "gtrain-checkpoint") throw CheckpointError(where + ": not a gtrain checkpoint");
  const int version = manifest_.value("version", 0);
  if (version != kCheckpointFormatVersion) {
    throw CheckpointError(where + ": format version " + std::to_string(version) + ", this gtrain reads version " +
                          std::to_string(kCheckpointFormatVersion));
  }
  for (const auto& [name, t] : manifest_.at("tensors").items()) tensors_[name] = &t;
}

std::vector<std::string> CheckpointReader::tensor_names() const {
  std::vector<std::string> out;
  for (const auto& kv : tensors_) out.push_back(kv.first);
  return out;
}

bool CheckpointReader::has(const std::string& name) const { return tensors_.count(name) > 0; }

torch::Tensor CheckpointReader::read(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) throw CheckpointError(path_ + ": has no tensor '" + name + "'");
  const auto& t = *it->second;
  const auto dtype = dtype_of(t.at("dtype").get<std::string>(), path_);
  const auto shape = t.at("shape").get<std::vector<int64_t>>();
  auto global = torch::zeros(shape, dtype);
  std::map<std::string, int> fds;
  try {
    for (const auto& p : t.at("pieces")) {
      const std::string file = p.at("file").get<std::string>();
      const std::string fpath = (fs::path(path_) / file).string();
      if (!fds.count(file)) {
        int fd = ::open(fpath.c_str(), O_RDONLY);
        if (fd < 0) throw CheckpointError(fpath + ": missing data file (" + std::strerror(errno) + ")");
        fds[file] = fd;
      }
      const int64_t numel = p.at("numel").get<int64_t>(), nbytes = p.at("nbytes").get<int64_t>();
      auto buf = torch::empty({numel}, dtype);
      if (static_cast<int64_t>(buf.nbytes()) != nbytes) throw CheckpointError(fpath + ": piece of '" + name + "' has a bad size");
      const ssize_t got = ::pread(fds[file], buf.data_ptr(), nbytes, p.at("offset").get<int64_t>());
      if (got != nbytes) throw CheckpointError(fpath + ": truncated (piece of '" + name + "')");
      if (crc_of(buf.data_ptr(), nbytes) != p.at("crc32c").get<uint32_t>()) {
        throw CheckpointError(fpath + ": checksum mismatch in '" + name + "' (the file is corrupt)");
      }
      const auto off = p.at("region_offsets").get<std::vector<int64_t>>();
      const auto rshape = p.at("region_shape").get<std::vector<int64_t>>();
      const int64_t flat_begin = p.at("flat_begin").get<int64_t>();
      torch::Tensor region = global;
      for (size_t d = 0; d < off.size(); ++d) region = region.narrow(static_cast<int64_t>(d), off[d], rshape[d]);
      if (region.is_contiguous()) {
        region.view({-1}).narrow(0, flat_begin, numel).copy_(buf);
      } else {
        auto flat = region.contiguous().view({-1});
        flat.narrow(0, flat_begin, numel).copy_(buf);
        region.copy_(flat.view(region.sizes()));
      }
    }
  } catch (...) {
    for (auto& kv : fds) ::close(kv.second);
    throw;
  }
  for (auto& kv : fds) ::close(kv.second);
  return global;
}

std::vector<std::string> CheckpointReader::verify() const {
  std::vector<std::string> problems;
  for (const auto& [name, t] : tensors_) {
    int64_t covered = 0;
    for (const auto& p : t->at("pieces")) covered += p.at("numel").get<int64_t>();
    int64_t total = 1;
    for (auto d : t->at("shape").get<std::vector<int64_t>>()) total *= d;
    if (covered != total) {
      problems.push_back(path_ + ": tensor '" + name + "' has " + std::to_string(covered) + " of " +
                         std::to_string(total) + " elements");
    }
    try {
      read(name);
    } catch (const Error& e) {
      problems.push_back(e.what());
    }
  }
  return problems;
}

std::string find_latest_valid_checkpoint(const std::string& dir, std::vector<std::string>* warnings) {
  auto all = committed_dirs(dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      CheckpointReader r(it->second.string());
      auto problems = r.verify();
      if (problems.empty()) return it->second.string();
      if (warnings) warnings->push_back("skipping checkpoint " + it->second.string() + ": " + problems.front());
    } catch (const Error& e) {
      if (warnings) warnings->push_back("skipping checkpoint " + it->second.string() + ": " + e.what());
    }
  }
  return "";
}

}  // namespace gtrain
