// cli_util.h: the small job the command-line suites run, and running `gtrain run` on it.
#pragma once

#include <string>

#include "tests/support/test_util.h"
#include "tests/support/tiny_configs.h"

namespace gtrain {

inline const std::string kTiny = test::tiny_job("mlp");

// `gtrain run CONFIG --run-dir RUN_DIR EXTRA`, its exit code and merged output.
inline test::CommandResult gtrain_run(const std::string& config, const std::string& run_dir,
                                      const std::string& extra = "") {
  return test::run_command(std::string(GTRAIN_BINARY) + " run " + config + " --run-dir " + run_dir + extra);
}

}  // namespace gtrain
