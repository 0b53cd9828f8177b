// calibrate.cpp: matmul and copy timings with torch, on the GPU in CUDA builds that see one, else
// on the CPU with every core.
#include "launcher/commands/calibrate.h"

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <ctime>
#include <functional>
#include <ostream>
#include <vector>

#include "runtime/common/torch_threads.h"
#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/core/startup.h"
#include "runtime/models/activations.h"
#include "runtime/models/gpt.h"
#include "strategies/planner/cost_model.h"

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

// Seconds per call of `f`: one untimed call, then calls for about `budget_s` (at least two).
template <typename F>
double seconds_per_call(double budget_s, F&& f) {
  f();
  int64_t calls = 0;
  const auto t0 = Clock::now();
  do {
    f();
    ++calls;
  } while (since(t0) < budget_s || calls < 2);
  return since(t0) / static_cast<double>(calls);
}

// Bytes/s (read + written) of the elementwise ops a training step is made of besides its matmuls
// (add, GELU, softmax, each writing a new tensor), on activation-sized tensors of 512K floats.
double elementwise_rate(double budget_s) {
  torch::NoGradGuard ng;
  const int64_t n = 512 * 1024;
  auto a = torch::randn({n}), b = torch::randn({n});
  const double s = seconds_per_call(budget_s, [&]() {
    auto c = a + b;                                    // 3n floats
    auto d = torch::gelu(a);                           // 2n
    auto e = torch::softmax(b.view({512, 1024}), -1);  // 2n
    return c.sum().item<float>() + d[0].item<float>() + e[0][0].item<float>();
  });
  return 7.0 * 4.0 * static_cast<double>(n) / s;
}

// Seconds per element of `f` forward and backward on `x` (autograd), for about `budget_s`.
double per_element_seconds(const torch::Tensor& x0, const std::function<torch::Tensor(const torch::Tensor&)>& f,
                           double budget_s) {
  auto x = x0.clone().requires_grad_(true);
  auto g = torch::randn_like(x0);
  return seconds_per_call(budget_s,
                          [&]() {
                            auto y = f(x);
                            y.backward(g.view_as(y));
                            x.mutable_grad() = torch::Tensor();
                          }) /
         static_cast<double>(x0.numel());
}

// FLOP/s of attention-shaped batched matmuls: 64 heads x [128 x 64] . [64 x 128].
double attention_rate(double budget_s) {
  torch::NoGradGuard ng;
  auto q = torch::randn({64, 128, 64}), k = torch::randn({64, 64, 128});
  return 2.0 * 64.0 * 128.0 * 64.0 * 128.0 / seconds_per_call(budget_s, [&]() { return torch::bmm(q, k); });
}

// Seconds per element of a GELU forward and backward over 2048 x 1024, at the threads set now:
// the model's activation, and the memory-bound layer that scales least well with threads here.
double gelu_seconds(double budget_s) {
  return per_element_seconds(
      torch::randn({2048, 1024}), [](const torch::Tensor& x) { return gelu_tanh(x); }, budget_s);
}

// Seconds of one gpt block's forward and backward over 12 x 128 tokens, 192 wide, 4 heads, at the
// threads set now: timed through a stack of 4, so activations leave the caches as a model's do.
double gpt_block_seconds(double budget_s) {
  std::vector<GptBlock> blocks;
  for (int64_t i = 0; i < 4; ++i) blocks.emplace_back(192, 4, 0.0, i);
  const auto x = torch::randn({12, 128, 192});
  auto stack = [&](const torch::Tensor& t) {
    torch::Tensor h = t;
    for (auto& b : blocks) h = b->forward(h);
    return h;
  };
  return static_cast<double>(x.numel()) * per_element_seconds(x, stack, budget_s) / 4.0;
}

// Seconds per parameter of an AdamW step over 1M parameters (torch::optim::AdamW, as the
// data-parallel engine runs it on LibTorch without a fused CPU kernel).
double adamw_seconds_per_parameter(double budget_s) {
  const int64_t n = 1 << 20;
  auto w = torch::randn({n}).requires_grad_(true);
  w.mutable_grad() = torch::randn({n});
  torch::optim::AdamW opt({w}, torch::optim::AdamWOptions(1e-3));
  return seconds_per_call(budget_s, [&]() { opt.step(); }) / static_cast<double>(n);
}

