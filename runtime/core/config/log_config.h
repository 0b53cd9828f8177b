// log_config.h: the [log] section: run directory, console output, metrics cadence and the report's price.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/core/config/schema.h"

namespace gtrain {

struct LogConfig {
  std::string name;               // run name ("" = the config file's name without .toml)
  std::string root = "runs";      // the run directory is <root>/<name>
  int64_t interval = 10;          // steps between console lines when not on a TTY
  int64_t metrics_interval = 1;   // steps between records in metrics.jsonl
  std::string progress = "auto";  // auto | bar | plain | none
  int64_t profile_start = 0;      // first step (1-based) recorded by the profiler (0 = off)
  int64_t profile_steps = 3;      // steps recorded from profile_start
  bool tensorboard = true;        // TensorBoard event files in <run dir>/tb
  double price_per_gpu_hour = 0;  // the cost `gtrain report` shows per GPU-hour (0 = no cost shown)

  template <class V>
  void visit(V& v) {
    v("name", name, "Run name, a plain name without '/' (\"\" = the config file name without .toml).");
    v("root", root, "Parent of run directories: the run directory is <root>/<name>.");
    v("interval", interval, "Steps between plain console lines (used when stdout is not a TTY).", cfg::at_least(1));
    v("metrics_interval", metrics_interval,
      "Steps between training records in metrics.jsonl (the first and last step "
      "are always recorded; on CUDA only recorded or printed steps read the loss from the GPU).",
      cfg::at_least(1));
    v("progress", progress,
      "Console output: \"auto\" (bar on a TTY, plain lines otherwise), \"bar\", \"plain\", \"none\".",
      cfg::one_of({"auto", "bar", "plain", "none"}));
    v("profile_start", profile_start,
      "First step (1-based) to record with LibTorch's profiler; each rank writes "
      "<run dir>/profile/profile-rank<r>.txt (time per GPU kernel and per operator) and .json, and a Kineto trace "
      "where LibTorch has Kineto. 0 = off. Pick a step after warm-up.",
      cfg::at_least(0));
    v("profile_steps", profile_steps, "Steps recorded from profile_start.", cfg::at_least(1));
    v("tensorboard", tensorboard,
      "Write TensorBoard event files into <run dir>/tb (tensorboard --logdir <run dir>/tb): every number "
      "of metrics.jsonl's train and eval records, one file per stage; a resumed stage's steps replace "
      "those an earlier stage trained past its checkpoint.");
    v("price_per_gpu_hour", price_per_gpu_hour,
      "Price of one GPU-hour (CPU runs: one rank-hour) in your currency: gtrain report shows each stage's "
      "and the run's cost (report's --price-per-gpu-hour overrides it). 0 = no cost shown.",
      cfg::at_least(0));
  }
};

}  // namespace gtrain
