// checkpoint.h: periodic checkpoints of model and optimizer state, written atomically
// (temporary directory, fsync, rename) and pruned to the newest `keep`.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "runtime/checkpoint/checkpoint_config.h"
#include "runtime/models/model.h"

namespace gtrain {

struct CheckpointInfo {
  std::string path;
  int64_t step = 0;              // optimizer steps completed
  int64_t consumed_samples = 0;  // global sample index of the next sample
};

using TensorMap = std::map<std::string, torch::Tensor>;

// Writes <dir>/step_<NNNNNNNN>/{model.pt, optimizer.pt, meta.json}; returns its path.
// Tensors are stored by name (parameters and buffers; optimizer state keyed "<param>.exp_avg" ...).
CheckpointInfo save_checkpoint(const std::string& dir, int64_t step, int64_t consumed_samples, Model& model,
                               const TensorMap& optimizer_state, int64_t keep);

// Complete checkpoints in `dir`, oldest first.
std::vector<CheckpointInfo> list_checkpoints(const std::string& dir);

// Restores the model's tensors and returns the optimizer state of a checkpoint.
CheckpointInfo load_checkpoint(const std::string& path, Model& model, TensorMap* optimizer_state);

}  // namespace gtrain
