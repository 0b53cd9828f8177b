// calibrate.cpp: matmul and copy timings with torch, on the GPU in CUDA builds that see one, else
// on the CPU with every core.
#include "launcher/commands/calibrate.h"

#include <torch/torch.h>

#include <chrono>
#include <cstring>
#include <ctime>
#include <vector>

#include "runtime/common/torch_threads.h"
#include "runtime/core/startup.h"

namespace gtrain {
namespace {

using Clock = std::chrono::steady_clock;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

void sync(const torch::Device& d) {
#ifdef GTRAIN_WITH_CUDA
  if (d.is_cuda()) torch::cuda::synchronize();
#endif
  (void)d;
}

// FLOP/s of n x n matmuls in `dtype`, repeated for about `budget_s`.
double matmul_rate(int64_t n, torch::Dtype dtype, const torch::Device& dev, double budget_s) {
  torch::NoGradGuard ng;
  auto opts = torch::TensorOptions().dtype(dtype).device(dev);
  auto a = torch::randn({n, n}, opts), b = torch::randn({n, n}, opts);
  auto c = torch::matmul(a, b);  // warm-up (kernel selection, thread pool start)
  sync(dev);
  int64_t reps = 0;
  const auto t0 = Clock::now();
  do {
    c = torch::matmul(a, b);
    ++reps;
    if (reps % 4 == 0) sync(dev);
  } while (since(t0) < budget_s || reps < 2);
  sync(dev);
  const double s = since(t0);
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(reps) / s;
}

// Bytes/s read plus written by copying a large buffer.
double host_copy_bw(double budget_s) {
  const size_t bytes = 128u << 20;
  std::vector<char> src(bytes, 1), dst(bytes, 0);
  std::memcpy(dst.data(), src.data(), bytes);  // fault the pages in
  int64_t reps = 0;
  const auto t0 = Clock::now();
  do {
    std::memcpy(dst.data(), src.data(), bytes);
    src[static_cast<size_t>(reps) % bytes] = static_cast<char>(reps);  // keep the copies observable
    ++reps;
  } while (since(t0) < budget_s || reps < 2);
  return 2.0 * static_cast<double>(bytes) * static_cast<double>(reps) / since(t0);
}

#ifdef GTRAIN_WITH_CUDA
double device_copy_bw(const torch::Device& dev, double budget_s) {
  auto a = torch::empty({256 << 20}, torch::TensorOptions().dtype(torch::kUInt8).device(dev));
  auto b = torch::empty_like(a);
  b.copy_(a);
  sync(dev);
  int64_t reps = 0;
  const auto t0 = Clock::now();
  do {
    b.copy_(a);
    ++reps;
  } while (since(t0) < budget_s || reps < 2);
  sync(dev);
  return 2.0 * static_cast<double>(a.numel()) * static_cast<double>(reps) / since(t0);
}
#endif

std::string now_iso() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
  return buf;
}

}  // namespace

Calibration calibrate_this_machine(const HardwareInfo& hw, double budget_s) {
  Calibration c;
  const auto t0 = Clock::now();
  bool gpu = false;
#ifdef GTRAIN_WITH_CUDA
  gpu = torch::cuda::is_available();
#endif
  if (gpu) {
#ifdef GTRAIN_WITH_CUDA
    const torch::Device dev(torch::kCUDA, 0);
    c.matmul_fp32_flops = matmul_rate(4096, torch::kFloat, dev, 0.35 * budget_s);
    c.matmul_bf16_flops = matmul_rate(8192, torch::kBFloat16, dev, 0.35 * budget_s);
    c.copy_bw = device_copy_bw(dev, 0.2 * budget_s);
    const std::string name = hw.gpus.empty() ? std::string("cuda:0") : hw.gpus.front().name;
    const double mem = hw.gpus.empty() ? 0.0 : static_cast<double>(hw.gpus.front().memory_bytes);
    HardwareProfile p = find_gpu_profile(name, mem).value_or(HardwareProfile{});
    if (p.kind != "gpu") {  // not in the table: GPU defaults for what was not measured
      p = gpu_profile_table().front();
      p.intra_node_bw = 20e9;
      p.inter_node_bw = 12.5e9;
    }
    p.name = name;
    p.kind = "gpu";
    if (mem > 0) p.memory_bytes = mem;
    p.fp32_flops = c.matmul_fp32_flops;
    p.bf16_flops = c.matmul_bf16_flops;
    p.fp16_flops = c.matmul_bf16_flops;
    p.memory_bw = c.copy_bw;
    p.note =
        "matmul rates and device copy bandwidth measured; NVLink and network bandwidths from the table "
        "(allreduce is measured once the NCCL communicator exists)";
    c.profile = p;
    c.device = name;
#endif
  } else {
    const int threads = set_torch_threads(0, 1);
    const torch::Device dev(torch::kCPU);
    c.matmul_fp32_flops = matmul_rate(1024, torch::kFloat, dev, 0.45 * budget_s);
    c.matmul_bf16_flops = matmul_rate(512, torch::kBFloat16, dev, 0.25 * budget_s);
    c.copy_bw = host_copy_bw(0.2 * budget_s);
    HardwareProfile p = default_cpu_profile(hw.cores);
    p.fp32_flops = c.matmul_fp32_flops;
    p.bf16_flops = c.matmul_bf16_flops;
    p.fp16_flops = c.matmul_bf16_flops;
    p.efficiency = 0.6;  // a training step reaches about 60% of a large matmul
    p.memory_bw = c.copy_bw;
    p.intra_node_bw = c.copy_bw / 2.0;
    p.note =
        "allreduce bandwidth is a memcpy proxy (half the copy bandwidth) until the MPI communicator can "
        "measure it; network bandwidth not measured (10 GbE assumed)";
    c.profile = p;
    c.device = "cpu (" + std::to_string(threads) + " threads)";
  }
  c.profile.source =
      "calibrated on " + (hw.hostname.empty() ? std::string("this host") : hw.hostname) + " at " + now_iso();
  c.seconds = since(t0);
  return c;
}

}  // namespace gtrain
