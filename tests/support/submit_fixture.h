// submit_fixture.h: what the submit, chain and batch-script suites share: a fake scheduler that
// records every command, script inputs with hostile paths, a small mlp job to submit, a fake gtrain.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "launcher/commands/submit_command.h"
#include "launcher/scheduler/batch_script.h"
#include "tests/support/test_util.h"

namespace gtrain::submit_test {

inline const std::vector<std::string> kNasty = {"plain",
                                                "with space",
                                                "it's",
                                                "double \"quoted\"",
                                                "$HOME and ${PATH}",
                                                "`id` and $(id)",
                                                "back\\slash",
                                                "new\nline",
                                                "semi;colon & amp | pipe",
                                                "*?[glob]",
                                                "",
                                                "'",
                                                "%j percent",
                                                "tab\there"};

// A scheduler that records every command and answers sbatch with increasing job ids; `refuse`
// decides which sbatch calls fail (the message is returned verbatim, rc 1).
struct FakeScheduler {
  std::vector<std::vector<std::string>> calls;
  int next_job = 100;
  std::function<bool(const std::vector<std::string>&)> refuse = [](const std::vector<std::string>&) { return false; };
  // When set and it returns a value: the merged output (ending in gtrain-rc=N) instead of the above.
  std::function<std::optional<std::string>(const std::vector<std::string>&)> answer;

  CommandRunner runner() {
    return [this](const std::vector<std::string>& wrapped) -> std::optional<std::string> {
      // run_merged wraps the command: bash -c SCRIPT gtrain ARGV...
      std::vector<std::string> argv(wrapped.begin() + (wrapped.size() > 4 && wrapped[0] == "bash" ? 4 : 0),
                                    wrapped.end());
      if (answer) {
        if (auto a = answer(argv)) {
          calls.push_back(argv);
          return a;
        }
      }
      // submit's read-only looks (the partition's MaxTime, quotas for its warning): not calls the tests count.
      if (argv[0] == "scontrol" || argv[0] == "sacctmgr" || argv[0] == "sacct") return std::nullopt;
      calls.push_back(argv);
      if (argv[0] == "sbatch" || argv[0] == "qsub") {
        if (refuse(argv))
          return std::string(
              "sbatch: error: max 2 GPUs per job (tres_per_node=gres:gpu:4)\n"
              "sbatch: error: Batch job submission failed: Unspecified error\ngtrain-rc=1");
        bool test_only = false;
        for (const auto& a : argv) test_only |= a == "--test-only";
        if (test_only) return std::string("sbatch: Job 1 to start at now\ngtrain-rc=0");
        return std::to_string(next_job++) + (argv[0] == "qsub" ? ".pbs01" : "") + "\ngtrain-rc=0";
      }
      if (argv[0] == "scancel" || argv[0] == "qdel") return std::string("gtrain-rc=0");
      return std::nullopt;
    };
  }
  int count(const std::string& program) const {
    int n = 0;
    for (const auto& c : calls) n += c[0] == program;
    return n;
  }
};

inline BatchStage nasty_stage(const std::string& root) {
  BatchStage b;
  b.gtrain = root + "/bin dir/gtrain";
  b.config = root + "/my \"cfg\" $x `y`.toml";
  b.run_dir = root + "/runs/it's a $run `dir`";
  b.work_dir = b.run_dir;  // the scripts cd there: it must exist
  b.run_args = {"--set", "log.name=a b'c\"$d`e`"};
  b.index = 2;
  b.gpus = 4;
  b.nodes = 2;
  b.time = "00:10:00";
  b.signal_lead_s = 45;
  b.partition = "gpu";
  return b;
}

inline const char* const kMlp =
    "[model]\nname = \"mlp\"\nhidden = [16]\n[data]\nkind = \"synthetic\"\nsynthetic_samples = 128\n"
    "[train]\nglobal_batch = 16\nepochs = 1.0\n";

// Submit options for kMlp (written into `dir`), run directory `run_dir`, a gtrain that does nothing.
inline SubmitOptions mlp_submit(const test::TempDir& dir, const std::string& run_dir) {
  test::write_file(dir.file("mlp.toml"), kMlp);
  SubmitOptions o;
  o.config_path = dir.file("mlp.toml");
  o.run_dir = run_dir;
  o.gtrain = "/bin/true";
  return o;
}

// Runs the test body with `dir` as the working directory, then restores it.
struct InDirectory {
  std::filesystem::path old = std::filesystem::current_path();
  explicit InDirectory(const std::string& dir) { std::filesystem::current_path(dir); }
  ~InDirectory() { std::filesystem::current_path(old); }
};

// A fake gtrain at `path` that logs its working directory and arguments to `log`, exits `rc` for run.
inline void write_fake_gtrain(const std::string& path, const std::string& log, int rc) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  test::write_file(path, "#!/bin/bash\necho \"pwd=$(pwd) argc=$# $*\" >> " + shell_quote(log) +
                             "\n[ \"$1\" = run ] && exit " + std::to_string(rc) + "\nexit 0\n");
  std::filesystem::permissions(path, std::filesystem::perms::owner_all);
}

}  // namespace gtrain::submit_test
