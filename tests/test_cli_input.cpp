// test_cli_input.cpp: command-line input: one duration reader for submit --time and --signal-lead
// (as for run --time-limit), the exit code of a run directory another run holds (busy, 4), and a
// missing or unknown subcommand as a usage error (label cpu).
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "launcher/base/run_lock.h"
#include "launcher/chain/chain.h"
#include "launcher/commands/submit_command.h"
#include "launcher/scheduler/batch_script.h"
#include "runtime/core/errors.h"
#include "tests/support/fake_scheduler.h"
#include "tests/support/test_util.h"

namespace fs = std::filesystem;
using namespace gtrain;
using test::Fake;
using test::mlp_submit;

// submit --time takes the durations run --time-limit takes (and Slurm's forms, a plain number being
// minutes as for sbatch); the script gets Slurm's form. --signal-lead takes a duration too.
TEST(CliInput, SubmitTimeTakesEveryDurationForm) {
  test::TempDir dir;
  for (const auto& [time, slurm] : std::vector<std::pair<std::string, std::string>>{{"1h30m", "01:30:00"},
                                                                                    {"2h", "02:00:00"},
                                                                                    {"90", "01:30:00"},
                                                                                    {"1-00:30", "1-00:30:00"},
                                                                                    {"45m30s", "00:45:30"},
                                                                                    {"00:10:00", "00:10:00"}}) {
    Fake fake;
    SubmitOptions o = mlp_submit(dir);
    o.run_dir = dir.file("run-" + std::to_string(fake.next_job) + time);
    o.time = time;
    std::ostringstream out;
    ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0) << time << "\n" << out.str();
    EXPECT_NE(test::read_file(o.run_dir + "/stage-1.sbatch").find("#SBATCH --time=" + slurm + "\n"), std::string::npos)
        << time;
  }
  SubmitOptions bad = mlp_submit(dir);
  bad.time = "1h30";
  try {
    validate_submit_options(bad);
    ADD_FAILURE() << "accepted --time 1h30";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "--time: expected a duration like 90s, 15m, 2h, 1h30m, HH:MM:SS or D-HH[:MM[:SS]] above 0 and at most "
              "366 days (a plain number is minutes), got '1h30'");
  }
  const auto r = test::run_command(GTRAIN_BINARY + " submit " + dir.file("mlp.toml") + " --run-dir " + dir.file("dry") +
                                   " --dry-run --time 1h --signal-lead 2m");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(test::read_file(dir.file("dry/stage-1.sbatch")).find("#SBATCH --signal=B:USR1@120\n"), std::string::npos)
      << r.output;
  const auto lead = test::run_command(GTRAIN_BINARY + " submit " + dir.file("mlp.toml") + " --run-dir " +
                                      dir.file("dry2") + " --dry-run --signal-lead soon");
  EXPECT_EQ(lead.exit_code, 2) << lead.output;
  EXPECT_NE(lead.output.find("--signal-lead: expected a duration like 90s"), std::string::npos) << lead.output;
}

// A run directory another gtrain run holds: its own exit code (4), so a wrapper can retry; a missing
// subcommand is a usage error naming the choices.
TEST(CliInput, BusyRunDirectoryAndMissingSubcommand) {
  test::TempDir dir;
  test::write_file(dir.file("mlp.toml"), test::kMlp);
  fs::create_directories(dir.file("run"));
  {
    const auto lock = RunLock::acquire(dir.file("run"), "");
    const auto r = test::run_command(GTRAIN_BINARY + " run " + dir.file("mlp.toml") + " --run-dir " + dir.file("run"));
    EXPECT_EQ(r.exit_code, 4) << r.output;
    EXPECT_EQ(r.output, "gtrain: busy: run directory " + dir.file("run") + " is in use by another gtrain run (pid " +
                            std::to_string(::getpid()) + "); hint: wait for it to end or choose another --run-dir\n");
  }
  EXPECT_EQ(
      test::run_command(GTRAIN_BINARY + " run " + dir.file("mlp.toml") + " --run-dir " + dir.file("run")).exit_code, 0);
  const auto ckpt = test::run_command(GTRAIN_BINARY + " ckpt");
  EXPECT_EQ(ckpt.exit_code, 2) << ckpt.output;
  EXPECT_EQ(ckpt.output,
            "gtrain: usage error: gtrain ckpt: expected a command, one of inspect, verify, export"
            "; hint: see gtrain ckpt --help\n");
  const auto none = test::run_command(GTRAIN_BINARY);
  EXPECT_EQ(none.exit_code, 2) << none.output;
  EXPECT_EQ(none.output.rfind("gtrain: usage error: gtrain: expected a command, one of run, ", 0), 0u) << none.output;
  const auto bogus = test::run_command(GTRAIN_BINARY + " ckpt bogus x");
  EXPECT_EQ(bogus.output,
            "gtrain: usage error: gtrain ckpt: unknown command 'bogus'; expected one of inspect, "
            "verify, export\n");
  EXPECT_EQ(test::run_command(GTRAIN_BINARY + " ckpt --help").exit_code, 0);
}
