// program_runner.h: runs a scheduler command (squeue, scontrol, sacctmgr, qstat) and returns its
// standard output, never hanging; discovery takes it as an injectable function so tests replay
// recorded outputs.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace gtrain {

// argv -> stdout, or nullopt when the program is missing, fails, or times out.
using CommandRunner = std::function<std::optional<std::string>(const std::vector<std::string>& argv)>;

// Runs argv[0] (looked up in PATH) with stdin and stderr on /dev/null. Returns stdout when it
// exits 0 within `timeout_s`; otherwise kills it and returns nullopt. Output is capped at 4 MiB.
std::optional<std::string> run_program(const std::vector<std::string>& argv, double timeout_s = 5.0);

// A CommandRunner over run_program with the given timeout.
CommandRunner system_command_runner(double timeout_s = 5.0);

// A runner that finds no programs (for machines without a scheduler, and for tests).
CommandRunner no_command_runner();

}  // namespace gtrain
