// test_torch_free_cli.cpp: gtrain answers every command that neither trains nor loads weights
// without loading LibTorch in any process (LD_DEBUG=libs, which an exec'd gtrain-worker inherits,
// lists every library a process loads), and exactly as gtrain-worker answers the same arguments;
// what needs LibTorch (a run, a model built to be sized, a plugin, a checkpoint's tensors) still
// goes to gtrain-worker, so the check can fail.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "tests/support/test_util.h"
#include "tests/support/tiny_configs.h"

namespace gtrain {
namespace {

using test::CommandResult;
using test::run_command;

struct Case {
  std::string args;     // after the program ({gtrain}: where it goes, when not first); {run}, {gpt}, ...: paths
  bool libtorch;        // whether some process of it loads LibTorch (it hands on to gtrain-worker)
  bool same_as_worker;  // its output and exit code equal gtrain-worker's (not for a timestamp or free memory)
};

// The commands, each a line of the table (the run that makes {run} comes first: it needs LibTorch).
const std::vector<Case>& cases() {
  static const std::vector<Case> table = {
      // Help, the version and usage errors.
      {"--help", false, true},
      {"--version", false, true},
      {"run --help", false, true},
      {"plan --help", false, true},
      {"ckpt export --help", false, true},
      {"config show --help", false, true},
      {"tokenize --help", false, true},
      {"", false, true},
      {"bogus", false, true},
      {"status", false, true},
      {"plan {gpt} --gpus abc", false, true},
      {"run {gpt} --bogus", false, true},
      // Commands that read configs, run directories and the scheduler.
      {"config show {gpt}", false, true},
      {"config reference", false, true},
      {"models", false, true},
      {"probe --no-limits", false, false},
      {"plan {gpt} --gpus 4096 --gpu-type H100-80GB", false, true},
      {"plan {gpt} --json --gpus 1,2,4", false, true},
      {"status {run}", false, true},
      {"status {run} --json", false, true},
      {"status {empty}", false, true},
      {"report {run} -o - --format md", false, false},
      {"ckpt inspect {run}", false, true},
      {"runs {run} {empty}", false, true},
      {"runs diff {run} {run}", false, true},
      {"rm -rf {dir}/sub; {gtrain} submit {gpt} --dry-run --scheduler slurm --stages 2 --gpus 2,1 --time 00:30:00 "
       "--run-dir {dir}/sub",
       false, true},
      {"cancel {empty}", false, true},
      {"chain-step {empty} --stage 1 --exit 0", false, true},
      // LibTorch's: a model built to be sized (plan, submit), a plugin, the tensors' checksums.
      {"plan {mlp} --gpus 4", true, true},
      {"rm -rf {dir}/sub; {gtrain} submit {mlp} --dry-run --scheduler slurm --stages 2 --time 00:30:00 --run-dir "
       "{dir}/sub",
       true, true},
      {"models --plugin {plugin}", true, true},
      {"ckpt verify {run}", true, true},
  };
  return table;
}

std::string replace_all(std::string s, const std::string& what, const std::string& with) {
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + with.size()))
    s.replace(at, what.size(), with);
  return s;
}

class TorchFreeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    test::write_file(dir_.file("gpt.toml"), test::tiny_job("gpt"));
    test::write_file(dir_.file("mlp.toml"), test::tiny_job("mlp"));
    std::filesystem::create_directories(dir_.file("empty"));
  }

  // `args` (the table's spelling) as a shell command run by `program`, with `env` before it.
  std::string command(const std::string& program, const std::string& args, const std::string& env = "") const {
    std::string cmd = args.find("{gtrain}") == std::string::npos ? "{gtrain} " + args : args;
    for (const auto& [name, path] : {std::pair<std::string, std::string>{"{run}", dir_.file("run")},
                                     {"{empty}", dir_.file("empty")},
                                     {"{gpt}", dir_.file("gpt.toml")},
                                     {"{mlp}", dir_.file("mlp.toml")},
                                     {"{plugin}", GTRAIN_PLUGIN},
                                     {"{dir}", dir_.path()},
                                     {"{gtrain}", env + program}})
      cmd = replace_all(cmd, name, path);
    return cmd;
  }

  // Runs the command with LD_DEBUG=libs: whether any of its processes loaded LibTorch.
  bool loads_libtorch(const std::string& args, CommandResult* r) const {
    *r = run_command(command(GTRAIN_BINARY, args, "LD_DEBUG=libs "));
    return r->output.find("libtorch") != std::string::npos;
  }

  test::TempDir dir_;
  const std::string worker_ = std::filesystem::path(GTRAIN_BINARY).parent_path().string() + "/gtrain-worker";
};

TEST_F(TorchFreeCli, OnlyWhatNeedsLibTorchLoadsIt) {
  // A one-rank run goes to gtrain-worker (LibTorch trains it); it makes the run directory RUN.
  CommandResult r;
  EXPECT_TRUE(loads_libtorch("run {gpt} --ranks 1 --run-dir {run} --no-resume --quiet", &r));
  ASSERT_EQ(r.exit_code, 0) << r.output.substr(r.output.size() > 4000 ? r.output.size() - 4000 : 0);
  for (const Case& c : cases()) {
    SCOPED_TRACE("gtrain " + c.args);
    EXPECT_EQ(loads_libtorch(c.args, &r), c.libtorch) << (c.libtorch ? "LibTorch never loaded" : "LibTorch loaded");
    if (!c.same_as_worker) continue;
    const CommandResult mine = run_command(command(GTRAIN_BINARY, c.args));
    const CommandResult worker = run_command(command(worker_, c.args));
    EXPECT_EQ(mine.exit_code, worker.exit_code);
    EXPECT_EQ(mine.output, worker.output);
  }
}

// The table covers both kinds, so neither check passes by testing nothing.
TEST(TorchFreeCliTable, HasBothKinds) {
  size_t torch = 0;
  for (const Case& c : cases()) torch += c.libtorch;
  EXPECT_GE(torch, 3u);
  EXPECT_GE(cases().size() - torch, 20u);
}

}  // namespace
}  // namespace gtrain
