// local_backend.cpp: the two backends without a batch scheduler: cuda_env (CUDA_VISIBLE_DEVICES or
// NVIDIA_VISIBLE_DEVICES set) and local (the bare machine: NVML's GPUs in a CUDA build, else none).
#include "launcher/scheduler/discovery.h"
#include "launcher/scheduler/scheduler_backend.h"

namespace gtrain {
namespace {

// One node, this one, with `gpus` and every core.
void this_node_only(DiscoveryContext& r, const std::vector<int>& gpus) {
  r.a->nodes.push_back({r.a->this_host, gpus, r.hw.cores, 0});
  fill_gpu_facts(r.a, r.hw, 0);
}

class CudaEnvBackend : public SchedulerBackend {
 public:
  SchedulerKind kind() const override { return SchedulerKind::cuda_env; }
  bool is_batch_scheduler() const override { return false; }

  bool detect(const std::map<std::string, std::string>& env) const override {
    return env.count("CUDA_VISIBLE_DEVICES") || env.count("NVIDIA_VISIBLE_DEVICES");
  }

  void discover(DiscoveryContext& r) const override {
    std::string var;
    std::vector<int> gpus;
    if (auto vis = r.visible_devices(&var)) gpus = r.visible_list(*vis, var);
    this_node_only(r, gpus);
  }
};

class LocalBackend : public SchedulerBackend {
 public:
  SchedulerKind kind() const override { return SchedulerKind::local; }
  bool is_batch_scheduler() const override { return false; }

  bool detect(const std::map<std::string, std::string>&) const override { return true; }

  void discover(DiscoveryContext& r) const override {
    std::vector<int> gpus;
    if (r.hw.cuda_build) gpus = iota_list(static_cast<int>(r.hw.gpus.size()));
    this_node_only(r, gpus);
  }
};

}  // namespace

const SchedulerBackend& cuda_env_backend() {
  static const CudaEnvBackend backend;
  return backend;
}

const SchedulerBackend& local_backend() {
  static const LocalBackend backend;
  return backend;
}

}  // namespace gtrain
