// libtorch_work.h: LibTorchWork, the part of gtrain's commands that needs LibTorch, as one table the
// CLI calls. gtrain-worker fills it with the LibTorch implementations (worker_main.cpp); gtrain, which
// never loads LibTorch, fills each entry with a hand-off: gtrain-worker replaces the process, same
// arguments (main.cpp), and runs the command as if started itself. Commands call an entry before
// they write or print anything, so a handed-off command is done once.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "launcher/commands/calibration_report.h"
#include "launcher/commands/ckpt_commands.h"
#include "launcher/commands/distill_command.h"
#include "launcher/commands/plan_command.h"
#include "launcher/commands/sample_command.h"
#include "launcher/launch/run_launch.h"

namespace gtrain {

struct LibTorchWork {
  std::function<int(const RunOptions&)> run;        // gtrain run: train in this process (gtrain: launch, else hand off)
  std::function<int(const SampleOptions&)> sample;  // gtrain sample
  std::function<int(const DistillCacheOptions&)> distill_cache;  // gtrain distill cache
  std::function<int(const std::string& path, bool all)> ckpt_verify;
  std::function<int(const CkptExportOptions&)> ckpt_export;
  // gtrain models --plugin: the registry's names once the plugin library is loaded.
  std::function<std::vector<std::string>(const std::string& plugin)> model_names;
  MeasureMachine measure_machine;  // gtrain plan --calibrate
  JobSizer size_job;               // plan, submit, report of a job describe_job_from_config cannot size
};

}  // namespace gtrain
