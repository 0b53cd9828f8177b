// step_profiler.cpp: a few training steps under LibTorch's Kineto profiler, summarised per operator
// and per GPU kernel (the question "where does the step's time go" without Nsight).
#include "runtime/metrics/step_profiler.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include <torch/csrc/autograd/profiler_kineto.h>

#include "runtime/common/cuda_device.h"
#include "runtime/common/torch_compat.h"
#include "runtime/core/errors.h"

namespace gtrain {
namespace {

namespace prof = torch::autograd::profiler;
namespace impl = torch::profiler::impl;

double now_us() {
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::set<impl::ActivityType> activities(bool cuda) {
  std::set<impl::ActivityType> a{impl::ActivityType::CPU};
  if (cuda) a.insert(impl::ActivityType::CUDA);
  return a;
}

std::vector<ProfileRow> sorted_rows(const std::map<std::string, ProfileRow>& by_name) {
  std::vector<ProfileRow> rows;
  for (const auto& [name, row] : by_name) rows.push_back(row);
  std::sort(rows.begin(), rows.end(), [](const ProfileRow& a, const ProfileRow& b) {
    return a.total_us != b.total_us ? a.total_us > b.total_us : a.name < b.name;
  });
  return rows;
}

nlohmann::json rows_json(const std::vector<ProfileRow>& rows) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows) out.push_back({{"name", r.name}, {"calls", r.calls}, {"total_us", r.total_us}});
  return out;
}

}  // namespace

nlohmann::json ProfileSummary::to_json() const {
  nlohmann::json peak = nlohmann::json::object();
  for (const auto& [device, bytes] : peak_tensor_bytes) peak[device] = bytes / (1024.0 * 1024.0);
  return {{"first_step", first_step}, {"last_step", last_step},  {"wall_us", wall_us},    {"gpu_us", gpu_us},
          {"peak_tensor_mb", peak},   {"host", rows_json(host)}, {"gpu", rows_json(gpu)}, {"trace", trace}};
}

std::string ProfileSummary::to_text(size_t rows) const {
  std::string out;
  char line[512];
  const double steps = static_cast<double>(std::max<int64_t>(1, last_step - first_step + 1));
  std::snprintf(line, sizeof(line), "profile of steps %lld-%lld: %.3f ms a step", (long long)first_step,
                (long long)last_step, wall_us / steps / 1000.0);
  out += line;
  if (gpu_us > 0) {
    std::snprintf(line, sizeof(line), ", GPU kernels busy %.3f ms a step (%.1f%%)", gpu_us / steps / 1000.0,
                  100.0 * gpu_us / std::max(wall_us, 1e-9));
    out += line;
  }
  out += "\n";
  for (const auto& [device, bytes] : peak_tensor_bytes) {
    std::snprintf(line, sizeof(line), "tensor memory on %s: at most %.1f MiB live beyond what was live at the start\n",
                  device.c_str(), bytes / (1024.0 * 1024.0));
    out += line;
  }
  auto table = [&](const char* title, const std::vector<ProfileRow>& rs, double whole, const char* whole_name) {
    if (rs.empty()) return;
    std::snprintf(line, sizeof(line), "\n%s (ms a step; %% of %s)\n", title, whole_name);
    out += line;
    for (size_t i = 0; i < std::min(rows, rs.size()); ++i) {
      std::snprintf(line, sizeof(line), "  %9.3f  %5.1f%%  %6lld calls  %s\n", rs[i].total_us / steps / 1000.0,
                    100.0 * rs[i].total_us / std::max(whole, 1e-9), (long long)(rs[i].calls / steps + 0.5),
                    rs[i].name.substr(0, 120).c_str());
      out += line;
    }
  };
  table("GPU kernels and copies", gpu, gpu_us, "kernel time");
  table("host operators, inclusive (nested ones overlap)", host, wall_us, "wall time");
  if (!trace.empty()) out += "\ntrace: " + trace + " (chrome://tracing, Perfetto)\n";
  return out;
}

StepProfiler::StepProfiler(int64_t start, int64_t count, std::string dir, int rank, bool cuda)
    : start_(dir.empty() ? 0 : start),
      count_(std::max<int64_t>(1, count)),
      dir_(std::move(dir)),
      rank_(rank),
      cuda_(cuda) {}

StepProfiler::~StepProfiler() {
  if (active_) {
    try {
      prof::disableProfiler();
    } catch (...) {  // a destructor must not throw; the run is ending anyway
    }
  }
}

