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

// Parameters and buffers by name. Cloned: parameters may be views into flat buckets.
TensorMap model_tensors(Model& model) {
  TensorMap out;
  for (const auto& kv : model.named_parameters()) out[kv.key()] = kv.value();
  for (const auto& kv : model.named_buffers()) out[kv.key()] = kv.value();
  return out;
}

// Archive keys are "t0", "t1", ... in name order (names may contain dots, archive keys may not);
// meta.json lists the names in the same order.
void write_tensors(const std::string& file, const TensorMap& tensors) {
  torch::serialize::OutputArchive a;
  size_t i = 0;
  for (const auto& kv : tensors) a.write("t" + std::to_string(i++), kv.second.detach().clone().contiguous());
  a.save_to(file);
}

TensorMap read_tensors(const std::string& file, const std::vector<std::string>& names) {
  torch::serialize::InputArchive a;
  a.load_from(file);
  TensorMap out;
  for (size_t i = 0; i < names.size(); ++i) {
    torch::Tensor t;
    if (!a.try_read("t" + std::to_string(i), t)) throw CheckpointError(file + ": tensor '" + names[i] + "' is missing");
    out[names[i]] = t;
  }
  return out;
}

}  // namespace

CheckpointInfo save_checkpoint(const std::string& dir, int64_t step, int64_t consumed_samples, Model& model,
                               const TensorMap& optimizer_state, int64_t keep) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw CheckpointError(dir + ": cannot create checkpoint directory: " + ec.message());
  const fs::path final_dir = fs::path(dir) / step_name(step);
  const fs::path tmp = fs::path(dir) / (step_name(step) + ".tmp");
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec) throw CheckpointError(tmp.string() + ": cannot create: " + ec.message());
  try {
    write_tensors((tmp / "model.pt").string(), model_tensors(model));
    write_tensors((tmp / "optimizer.pt").string(), optimizer_state);
  } catch (const c10::Error& e) {
    throw CheckpointError(tmp.string() + ": writing checkpoint failed: " + e.what_without_backtrace());
  }
  {
    nlohmann::json meta = {{"format", "gtrain-simple"}, {"version", 2}, {"step", step},
                           {"consumed_samples", consumed_samples}};
    for (const auto& kv : model_tensors(model)) meta["model_tensors"].push_back(kv.first);
    for (const auto& kv : optimizer_state) meta["optimizer_tensors"].push_back(kv.first);
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

CheckpointInfo load_checkpoint(const std::string& path, Model& model, TensorMap* optimizer_state) {
  std::ifstream f(fs::path(path) / "meta.json");
  if (!f) throw CheckpointError(path + ": not a checkpoint (no meta.json)");
  CheckpointInfo info;
  try {
    auto meta = nlohmann::json::parse(f);
    info = {path, meta.at("step").get<int64_t>(), meta.at("consumed_samples").get<int64_t>()};
    std::vector<std::string> model_keys = meta.at("model_tensors").get<std::vector<std::string>>();
    TensorMap saved = read_tensors((fs::path(path) / "model.pt").string(), model_keys);
    torch::NoGradGuard ng;
    for (auto& kv : model_tensors(model)) {
      auto it = saved.find(kv.first);
      if (it == saved.end()) throw CheckpointError(path + ": model tensor '" + kv.first + "' is missing");
      if (!it->second.sizes().equals(kv.second.sizes())) {
        throw CheckpointError(path + ": model tensor '" + kv.first + "' has shape " + c10::str(it->second.sizes()) +
                              ", the model has " + c10::str(kv.second.sizes()));
      }
      kv.second.copy_(it->second);
    }
    if (optimizer_state) {
      std::vector<std::string> keys;
      if (meta.contains("optimizer_tensors")) keys = meta.at("optimizer_tensors").get<std::vector<std::string>>();
      *optimizer_state = read_tensors((fs::path(path) / "optimizer.pt").string(), keys);
    }
  } catch (const c10::Error& e) {
    throw CheckpointError(path + ": cannot load checkpoint: " + e.what_without_backtrace());
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(path + "/meta.json: " + e.what());
  }
  return info;
}

}  // namespace gtrain