// Seconds of one small op (dispatch and allocation, no arithmetic to speak of).
double op_overhead(double budget_s) {
  torch::NoGradGuard ng;
  auto a = torch::randn({8}), c = torch::randn({8});
  return seconds_per_call(budget_s,
                          [&]() {
                            for (int i = 0; i < 100; ++i) c = a + c;
                          }) /
         100.0;
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
    if (p.kind != DeviceKind::gpu) {  // not in the table: GPU defaults for what was not measured
      p = gpu_profile_table().front();
      p.intra_node_bw = 20e9;
      p.inter_node_bw = 12.5e9;
    }
    p.name = name;
    p.kind = DeviceKind::gpu;
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
    c.matmul_fp32_flops = matmul_rate(1024, torch::kFloat, dev, 0.35 * budget_s);
    c.matmul_bf16_flops = matmul_rate(512, torch::kBFloat16, dev, 0.25 * budget_s);
    c.copy_bw = host_copy_bw(0.1 * budget_s);
    HardwareProfile p = default_cpu_profile(hw.cores);
    // A large and a small matmul give the size at which a matmul reaches half its peak
    // (r(n) = r_max n / (n + h)), on every core and on one; on one thread also attention's batched
    // matmuls, the memory-bound layers, the optimizer and one op's fixed cost, and how much faster
    // those layers run on every core. The cost model prices a rank's step by its threads.
    constexpr double kLarge = 1024, kSmall = 128;
    auto half_size = [&](double r_large, double r_small) {
      const double q = std::min(r_small / r_large, 0.99);
      return std::max(0.0, q * kLarge > kSmall ? kSmall * kLarge * (1.0 - q) / (q * kLarge - kSmall) : 4.0 * kLarge);
    };
    const double b = budget_s;
    p.matmul_half_size_all = half_size(c.matmul_fp32_flops, matmul_rate(128, torch::kFloat, dev, 0.04 * b));
    const double gelu_all = gelu_seconds(0.06 * b);
    const double block_all = gpt_block_seconds(0.08 * b);
    set_torch_threads(1, 1);
    const double r_large = matmul_rate(static_cast<int64_t>(kLarge), torch::kFloat, dev, 0.06 * b);
    p.matmul_half_size = half_size(r_large, matmul_rate(static_cast<int64_t>(kSmall), torch::kFloat, dev, 0.04 * b));
    p.fp32_flops_1thread = r_large * (kLarge + p.matmul_half_size) / kLarge;
    p.elementwise_bw = elementwise_rate(0.03 * b);
    p.attention_flops_1thread = attention_rate(0.03 * b);
    p.norm_s = per_element_seconds(
        torch::randn({2048, 256}), [](const torch::Tensor& x) { return torch::layer_norm(x, {256}); }, 0.03 * b);
    p.activation_s = gelu_seconds(0.06 * b);
    p.softmax_s = per_element_seconds(
        torch::randn({64, 128, 128}), [](const torch::Tensor& x) { return torch::softmax(x, -1); }, 0.03 * b);
    p.memory_bound_speedup = p.activation_s / gelu_all;
    p.optimizer_s = adamw_seconds_per_parameter(0.04 * b);
    {
      // A real gpt block (192 wide, 4 heads, 12 x 128 tokens; not a shape the benches use) against
      // what cpu_block_seconds prices without a remainder: the rest, per token and width.
      const double measured = gpt_block_seconds(0.1 * b);
      const double priced = cpu_block_seconds(p, BlockShape::gpt(128, 192, 4), 12, 1, /*with_remainder=*/false);
      p.block_remainder_s = std::max(0.0, (measured - priced) / (12.0 * 128.0 * 192.0));
      p.block_speedup = measured / block_all;
    }
    p.launch_overhead_s = op_overhead(0.02 * b);
    set_torch_threads(0, 1);
    p.cores = threads;
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
