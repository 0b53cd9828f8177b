// tensor_meter.h: TensorMeter, the bytes of CPU tensors a stretch of training allocates on this
// thread, net of what it frees, at their highest (c10's memory-reporting hook, the one torch's
// profiler uses): a step's activations and transient gradients, counted tensor by tensor.
#pragma once

#include <cstdint>
#include <memory>

namespace gtrain {

class TensorMeter {
 public:
  TensorMeter();
  ~TensorMeter();
  TensorMeter(const TensorMeter&) = delete;
  TensorMeter& operator=(const TensorMeter&) = delete;

  // Counts from now on this thread (net bytes restart at 0). False, counting nothing, while torch's
  // profiler holds the hook (a profiled step).
  bool start();
  // Stops counting; the highest net bytes since start().
  double stop();
  bool active() const { return active_; }

 private:
  struct Reporter;
  std::shared_ptr<Reporter> reporter_;
  bool active_ = false;
  int saved_log_level_ = 0;  // c10's log level, raised while counting
};

}  // namespace gtrain
