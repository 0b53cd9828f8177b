// device_choice.cpp: local rank + visible / granted GPUs -> this rank's device.
#include "launcher/launch/device_choice.h"

#include <algorithm>

#include "runtime/core/errors.h"

namespace gtrain {
namespace {

std::string n_of(int n, const char* what) {
  return std::to_string(n) + " " + what + (n == 1 ? "" : "s");
}

// More local ranks than `devices`: rank r shares GPU r % devices with the others on it (their GPU
// tensors then go through host memory: runtime/comm/device_sharing.h).
std::string shared_reason(const DeviceChoiceInput& in, int devices, const std::string& where, int index) {
  return "local rank " + std::to_string(in.local_rank) + " -> " + where + " GPU " + std::to_string(index) +
         ", shared (" + n_of(in.local_size, "rank") + " on " + n_of(devices, "GPU") + ")";
}

[[noreturn]] void too_many_ranks(const DeviceChoiceInput& in, int devices, const std::string& where) {
  throw ConfigError(n_of(in.local_size, "rank") + " on this node but " + n_of(devices, "GPU") + " " + where +
                        " (local rank " + std::to_string(in.local_rank) + " has none)",
                    "start one rank per granted GPU (gtrain run does by default), or set train.device = \"cpu\"");
}

}  // namespace

DeviceChoice choose_device(const DeviceChoiceInput& in) {
  DeviceChoice c;
  if (in.requested == DeviceRequest::cpu) {
    c.reason = "train.device = \"cpu\"";
    return c;
  }
  if (!in.cuda_build || in.device_count <= 0) {
    const std::string why = !in.cuda_build ? "this gtrain was built without CUDA" : "no CUDA device is visible";
    if (in.requested == DeviceRequest::cuda) {
      throw ConfigError("train.device = \"cuda\" but " + why,
                        !in.cuda_build ? "rebuild against a CUDA LibTorch (CMAKE_PREFIX_PATH), or use \"auto\""
                                       : "check CUDA_VISIBLE_DEVICES and nvidia-smi, or use \"auto\"");
    }
    c.reason = why + ": CPU";
    return c;
  }
  c.cuda = true;
  const int r = in.local_rank;
  if (in.visible_set && !in.positions.empty()) {
    const int n = static_cast<int>(in.positions.size());
    if (r >= n) too_many_ranks(in, n, "included (gtrain run --include)");
    c.index = in.positions[static_cast<size_t>(r)];
    if (c.index >= in.device_count) {
      throw ConfigError("--include picks this node's granted GPU at position " + std::to_string(c.index) +
                            " but CUDA_VISIBLE_DEVICES shows " + n_of(in.device_count, "GPU"),
                        "include GPUs the scheduler granted this node");
    }
    c.reason = "local rank " + std::to_string(r) + " -> included GPU at position " + std::to_string(c.index);
    return c;
  }
  if (in.visible_set) {
    if (in.device_count == 1) {
      c.index = 0;
      c.reason =
          "CUDA_VISIBLE_DEVICES shows one GPU" + std::string(in.local_size > 1 ? " (shared by this node's ranks)" : "");
    } else {
      c.index = r % in.device_count;
      c.reason = in.local_size > in.device_count
                     ? shared_reason(in, in.device_count, "visible", c.index)
                     : "local rank " + std::to_string(r) + " of " + std::to_string(in.local_size) + " -> visible GPU " +
                           std::to_string(r);
    }
    return c;
  }
  if (!in.granted.empty()) {
    const int n = static_cast<int>(in.granted.size());
    const int pick = r % n;
    c.index = in.granted[static_cast<size_t>(pick)];
    if (c.index < 0 || c.index >= in.device_count) {
      throw ConfigError("the allocation grants GPU " + std::to_string(c.index) + " but this process sees " +
                            n_of(in.device_count, "CUDA device"),
                        "set CUDA_VISIBLE_DEVICES to the granted GPUs, or check the scheduler's GPU binding");
    }
    c.reason = in.local_size <= n ? "local rank " + std::to_string(r) + " -> granted GPU " + std::to_string(c.index)
                                  : shared_reason(in, n, "granted", c.index);
    return c;
  }
  if (in.device_count == 1) {
    c.index = 0;
    c.reason = "the only visible GPU";
  } else {
    c.index = r % in.device_count;
    c.reason = in.local_size > in.device_count ? shared_reason(in, in.device_count, "visible", c.index)
                                               : "local rank " + std::to_string(r) + " -> GPU " + std::to_string(r);
  }
  return c;
}

}  // namespace gtrain
