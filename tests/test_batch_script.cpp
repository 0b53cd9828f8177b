// test_batch_script.cpp: shell quoting, the Slurm and PBS batch scripts' text (each backend's
// directives, the shared body), and the scripts run by bash: nasty paths, exit codes, USR1
// forwarding, the submit directory (label cpu).
#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <map>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "launcher/base/run_lock.h"
#include "launcher/chain/chain.h"
#include "launcher/commands/submit_command.h"
#include "launcher/scheduler/batch_script.h"
#include "runtime/core/errors.h"
#include "tests/support/submit_fixture.h"
#include "tests/support/test_util.h"

namespace fs = std::filesystem;
using namespace gtrain;
using namespace gtrain::submit_test;

TEST(ShellQuote, RoundTripsThroughBash) {
  test::TempDir dir;
  for (const auto& s : kNasty) {
    test::write_file(dir.file("q.sh"), "printf '%s' " + shell_quote(s) + "\n");
    const auto r = test::run_command("bash " + dir.file("q.sh") + " 2>/dev/null");
    EXPECT_EQ(r.output, s) << shell_quote(s);
  }
  EXPECT_EQ(shell_quote("/plain/path-1.toml"), "/plain/path-1.toml");
  EXPECT_EQ(shell_quote("it's"), "'it'\\''s'");
}

