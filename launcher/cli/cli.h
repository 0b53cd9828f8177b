// cli.h: the gtrain command line (CLI11): every subcommand, parsed once, run once.
#pragma once

namespace gtrain {

// Parses argv and runs the command. Returns the process exit code; throws gtrain::Error.
int cli_main(int argc, char** argv);

}  // namespace gtrain
