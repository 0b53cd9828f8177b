// commands.h: Command, one gtrain subcommand as the CLI declares it (its flags and help, on the
// parser) and runs it, and the add_<command>() that declares each, in the order `gtrain --help`
// lists them. What a command does with LibTorch it asks of the LibTorchWork it is given.
#pragma once

#include <functional>

#include "launcher/commands/libtorch_work.h"

namespace CLI {
class App;
}

namespace gtrain {

struct Command {
  CLI::App* app = nullptr;   // the subcommand's parser (its options hold the command's own state)
  std::function<int()> run;  // runs the command once argv is parsed; returns the exit code
};

// Training: train_commands.cpp.
Command add_run(CLI::App& app, int argc, char** argv, const LibTorchWork& work);
Command add_config(CLI::App& app);
Command add_probe(CLI::App& app);
Command add_plan(CLI::App& app, const LibTorchWork& work);
Command add_models(CLI::App& app, const LibTorchWork& work);
Command add_sample(CLI::App& app, const LibTorchWork& work);
Command add_distill(CLI::App& app, int argc, char** argv, const LibTorchWork& work);
Command add_sweep(CLI::App& app);
// Jobs and checkpoints: job_commands.cpp.
Command add_status(CLI::App& app);
Command add_report(CLI::App& app);
Command add_runs(CLI::App& app);
Command add_submit(CLI::App& app);
Command add_cluster(CLI::App& app);
Command add_cancel(CLI::App& app);
Command add_chain_step(CLI::App& app);
Command add_ckpt(CLI::App& app, const LibTorchWork& work);
// Data: data_commands.cpp.
Command add_tokenize(CLI::App& app);
Command add_prepare(CLI::App& app);

}  // namespace gtrain
