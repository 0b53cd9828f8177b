// checkpoint.cpp: atomic checkpoint directories with model/optimizer archives and a meta file.
#include "runtime/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "runtime/common/errors.h"

namespace fs = std::filesystem;

namespace gtrain {
namespace {

void fsync_path(const fs::path& p) {
  int fd = ::open(p.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "step_%08lld", static_cast<long long>(step));
  return buf;
}

}  // namespace

CheckpointInfo save_checkpoint(const std::string& dir, int64_t step, int64_t consumed_samples, Model& model,
                               torch::optim::Optimizer& optimizer, int64_t keep) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw CheckpointError(dir + ": cannot create checkpoint directory: " + ec.message());
  const fs::path final_dir = fs::path(dir) / step_name(step);
  const fs::path tmp = fs::path(dir) / (step_name(step) + ".tmp");
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) throw CheckpointError(tmp.string() + ": cannot create: " + ec.message());
  try {
    torch::serialize::OutputArchive m;
    model.save(m);
    m.save_to((tmp / "model.pt").string());
    torch::serialize::OutputArchive o;
    optimizer.save(o);
    o.save_to((tmp / "optimizer.pt").string());
  } catch (const c10::Error& e) {
    throw CheckpointError(tmp.string() + ": writing checkpoint failed: " + e.what_without_backtrace());
  }
  {
    nlohmann::json meta = {{"format", "gtrain-simple"}, {"version", 1}, {"step", step},
                           {"consumed_samples", consumed_samples}};
    std::ofstream f(tmp / "meta.json");
    f << meta.dump(2) << "\n";
    if (!f) throw CheckpointError((tmp / "meta.json").string() + ": write failed");
  }
  for (const char* name : {"model.pt", "optimizer.pt", "meta.json"}) fsync_path(tmp / name);
  fsync_path(tmp);
  fs::remove_all(final_dir, ec);
  fs::rename(tmp, final_dir, ec);
  if (ec) throw CheckpointError(final_dir.string() + ": commit (rename) failed: " + ec.message());
  fsync_path(dir);

  // Prune only after the new one is committed.
  auto all = list_checkpoints(dir);
  for (size_t i = 0; i + static_cast<size_t>(keep) < all.size(); ++i) fs::remove_all(all[i].path, ec);
  return {final_dir.string(), step, consumed_samples};
}

std::vector<CheckpointInfo> list_checkpoints(const std::string& dir) {
  std::vector<CheckpointInfo> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step_", 0) != 0 || name.find(".tmp") != std::string::npos) continue;
    std::ifstream f(e.path() / "meta.json");
    if (!f) continue;
    try {
      auto meta = nlohmann::json::parse(f);
      out.push_back({e.path().string(), meta.at("step").get<int64_t>(), meta.at("consumed_samples").get<int64_t>()});
    } catch (const std::exception&) {
      continue;  // incomplete or corrupt: not a checkpoint
    }
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

CheckpointInfo load_checkpoint(const std::string& path, Model& model, torch::optim::Optimizer& optimizer) {
  std::ifstream f(fs::path(path) / "meta.json");
  if (!f) throw CheckpointError(path + ": not a checkpoint (no meta.json)");
  CheckpointInfo info;
  try {
    auto meta = nlohmann::json::parse(f);
    info = {path, meta.at("step").get<int64_t>(), meta.at("consumed_samples").get<int64_t>()};
    torch::serialize::InputArchive m;
    m.load_from((fs::path(path) / "model.pt").string());
    model.load(m);
    torch::serialize::InputArchive o;
    o.load_from((fs::path(path) / "optimizer.pt").string());
    optimizer.load(o);
  } catch (const c10::Error& e) {
    throw CheckpointError(path + ": cannot load checkpoint: " + e.what_without_backtrace());
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(path + "/meta.json: " + e.what());
  }
  return info;
}

}  // namespace gtrain
