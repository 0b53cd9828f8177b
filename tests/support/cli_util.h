// cli_util.h: the small job the command-line suites run, and running `gtrain run` on it.
#pragma once

#include <string>

#include "tests/support/test_util.h"

namespace gtrain {

inline const std::string kTiny = R"(
[model]
name = "mlp"
hidden = [16]
[data]
kind = "synthetic"
synthetic_samples = 512
synthetic_features = 8
synthetic_classes = 3
[train]
global_batch = 32
steps = 20
eval_interval = 10
[log]
progress = "plain"
interval = 5
)";

// `gtrain run CONFIG --run-dir RUN_DIR EXTRA`, its exit code and merged output.
inline test::CommandResult gtrain_run(const std::string& config, const std::string& run_dir,
                                      const std::string& extra = "") {
  return test::run_command(std::string(GTRAIN_BINARY) + " run " + config + " --run-dir " + run_dir + extra);
}

}  // namespace gtrain
