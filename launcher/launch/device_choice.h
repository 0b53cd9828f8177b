// device_choice.h: choose_device, the pure rule that gives each rank its device: train.device, the
// CUDA devices the process sees, CUDA_VISIBLE_DEVICES and the GPUs the allocation granted this node,
// and the rank's place on the node.
//
// Rule, in order:
//   1. train.device = "cpu", or "auto" with no CUDA build or no visible device: CPU.
//      "cuda" there is a ConfigError naming train.device.
//   2. CUDA_VISIBLE_DEVICES set: the process sees the granted GPUs as ordinals 0..n-1 in the order
//      listed, so local rank r takes ordinal r, or positions[r] when `gtrain run --include` narrowed
//      this node's GPUs (host_include.h). With one visible device (the scheduler bound one GPU
//      to each task, or ranks share one GPU) every rank takes ordinal 0.
//   3. Not set, with the allocation's granted indices for this node: local rank r takes granted[r]
//      (physical index = ordinal when nothing is hidden); one granted GPU is shared.
//   4. Neither: local rank r takes ordinal r.
//   More local ranks than devices: rank r shares device r % n with the others on it (NCCL refuses
//   that, so their GPU tensors go over MPI through host memory: runtime/comm/device_sharing.h).
//   Only --include's explicit positions stay one rank each (more is a ConfigError naming both counts).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/core/config/train_config.h"

namespace gtrain {

struct DeviceChoiceInput {
  DeviceRequest requested = DeviceRequest::automatic;  // train.device
  bool cuda_build = false;                             // GTRAIN_WITH_CUDA
  int device_count = 0;                                // CUDA devices this process sees
  bool visible_set = false;                            // CUDA_VISIBLE_DEVICES lists the devices (remapped to 0..n-1)
  std::vector<int> granted;    // this node's granted GPU indices from the allocation ({} = unknown)
  std::vector<int> positions;  // --include: the visible ordinals this node's ranks take ({} = 0..n-1)
  int local_rank = 0, local_size = 1;
};

struct DeviceChoice {
  bool cuda = false;
  int index = -1;      // CUDA ordinal (cuda only)
  std::string reason;  // one line: why this device
  std::string str() const { return cuda ? "cuda:" + std::to_string(index) : "cpu"; }
};

DeviceChoice choose_device(const DeviceChoiceInput& in);

}  // namespace gtrain