TEST(BatchScript, SlurmDirectivesAndSyntax) {
  test::TempDir dir;
  const std::string text = slurm_script(nasty_stage(dir.path()));
  for (const char* want : {"#SBATCH --nodes=2\n", "#SBATCH --gpus-per-node=2\n", "#SBATCH --time=00:10:00\n",
                           "#SBATCH --signal=B:USR1@45\n", "#SBATCH --requeue\n", "#SBATCH --open-mode=append\n",
                           "#SBATCH --partition=gpu\n", "trap forward USR1 TERM", "chain-step"}) {
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  }
  EXPECT_NE(text.find("#SBATCH --ntasks-per-node=1\n"), std::string::npos) << "mpirun places the ranks\n" << text;
  EXPECT_EQ(text.find("srun"), std::string::npos) << text;
  test::write_file(dir.file("s.sbatch"), text);
  const auto r = test::run_command("bash -n " + dir.file("s.sbatch"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // --launcher srun: a task a GPU, started through PMIx.
  BatchStage b = nasty_stage(dir.path());
  b.launcher = "srun";
  const std::string srun = slurm_script(b);
  EXPECT_NE(srun.find("#SBATCH --ntasks-per-node=2\n"), std::string::npos) << srun;
  EXPECT_NE(srun.find("srun --mpi=pmix --kill-on-bad-exit=1 --ntasks=\"${SLURM_NTASKS:-4}\" \"$GTRAIN\" run"),
            std::string::npos)
      << srun;
  // CPU cores: the site's default unless --cpus-per-gpu asks (one task a node would get one core on some sites).
  EXPECT_EQ(text.find("cpus"), std::string::npos) << text;
  b.cpus_per_gpu = 8;
  EXPECT_NE(slurm_script(b).find("#SBATCH --cpus-per-gpu=8\n"), std::string::npos) << slurm_script(b);
  EXPECT_NE(pbs_script(b).find("#PBS -l select=2:ngpus=2:ncpus=16:mpiprocs=2\n"), std::string::npos) << pbs_script(b);
}

TEST(BatchScript, PbsText) {
  test::TempDir dir;
  BatchStage b = nasty_stage(dir.path());
  b.partition = "workq";
  b.account = "proj1";
  b.run_time_limit_s = 590;
  const std::string text = pbs_script(b);
  for (const char* want : {"#PBS -l select=2:ngpus=2:mpiprocs=2\n", "#PBS -l walltime=00:10:00\n", "#PBS -r y\n",
                           "#PBS -q workq\n", "#PBS -A proj1\n", "JOB_ID=\"${PBS_JOBID:-}\""}) {
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  }
  EXPECT_EQ(text.find("#SBATCH"), std::string::npos);
  test::write_file(dir.file("s.pbs"), text);
  EXPECT_EQ(test::run_command("bash -n " + dir.file("s.pbs")).exit_code, 0);

  // Run it under a recorded PBS Pro job environment with a fake gtrain: the job id reaches
  // chain-step, the stage number comes from qsub -v GTRAIN_STAGE, paths arrive intact.
  fs::create_directories(fs::path(b.gtrain).parent_path());
  fs::create_directories(b.run_dir);
  const std::string log = dir.file("args.log");
  test::write_file(b.gtrain,
                   "#!/bin/bash\necho \"$*\" >> " + shell_quote(log) + "\n[ \"$1\" = run ] && exit 3\nexit 0\n");
  fs::permissions(b.gtrain, fs::perms::owner_all);
  test::write_file(dir.file("nodes"), "gpu01\ngpu01\ngpu02\ngpu02\n");
  const auto r = test::run_command("env PBS_JOBID=4242.pbs01 PBS_NODEFILE=" + dir.file("nodes") +
                                   " PBS_O_WORKDIR=/tmp GTRAIN_STAGE=5 bash " + dir.file("s.pbs"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const std::string got = test::read_file(log);
  EXPECT_NE(got.find("run " + b.config + " --run-dir " + b.run_dir), std::string::npos) << got;
  // --time-limit is what is left of 590 s after the script's own start-up (0 or 1 s here).
  const bool limit =
      got.find(" --time-limit 590s") != std::string::npos || got.find(" --time-limit 589s") != std::string::npos;
  EXPECT_TRUE(limit) << got;
  EXPECT_NE(got.find("chain-step " + b.run_dir + " --stage 5 --exit 3 --job 4242.pbs01"), std::string::npos) << got;
  // A script whose start-up ate the whole limit still passes a valid one (1 s): gtrain run then
  // stops before step 1.
  std::string late = text;
  const std::string at = "TIME_LIMIT=$(( 590 - SECONDS ))";
  ASSERT_NE(late.find(at), std::string::npos) << late;
  late.replace(late.find(at), at.size(), "TIME_LIMIT=$(( 590 - SECONDS - 600 ))");
  test::write_file(dir.file("late.pbs"), late);
  fs::remove(log);
  EXPECT_EQ(test::run_command("env PBS_JOBID=4243.pbs01 bash " + dir.file("late.pbs")).exit_code, 0);
  EXPECT_NE(test::read_file(log).find(" --time-limit 1s"), std::string::npos) << test::read_file(log);
}

// Runs a generated script with a fake gtrain that records its arguments: every path and value
// arrives intact, and the exit code is reported to chain-step.
TEST(BatchScript, ExecutesWithNastyPathsAndForwardsExitCodes) {
  test::TempDir dir;
  BatchStage b = nasty_stage(dir.path());
  fs::create_directories(fs::path(b.gtrain).parent_path());
  fs::create_directories(b.run_dir);
  const std::string log = dir.file("args.log");
  for (int rc : {3, 0, 1}) {
    fs::remove(log);
    test::write_file(b.gtrain, "#!/bin/bash\nfor a in \"$@\"; do printf '[%s]\\n' \"$a\" >> " + shell_quote(log) +
                                   "; done\necho --- >> " + shell_quote(log) +
                                   "\ncase \"$1\" in status) echo '{\"complete\": true}';; run) exit " +
                                   std::to_string(rc) + ";; esac\nexit 0\n");
    fs::permissions(b.gtrain, fs::perms::owner_all);
    test::write_file(dir.file("s.sbatch"), slurm_script(b));
    const auto r = test::run_command("env SLURM_JOB_ID=77 bash " + dir.file("s.sbatch"));
    EXPECT_EQ(r.exit_code, rc == 3 ? 0 : rc) << r.output;
    const std::string got = test::read_file(log);
    // The old ledger says complete: gtrain run still decides (it exits 0 at once when nothing is left).
    const std::string want = "[run]\n[" + b.config + "]\n[--run-dir]\n[" + b.run_dir + "]\n[--set]\n[" + b.run_args[1] +
                             "]\n---\n[chain-step]\n[" + b.run_dir + "]\n[--stage]\n[2]\n[--exit]\n[" +
                             std::to_string(rc) + "]\n[--job]\n[77]\n---\n";
    EXPECT_EQ(got, want) << r.output;
  }
}

// USR1 sent to the batch shell reaches gtrain run, which the shell then still waits for.
TEST(BatchScript, ForwardsUsr1ToGtrain) {
  test::TempDir dir;
  BatchStage b = nasty_stage(dir.path());
  fs::create_directories(fs::path(b.gtrain).parent_path());
  fs::create_directories(b.run_dir);
  const std::string log = dir.file("log");
  test::write_file(b.gtrain,
                   "#!/bin/bash\ncase \"$1\" in\n"
                   "run) trap 'echo got-usr1 >> " +
                       shell_quote(log) +
                       "; exit 3' USR1\n"
                       "  for i in $(seq 100); do sleep 0.1; done; exit 0;;\n"
                       "chain-step) echo \"step $*\" >> " +
                       shell_quote(log) +
                       ";;\n"
                       "esac\nexit 0\n");
  fs::permissions(b.gtrain, fs::perms::owner_all);
  test::write_file(dir.file("s.sbatch"), slurm_script(b));
  const auto r = test::run_command("bash " + shell_quote(dir.file("s.sbatch")) +
                                   " & pid=$!; sleep 1; "
                                   "kill -USR1 $pid; wait $pid");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const std::string got = test::read_file(log);
  EXPECT_NE(got.find("got-usr1"), std::string::npos) << got << r.output;
  EXPECT_NE(got.find("--exit 3"), std::string::npos) << got;
}

// Relative paths in the config (data, plugin, log.root) and the config path itself mean what they
// meant where `gtrain submit` ran: the stage runs gtrain there, with absolute config and run dir.
TEST(SubmitScript, StagesRunFromTheSubmitDirectory) {
  test::TempDir dir;
  fs::create_directories(dir.file("work"));
  test::write_file(dir.file("work/job.toml"), std::string(kMlp) + "[log]\nroot = \"runs\"\n");
  const std::string log = dir.file("log");
  write_fake_gtrain(dir.file("bin/gtrain"), log, 3);
  SubmitOptions o;
  o.config_path = "job.toml";
  o.gtrain = dir.file("bin/gtrain");
  o.dry_run = true;
  o.stages = "1";
  FakeScheduler fake;
  std::ostringstream out;
  {
    InDirectory in(dir.file("work"));
    ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0) << out.str();
  }
  const std::string run_dir = dir.file("work/runs/job");
  const std::string script = test::read_file(run_dir + "/stage-1.sbatch");
  EXPECT_NE(script.find("WORK_DIR=" + shell_quote(dir.file("work")) + "\n"), std::string::npos) << script;
  EXPECT_NE(script.find("cd \"$WORK_DIR\" || exit 1"), std::string::npos) << script;
  // Run it from elsewhere, as the scheduler would (sbatch --chdir is the run dir).
  const auto r = test::run_command("cd " + shell_quote(run_dir) + " && env SLURM_JOB_ID=5 bash stage-1.sbatch");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const auto calls = test::lines(test::read_file(log));
  ASSERT_EQ(calls.size(), 2u) << test::read_file(log);
  EXPECT_EQ(calls[0], "pwd=" + dir.file("work") + " argc=4 run " + dir.file("work/job.toml") + " --run-dir " + run_dir);
  EXPECT_EQ(calls[1], "pwd=" + dir.file("work") + " argc=8 chain-step " + run_dir + " --stage 1 --exit 3 --job 5");
}

// USR1 (the time limit's lead, gtrain cancel) to the script just as gtrain run ends, or while it
// still runs: chain-step gets gtrain run's own exit code, not wait's 128 + 10.
TEST(SubmitScript, SignalAsTheRunEndsKeepsItsExitCode) {
  test::TempDir dir;
  test::write_file(dir.file("job.toml"), kMlp);
  const std::string log = dir.file("log");
  SubmitOptions o;
  o.config_path = dir.file("job.toml");
  o.run_dir = dir.file("run");
  o.gtrain = dir.file("bin/gtrain");
  o.dry_run = true;
  o.stages = "1";
  FakeScheduler fake;
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0) << out.str();
  for (const std::string& pause : std::vector<std::string>{"", "sleep 0.2; "}) {
    fs::create_directories(dir.file("bin"));
    // It saves (its ledger line), signals the script and exits 3.
    test::write_file(o.gtrain,
                     "#!/bin/bash\nif [ \"$1\" = run ]; then trap : USR1; echo '{\"exit\":\"resumable: signal 10\"}' "
                     ">> \"$4/stages.jsonl\"; kill -USR1 $PPID; " +
                         pause + "exit 3; fi\necho \"$*\" >> " + shell_quote(log) + "\n");
    fs::permissions(o.gtrain, fs::perms::owner_all);
    for (int i = 0; i < 20; ++i) {
      fs::remove(log);
      const auto r = test::run_command("cd " + shell_quote(o.run_dir) + " && env SLURM_JOB_ID=5 bash stage-1.sbatch");
      EXPECT_EQ(r.exit_code, 0) << r.output;
      EXPECT_NE(test::read_file(log).find("--exit 3 --job 5"), std::string::npos)
          << "'" << pause << "' try " << i << ": " << test::read_file(log) << r.output;
    }
  }
}

// No --set: RUN_ARGS is empty, which `set -u` calls unbound in bash before 4.4 unless every
// expansion is guarded; gtrain run then gets no empty argument either.
TEST(SubmitScript, EmptyRunArgsExpandSafely) {
  test::TempDir dir;
  BatchStage b = nasty_stage(dir.path());
  b.run_args.clear();
  for (const auto& launcher : {"mpirun", "srun"}) {
    b.launcher = launcher;
    for (const std::string& text : {slurm_script(b), pbs_script(b)}) {
      EXPECT_EQ(text.find("\"${RUN_ARGS[@]}\" "), std::string::npos) << text;
      size_t uses = 0;
      for (size_t at = text.find("${RUN_ARGS[@]+\"${RUN_ARGS[@]}\"}"); at != std::string::npos;
           at = text.find("${RUN_ARGS[@]+\"${RUN_ARGS[@]}\"}", at + 1))
        ++uses;
      EXPECT_EQ(uses, 1u) << text;
      // Every array expansion in the script is the guarded one.
      for (size_t at = text.find("[@]"); at != std::string::npos; at = text.find("[@]", at + 1))
        EXPECT_TRUE(text.compare(at - 10, 10, "${RUN_ARGS") == 0 || text.compare(at - 9, 9, "\"${RUN_ARGS") == 0)
            << text.substr(at - 20, 40);
    }
  }
  b.launcher = "mpirun";
  fs::create_directories(b.run_dir);
  const std::string log = dir.file("log");
  write_fake_gtrain(b.gtrain, log, 0);
  test::write_file(dir.file("s.sbatch"), slurm_script(b));
  const auto r = test::run_command("bash " + dir.file("s.sbatch"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(test::read_file(log).find("argc=4 run "), std::string::npos) << test::read_file(log);
}
