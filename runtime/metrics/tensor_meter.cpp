// tensor_meter.cpp: TensorMeter over c10::MemoryReportingInfoBase (thread-local debug info).
#include "runtime/metrics/tensor_meter.h"

#include <c10/core/Allocator.h>
#include <c10/util/Logging.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include <algorithm>

namespace gtrain {
namespace {

// The integer type reportMemoryUsage takes for its totals (int64_t in LibTorch 1.13, size_t in
// 2.x), read off the declaration itself rather than from a version number.
template <typename F>
struct third_argument;
template <typename C, typename R, typename A1, typename A2, typename A3, typename A4, typename A5>
struct third_argument<R (C::*)(A1, A2, A3, A4, A5)> {
  using type = A3;
};
using ReportedBytes = third_argument<decltype(&c10::MemoryReportingInfoBase::reportMemoryUsage)>::type;

// The least severity c10's LOG() prints (2 = errors only): glog's flag where LibTorch logs through
// glog (Debian's), else c10's own.
int& log_level() {
#ifdef C10_USE_GLOG
  return FLAGS_minloglevel;
#else
  return FLAGS_caffe2_log_level;
#endif
}

}  // namespace

// Sees every CPU allocation made on the thread while it is installed, and the frees of those
// allocations (c10's CPU allocator reports a free only for a pointer it recorded).
struct TensorMeter::Reporter : public c10::MemoryReportingInfoBase {
  int64_t net = 0, peak = 0;
  void reportMemoryUsage(void* /*ptr*/, int64_t alloc_size, ReportedBytes /*total_allocated*/,
                         ReportedBytes /*total_reserved*/, c10::Device device) override {
    if (device.type() != c10::DeviceType::CPU) return;
    net += alloc_size;
    peak = std::max(peak, net);
  }
  bool memoryProfilingEnabled() const override { return true; }
};

TensorMeter::TensorMeter() : reporter_(std::make_shared<Reporter>()) {}

TensorMeter::~TensorMeter() {
  if (active_) stop();
}

bool TensorMeter::start() {
  if (active_) stop();
  if (c10::ThreadLocalDebugInfo::get(c10::DebugInfoKind::PROFILER_STATE) != nullptr) return false;
  reporter_->net = reporter_->peak = 0;
  c10::ThreadLocalDebugInfo::_push(c10::DebugInfoKind::PROFILER_STATE, reporter_);
  // c10 warns (every 1000th time) when a tensor allocated before counting began is freed: every
  // step frees the last one's, which is expected here. Errors only while counting.
  saved_log_level_ = log_level();
  log_level() = std::max(saved_log_level_, 2);
  active_ = true;
  return true;
}

double TensorMeter::stop() {
  if (!active_) return 0.0;
  c10::ThreadLocalDebugInfo::_pop(c10::DebugInfoKind::PROFILER_STATE);
  log_level() = saved_log_level_;
  active_ = false;
  return static_cast<double>(reporter_->peak);
}

}  // namespace gtrain
