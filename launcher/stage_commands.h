// stage_commands.h: `gtrain status RUN_DIR` (progress, stages, goodput, ETA) and
// `gtrain ckpt inspect|verify PATH`.
#pragma once

#include <string>

namespace gtrain {

int status_command(const std::string& run_dir, bool json);
int ckpt_inspect_command(const std::string& path);
int ckpt_verify_command(const std::string& path);

}  // namespace gtrain
