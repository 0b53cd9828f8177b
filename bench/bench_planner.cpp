// bench_planner.cpp: time to plan a 4096-GPU job (every candidate, ranked) for GPT-2 124M and a
// 13B GPT on H100 nodes of 8; the planner must stay well under a second. Exits 1 when it does not.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "strategies/planner/planner.h"

using namespace gtrain;

namespace {

PlannerInput gpt(int64_t layers, int64_t heads, int64_t hidden, int64_t seq, int64_t batch, int64_t world) {
  PlannerInput in;
  in.model = gpt_stats(layers, heads, hidden, seq, 50257, true);
  in.model_name = "gpt";
  in.train.global_batch = batch;
  in.train.steps = 1000;
  in.precision.dtype = "bf16";
  in.world = world;
  in.gpus_per_node = 8;
  in.profile = *find_gpu_profile("H100-80GB");
  return in;
}

double bench(const char* name, const PlannerInput& in) {
  std::vector<double> times;
  size_t candidates = 0;
  Plan best;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto all = plan_candidates(in);
    best = plan_job(in);
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    candidates = all.size();
  }
  std::sort(times.begin(), times.end());
  std::printf("%-10s %5lld GPUs: %.2f ms (median of 5, plan_candidates + plan_job), %zu candidates\n", name,
              static_cast<long long>(in.world), 1e3 * times[2], candidates);
  std::printf("           chosen %s  %s\n", best.summary().c_str(), best.estimate_summary().c_str());
  return times.back();
}

}  // namespace

int main() {
  double worst = 0;
  worst = std::max(worst, bench("gpt2-124m", gpt(12, 12, 768, 1024, 4096, 4096)));
  worst = std::max(worst, bench("gpt-13b", gpt(40, 40, 5120, 2048, 4096, 4096)));
  std::printf("slowest run %.2f ms: %s\n", 1e3 * worst, worst < 1.0 ? "under 1 s" : "OVER 1 s");
  return worst < 1.0 ? 0 : 1;
}
