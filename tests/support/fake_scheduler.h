// fake_scheduler.h: a stand-in Slurm for submit and cancel tests: sbatch answers job ids from 100,
// squeue a set text, every call recorded; and a small mlp job to submit.
#pragma once

#include <algorithm>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "launcher/commands/submit_command.h"
#include "tests/support/test_util.h"

namespace gtrain::test {

inline constexpr const char* kMlp =
    "[model]\nname = \"mlp\"\nhidden = [16]\n[data]\nkind = \"synthetic\"\nsynthetic_samples = 128\n"
    "[train]\nglobal_batch = 16\nepochs = 1.0\n[log]\nprogress = \"none\"\n";

// A scheduler: sbatch answers job ids from 100, squeue answers `squeue` (id state lines), every call
// but scontrol / sacctmgr / sacct reads is recorded; `on_call` runs first and may answer instead.
struct Fake {
  std::vector<std::vector<std::string>> calls;
  int next_job = 100;
  std::string squeue;
  std::function<void(const std::vector<std::string>&)> on_call;
  CommandRunner runner() {
    return [this](const std::vector<std::string>& wrapped) -> std::optional<std::string> {
      std::vector<std::string> argv(wrapped.begin() + (wrapped.size() > 4 && wrapped[0] == "bash" ? 4 : 0),
                                    wrapped.end());
      // Reads of limits and quotas (gtrain submit's quota warning): no answer, not recorded.
      if (argv[0] == "scontrol" || argv[0] == "sacctmgr" || argv[0] == "sacct") return std::nullopt;
      calls.push_back(argv);
      if (on_call) on_call(argv);
      if (argv[0] == "sbatch") return std::to_string(next_job++) + "\ngtrain-rc=0";
      if (argv[0] == "squeue") return squeue + "gtrain-rc=0";
      if (argv[0] == "scancel") return std::string("gtrain-rc=0");
      return std::nullopt;
    };
  }
  int count(const std::vector<std::string>& argv) const {
    return static_cast<int>(std::count(calls.begin(), calls.end(), argv));
  }
};

inline SubmitOptions mlp_submit(const TempDir& dir) {
  write_file(dir.file("mlp.toml"), kMlp);
  SubmitOptions o;
  o.config_path = dir.file("mlp.toml");
  o.run_dir = dir.file("run");
  o.gtrain = "/bin/true";
  return o;
}

}  // namespace gtrain::test
