// bench_grad_path.cpp: the data-parallel engine's gradient path (zero_grad, backward with its
// hooks, end_backward into the flat buckets) against plain autograd (.grad emptied, backward) on
// one rank, side by side in one run, with 1 and 2 micro-batches. Run: build/bench_grad_path
#include <chrono>
#include <cstdio>

#include "runtime/core/startup.h"
#include "strategies/data_parallel.h"

using Clock = std::chrono::steady_clock;

int main() {
  gtrain::tune_malloc();
  torch::manual_seed(0);
  // 48 parameters of 1 Mi floats (192 MiB), gradients of a product with a fixed tensor each.
  constexpr int kParams = 48;
  constexpr int64_t kElems = 1 << 20;
  std::vector<std::pair<std::string, torch::Tensor>> named;
  std::vector<torch::Tensor> params, xs;
  for (int i = 0; i < kParams; ++i) {
    params.push_back(torch::randn({kElems}).requires_grad_(true));
    xs.push_back(torch::randn({kElems}));
    named.emplace_back("p" + std::to_string(i), params.back());
  }
  auto loss = [&] {
    auto l = torch::zeros({});
    for (int i = 0; i < kParams; ++i) l = l + (params[i] * xs[i]).sum();
    return l;
  };
  gtrain::DataParallelOptions o;
  o.optimizer.name = "sgd";
  gtrain::DataParallelEngine engine(std::make_shared<gtrain::LocalCommunicator>(), named, o);

  auto plain = [&](int micro) {
    for (auto& p : params) p.mutable_grad() = torch::Tensor();
    for (int k = 0; k < micro; ++k) loss().backward();
  };
  auto ours = [&](int micro) {
    engine.zero_grad();
    for (int k = 0; k < micro; ++k) {
      engine.begin_micro_batch(k + 1 == micro);
      loss().backward();
    }
    engine.end_backward();
  };
  auto time = [](auto&& f, int iters) {
    f();  // warm-up
    auto t0 = Clock::now();
    for (int i = 0; i < iters; ++i) f();
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / iters;
  };
  std::printf("%-14s %12s %12s %8s\n", "micro-batches", "autograd ms", "gtrain ms", "ratio");
  for (int micro : {1, 2}) {
    double a = 1e30, b = 1e30;
    for (int rep = 0; rep < 3; ++rep) {  // interleaved, best of three: shares the machine's noise
      a = std::min(a, time([&] { plain(micro); }, 5));
      b = std::min(b, time([&] { ours(micro); }, 5));
    }
    std::printf("%-14d %12.1f %12.1f %7.2fx\n", micro, a, b, b / a);
  }
  return 0;
}
