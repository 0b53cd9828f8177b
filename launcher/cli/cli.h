// cli.h: the gtrain command line (CLI11): every subcommand, parsed once, run once; the same in gtrain
// (torch-free) and gtrain-worker, which differ only in the LibTorchWork they give it.
#pragma once

#include "launcher/commands/libtorch_work.h"

namespace gtrain {

// Parses argv and runs the command, with `work` for what needs LibTorch (its size_job becomes the
// process's JobSizer). Returns the process exit code; throws gtrain::Error.
int cli_main(int argc, char** argv, const LibTorchWork& work);

}  // namespace gtrain
