// cluster_command.h: `gtrain cluster`, what the cluster allows and how busy it is when: the limits
// that bind (each with the command it came from), the hour-of-week profile of free GPUs and queue
// waits from the accounting's history, the quiet windows in words, the quotas the user may charge
// and their burn-down, and with --predict the expected start of a job of a given shape.
#pragma once

#include <cstdint>
#include <map>
#include <ostream>
#include <string>

#include "launcher/base/program_runner.h"

namespace gtrain {

struct ClusterOptions {
  std::string scheduler = "slurm";  // --scheduler slurm | pbs
  std::string partition;            // --partition ("" = every partition, the default one first)
  int weeks = 4;                    // --weeks: history to learn from
  bool json = false;                // --json: everything as one JSON object
  bool predict = false;             // --predict: the expected start of a --gpus x --time job now
  int64_t gpus = 0;                 // --gpus: the job size windows and predictions are for (0 = 3/4 of a partition)
  std::string time;                 // --time: the job's time limit (for --predict)
  double quota_hours = 0;           // --quota-hours: a GPU-hour quota kept outside the scheduler (0 = none)
  std::string quota_since;          // --quota-since YYYY-MM-DD: when that quota's period began ("" = the 1st)
  std::string user;                 // --user ("" = $USER)
  int64_t now = 0;                  // tests: the present (0 = the clock)
};

// Runs `gtrain cluster`; returns the exit code. ConfigError (exit 2) for bad flags or a partition
// the scheduler does not have; what the scheduler cannot tell is said and the rest goes on.
int cluster_command(const ClusterOptions& o, const std::map<std::string, std::string>& env, const CommandRunner& run,
                    std::ostream& out);

}  // namespace gtrain
