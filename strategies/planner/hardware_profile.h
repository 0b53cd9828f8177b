// hardware_profile.h: HardwareProfile, what the cost model assumes about a device and its links
// (matmul rate, memory, bandwidths), the table of common GPUs, and saved calibrations.
//
// Table figures are vendor peak dense matmul rates times an efficiency a well-tuned training
// step reaches (30-45% of peak); links are NCCL-style allreduce bus bandwidths. A profile measured
// by `gtrain plan --calibrate` is saved as JSON in profile_dir() and used by later plans.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/core/config/enum_names.h"

namespace gtrain {

// What a profile describes: a GPU, or a host's CPU cores (one name table: the JSON's "kind").
enum class DeviceKind { cpu, gpu };
constexpr std::array<EnumName<DeviceKind>, 2> enum_names(DeviceKind) {
  return {{{DeviceKind::cpu, "cpu"}, {DeviceKind::gpu, "gpu"}}};
}

struct HardwareProfile {
  std::string name = "cpu";  // "A100-80GB", "H100-80GB", "cpu", ...
  DeviceKind kind = DeviceKind::cpu;
  double memory_bytes = 0;  // per device, its total (0 = decided at planning time: host memory per rank)
  // Of memory_bytes, what a training process cannot allocate: on a GPU the CUDA context and NCCL's
  // buffers, outside the caching allocator (usable_bytes() is the rest).
  double reserved_bytes = 0;
  double fp32_flops = 50e9;  // peak dense matmul FLOP/s per device
  double bf16_flops = 25e9;
  double fp16_flops = 25e9;
  double efficiency = 0.5;        // fraction of peak a training step reaches
  double memory_bw = 10e9;        // device memory bytes/s (optimizer step)
  double intra_node_bw = 5e9;     // allreduce bus bandwidth among devices of one node, bytes/s
  double inter_node_bw = 1.25e9;  // network bandwidth per node, bytes/s
  // Optimizer offload: host memory bytes/s a multi-threaded CPU AdamW streams (0 = memory_bw, on a
  // CPU the same memory), and the host-device link (PCIe / C2C) each way (0 = memory_bw).
  double host_memory_bw = 0;
  double host_link_bw = 0;
  // CPU, measured by `gtrain plan --calibrate` (0 = not measured: the peak rate times `efficiency`
  // stands for every matmul and thread count). The step is then priced by threads per rank:
  int cores = 0;                       // threads fp32_flops was measured with (every core)
  double fp32_flops_1thread = 0;       // large fp32 matmul on one thread
  double matmul_half_size = 0;         // one thread: n at which an n^3 matmul reaches half that rate
  double matmul_half_size_all = 0;     // the same on every core (the peak there is fp32_flops)
  double attention_flops_1thread = 0;  // attention's batched matmuls (64 x [128 x 64] . [64 x 128])
  double elementwise_bw = 0;           // bytes/s (read + written) of elementwise ops on one thread
  // Seconds per element, forward + backward, one thread: LayerNorm over rows of 256, GELU (tanh),
  // softmax over rows of 128; and seconds per parameter of an AdamW step.
  double norm_s = 0, activation_s = 0, softmax_s = 0, optimizer_s = 0;
  double memory_bound_speedup = 0;  // every core against one on those layers
  // A real transformer block's forward + backward on one thread beyond what cpu_block_seconds
  // prices (copies, bias gradients, autograd's own work), seconds per token and width.
  double block_remainder_s = 0;
  double block_speedup = 0;                     // that block on every core against one thread
  double latency_s = 20e-6;                     // per collective
  double launch_overhead_s = 10e-6;             // fixed cost per kernel / op
  double workspace_bytes = 64.0 * 1024 * 1024;  // allocated per device besides the tensors (cuBLAS workspaces)
  double fragmentation = 0.0;                   // extra fraction of the estimate lost to allocator fragmentation
  std::string source = "default";               // "table", "default", or "calibrated on HOST at TIME"
  std::string note;                             // caveats, e.g. how the bandwidth was measured

