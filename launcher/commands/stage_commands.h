// stage_commands.h: `gtrain status RUN_DIR` (progress, stages, goodput, ETA) and `gtrain ckpt
// inspect PATH`, which read no tensor (the other checkpoint commands: ckpt_commands.h).
#pragma once

#include <string>

namespace gtrain {

int status_command(const std::string& run_dir, bool json);
int ckpt_inspect_command(const std::string& path);

}  // namespace gtrain
