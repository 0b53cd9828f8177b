// capabilities.h: Capabilities, which parallel executors exist, so the planner only proposes
// layouts that can run; kRunCapabilities is what `gtrain run` executes (today all of them).
#pragma once

#include <cstdint>

namespace gtrain {

struct Capabilities {
  int64_t max_zero = 3;           // highest ZeRO stage an executor implements (0 to 3)
  bool tensor_parallel = true;    // tp > 1
  bool pipeline_parallel = true;  // pp > 1
  bool recompute = true;          // per-block activation recompute
  bool offload = true;            // optimizer offload to host memory
};

// Everything the planner knows how to cost: what `gtrain plan` shows by default.
inline constexpr Capabilities kAllCapabilities{3, true, true, true, true};

// What `gtrain run` executes: data parallel with ZeRO-1/2/3 and optimizer offload
// (strategies/data_parallel.h), tensor parallel (runtime/models/parallel_layers.h), pipeline
// parallel (strategies/pipeline_parallel.h) and per-block recompute (runtime/models/recompute.h).
inline constexpr Capabilities kRunCapabilities{3, true, true, true, true};

}  // namespace gtrain