  // What a process can allocate on the device: memory_bytes less reserved_bytes.
  double usable_bytes() const { return memory_bytes > reserved_bytes ? memory_bytes - reserved_bytes : 0.0; }
  double host_memory_rate() const { return host_memory_bw > 0 ? host_memory_bw : memory_bw; }
  double host_link_rate() const { return host_link_bw > 0 ? host_link_bw : memory_bw; }
  // FLOP/s a training step reaches in this precision ("fp32", "bf16", "fp16").
  double achievable_flops(const std::string& precision) const;
  // Calibrated CPU figures present (threads, matmul size and elementwise ops priced separately).
  bool per_thread() const {
    return kind == DeviceKind::cpu && cores > 0 && fp32_flops_1thread > 0 && elementwise_bw > 0 &&
           attention_flops_1thread > 0 && norm_s > 0 && activation_s > 0 && softmax_s > 0 && optimizer_s > 0 &&
           memory_bound_speedup > 0 && block_speedup > 0;
  }
  // per_thread(): FLOP/s of an n^3 matmul on `threads` threads (between the one-thread and
  // every-core curves), and how many times one thread's rate the memory-bound layers reach.
  double matmul_rate(double n, double threads) const;
  double memory_bound_rate(double threads) const;
  double block_rate(double threads) const;
};

// V100-32GB, A100-40GB, A100-80GB, H100-80GB, H200, L40S.
const std::vector<HardwareProfile>& gpu_profile_table();

// Conservative CPU profile for a machine with `cores` cores (used when nothing was calibrated).
HardwareProfile default_cpu_profile(int cores);

// The table entry a name or NVML/scheduler model string means ("a100", "NVIDIA A100-SXM4-40GB",
// "h100", "l40s"), using `memory_bytes` (0 = unknown) to tell 40 from 80 GB parts. nullopt when
// nothing matches.
std::optional<HardwareProfile> find_gpu_profile(const std::string& model, double memory_bytes = 0);

// The table entry whose memory is nearest `memory_bytes` (for --gpu-mem without --gpu-type).
HardwareProfile nearest_gpu_profile_by_memory(double memory_bytes);

// One rank's part of a GPU that `ranks` ranks share (launcher/launch/device_choice.h): each keeps
// its own CUDA context and workspaces (reserved_bytes, workspace_bytes) within an equal share of
// the memory, and gets 1/ranks of the matmul and memory rates; their collectives go over MPI
// through host memory (runtime/comm/device_sharing.h), so the node's bus bandwidth is at most the
// host link's, down and up again, split among them. ranks <= 1 returns `p` unchanged.
HardwareProfile shared_gpu_profile(const HardwareProfile& p, int ranks);

// Where calibrations live: $GTRAIN_PROFILE_DIR, else $HOME/.cache/gtrain ("" when neither is set).
std::string profile_dir(const std::map<std::string, std::string>& env);
// <profile_dir>/profile-<hostname>.json
std::string profile_path(const std::map<std::string, std::string>& env, const std::string& hostname);

nlohmann::json profile_to_json(const HardwareProfile& p);
// ConfigError naming `origin` when a field is missing or has the wrong type.
HardwareProfile profile_from_json(const nlohmann::json& j, const std::string& origin);

// This host's CPU profile: the saved calibration when it is a CPU one, else default_cpu_profile.
HardwareProfile local_cpu_profile(const std::map<std::string, std::string>& env, const std::string& hostname,
                                  int cores);

// Writes the profile (creating the directory). Throws Error when it cannot be written.
void save_profile(const HardwareProfile& p, const std::string& path);
// nullopt when the file does not exist; ConfigError when it exists but does not parse.
std::optional<HardwareProfile> load_profile(const std::string& path);

}  // namespace gtrain