void StepProfiler::before_step(int64_t step) {
  if (start_ <= 0 || step != start_ || active_) return;
  // A profiler that cannot start (no CUPTI in a sandbox, another one already recording) costs the
  // profile, never the run. LibTorch 2.x would let a second one take over the first's recording.
  if (impl::profilerEnabled()) {
    failure_ =
        "profile: the profiler did not start (another profiler is already recording in this thread); "
        "training goes on";
    return;
  }
  try {
    const impl::ProfilerConfig config(impl::ProfilerState::KINETO, /*report_input_shapes=*/false,
                                      /*profile_memory=*/true);
    prof::prepareProfiler(config, activities(cuda_));
    if (cuda_) cuda::synchronize(-1);  // earlier steps' kernels are not this profile's
    prof::enableProfiler(config, activities(cuda_));
    active_ = true;
    t0_us_ = now_us();
  } catch (const std::exception& e) {
    failure_ = std::string("profile: the profiler did not start (") + first_line(e.what()) + "); training goes on";
  }
}

std::string StepProfiler::after_step(int64_t step, bool stage_ends) {
  if (!failure_.empty()) {
    std::string out;
    std::swap(out, failure_);
    return out;
  }
  if (!active_ || (step < start_ + count_ - 1 && !stage_ends)) return "";
  const bool cut = step < start_ + count_ - 1;
  try {
    const ProfileSummary s = stop(step);  // creates dir_
    const std::string base = dir_ + "/profile-rank" + std::to_string(rank_);
    std::ofstream(base + ".json") << s.to_json().dump(1) << "\n";
    std::ofstream text(base + ".txt");
    text << s.to_text();
    if (!text) return "profile: cannot write " + base + ".txt; training goes on";
    if (cut) {
      return "profile of steps " + std::to_string(start_) + "-" + std::to_string(step) + " (cut short: the stage " +
             "ended before step " + std::to_string(start_ + count_ - 1) + ") written: " + base + ".txt";
    }
    return "profile of the steps written: " + base + ".txt";
  } catch (const std::exception& e) {
    return std::string("profile: could not be summarised (") + first_line(e.what()) + "); training goes on";
  }
}

ProfileSummary StepProfiler::stop(int64_t last_step) {
  if (cuda_) cuda::synchronize(-1);  // every kernel of the profiled steps has run
  ProfileSummary s;
  s.first_step = start_;
  s.last_step = last_step;
  s.wall_us = now_us() - t0_us_;
  active_ = false;  // disabled below, even when summarising fails
  std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
  std::map<std::string, ProfileRow> host, gpu;
  // Allocations and frees ("[memory]" events, bytes signed) in time order give each device's live
  // tensor bytes relative to the profile's start; the highest point is the step's working set.
  std::vector<std::tuple<double, std::string, double>> memory;
  for (const auto& e : result->events()) {
    if (e.name() == "[memory]") {
      const std::string device = c10::Device(e.deviceType(), e.deviceType() == c10::DeviceType::CPU
                                                                 ? c10::DeviceIndex(-1)
                                                                 : static_cast<c10::DeviceIndex>(e.deviceIndex()))
                                     .str();
      memory.emplace_back(compat::event_start_us(e), device, static_cast<double>(e.nBytes()));
      continue;
    }
    // Kineto also reports gtrain's RECORD_USER_SCOPE ranges (gtrain::forward, ...) as GPU-side
    // annotations spanning the kernels they launched (pytorch#130730): counted as kernels they would
    // double the GPU time. They stay in the host table.
    if (e.deviceType() != c10::DeviceType::CPU && e.name().rfind("gtrain::", 0) == 0) continue;
    const double us = compat::event_duration_us(e);
    auto& side = e.deviceType() == c10::DeviceType::CPU ? host : gpu;
    ProfileRow& row = side[e.name()];
    row.name = e.name();
    row.calls += 1;
    row.total_us += us;
    if (&side == &gpu) s.gpu_us += us;
  }
  s.host = sorted_rows(host);
  s.gpu = sorted_rows(gpu);
  std::stable_sort(memory.begin(), memory.end(),
                   [](const auto& a, const auto& b) { return std::get<0>(a) < std::get<0>(b); });
  std::map<std::string, double> live;
  for (const auto& [t, device, bytes] : memory) {
    (void)t;
    double& now = live[device];
    now += bytes;
    s.peak_tensor_bytes[device] = std::max(s.peak_tensor_bytes[device], now);
  }
  // Kineto builds can write a trace; LibTorch builds without Kineto (Debian's 1.13) cannot.
  std::filesystem::create_directories(dir_);
  const std::string trace = dir_ + "/trace-rank" + std::to_string(rank_) + ".json";
  try {
    result->save(trace);
    s.trace = trace;
  } catch (const c10::Error&) {
  }
  return s;
}

}  // namespace gtrain
