// checkpoint_dirs.cpp: the checkpoint directory of a run and its committed step directories.
#include "runtime/core/checkpoint_dirs.h"

#include <algorithm>

#include "runtime/core/checkpoint_manifest.h"
#include "runtime/core/config/job_config.h"
#include "runtime/core/errors.h"
#include "runtime/core/hf_config.h"
#include "runtime/core/run_dir/run_files.h"
#include "runtime/core/safetensors_header.h"

namespace gtrain {

namespace fs = std::filesystem;

std::string checkpoint_directory(const CheckpointConfig& c, const std::string& run_dir) {
  return c.dir.empty() ? RunDir(run_dir).path(RunFile::checkpoints) : c.dir;
}

bool is_step_dir_name(const std::string& name) {
  return name.size() == 13 && name.rfind("step_", 0) == 0 &&
         name.find_first_not_of("0123456789", 5) == std::string::npos;
}

std::vector<std::pair<int64_t, fs::path>> committed_checkpoint_dirs(const std::string& dir) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!is_step_dir_name(name) || !fs::exists(e.path() / kManifestFile, ec)) continue;
    out.emplace_back(std::stoll(name.substr(5)), e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string resolve_checkpoint_path(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (fs::exists(fs::path(path) / kManifestFile, ec)) return path;
  const auto newest = [](const fs::path& root) {
    auto all = committed_checkpoint_dirs(root.string());
    return all.empty() ? std::string() : all.back().second.string();
  };
  for (const auto& root : {fs::path(path), fs::path(RunDir(path).path(RunFile::checkpoints))}) {
    const std::string found = newest(root);
    if (!found.empty()) return found;
  }
  // A run directory whose checkpoint.dir is elsewhere: its config.toml says where (read only now).
  if (RunDir(path).has(RunFile::config)) {
    try {
      const std::string found =
          newest(checkpoint_directory(load_job_config(RunDir(path).config(), {}, {}).checkpoint, path));
      if (!found.empty()) return found;
    } catch (const Error&) {  // unreadable: the two places above were all there is
    }
  }
  const std::string prefix = what.empty() ? "" : what + ": ";
  if (!fs::exists(path, ec))
    throw ConfigError(prefix + path + ": does not exist",
                      "give a run directory, its checkpoints folder, a checkpoint, or a Hugging Face model directory");
  throw ConfigError(prefix + path + ": not a checkpoint, and holds no committed checkpoint");
}

void check_init_from(const std::string& path) {
  std::error_code ec;
  if (is_hf_model_dir(path)) {
    try {
      check_hf_model_dir(path);
    } catch (const ConfigError& e) {
      throw ConfigError(std::string("checkpoint.init_from: ") + e.what(), e.hint());
    }
  } else if (fs::is_directory(path, ec)) {
    resolve_checkpoint_path(path, "checkpoint.init_from");
  } else if (!fs::exists(path, ec)) {
    throw ConfigError("checkpoint.init_from: " + path +
                      " does not exist (expected a .safetensors file, a checkpoint or run directory, or a Hugging Face "
                      "model directory)");
  } else {
    try {  // the whole header: not a safetensors file, truncated, damaged
      read_safetensors_header(path);
    } catch (const CheckpointError& e) {
      throw ConfigError(std::string("checkpoint.init_from: ") + e.what());
    }
  }
}

std::string find_latest_complete_checkpoint(const std::string& dir) {
  auto all = committed_checkpoint_dirs(dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      const std::string path = it->second.string();
      if (checkpoint_file_problems(read_checkpoint_manifest(path), path).empty()) return path;
    } catch (const Error&) {
    }
  }
  return "";
}

}  // namespace gtrain
