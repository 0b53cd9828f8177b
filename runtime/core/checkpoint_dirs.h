// checkpoint_dirs.h: where a run's checkpoints live and which of their directories are committed
// (torch-free: the launcher reads them before any rank starts).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/config/checkpoint_config.h"

namespace gtrain {

// checkpoint.dir, or <run dir>/checkpoints when it is unset.
std::string checkpoint_directory(const CheckpointConfig& c, const std::string& run_dir);

// True for a name a checkpoint directory has: step_ and eight digits.
bool is_step_dir_name(const std::string& name);

// The committed checkpoints in `dir` (step directories holding a manifest.json), oldest first.
std::vector<std::pair<int64_t, std::filesystem::path>> committed_checkpoint_dirs(const std::string& dir);

// The newest checkpoint in `dir` whose manifest is well formed and whose data files all exist with
// the sizes the manifest gives (no checksums read: cheap enough for `gtrain status`). "" when none.
std::string find_latest_complete_checkpoint(const std::string& dir);

// The checkpoint `path` names: itself (it holds a manifest.json), or the newest committed one in
// it, in its checkpoints/, or in the checkpoint.dir its config.toml names (a run directory), read or not, so a
// malformed newest one is reported, not passed over. Throws ConfigError naming `what` ("" = the path alone) when there
// is none.
std::string resolve_checkpoint_path(const std::string& path, const std::string& what = "");

// checkpoint.init_from checked before any rank starts, for a start that will not resume: the path
// exists, a directory holds a committed checkpoint, a Hugging Face directory has a config.json gtrain
// reads and sound shard headers, a file has a sound safetensors header. (Whether its tensors fit the
// model, the ranks check.) Throws ConfigError naming the key.
void check_init_from(const std::string& path);

}  // namespace gtrain
