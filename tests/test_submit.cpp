// test_submit.cpp: gtrain submit without a scheduler: shell quoting, Slurm/PBS script text, option
// validation, stage planning over quota windows, and the chain's transitions against a fake
// scheduler (label cpu).
#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <map>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "launcher/batch_script.h"
#include "launcher/chain.h"
#include "launcher/run_lock.h"
#include "launcher/submit_command.h"
#include "runtime/common/errors.h"
#include "tests/test_util.h"

namespace fs = std::filesystem;
using namespace gtrain;

namespace {

const std::vector<std::string> kNasty = {"plain",
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
      // submit's read-only look at the partition's MaxTime: not a call the tests count.
      if (argv[0] == "scontrol") return std::nullopt;
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

BatchStage nasty_stage(const std::string& root) {
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

const char* kMlp =
    "[model]\nname = \"mlp\"\nhidden = [16]\n[data]\nkind = \"synthetic\"\nsynthetic_samples = 128\n"
    "[train]\nglobal_batch = 16\nepochs = 1.0\n";

// Submit options for kMlp (written into `dir`), run directory `run_dir`, a gtrain that does nothing.
SubmitOptions mlp_submit(const test::TempDir& dir, const std::string& run_dir) {
  test::write_file(dir.file("mlp.toml"), kMlp);
  SubmitOptions o;
  o.config_path = dir.file("mlp.toml");
  o.run_dir = run_dir;
  o.gtrain = "/bin/true";
  return o;
}

}  // namespace

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

TEST(SubmitOptions, RejectsBadValues) {
  auto bad = [](auto mutate, const std::string& fragment) {
    SubmitOptions o;
    o.config_path = "x.toml";
    mutate(o);
    try {
      validate_submit_options(o);
      ADD_FAILURE() << "accepted; expected " << fragment;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
    }
  };
  bad([](SubmitOptions& o) { o.scheduler = "lsf"; }, "--scheduler 'lsf'");
  bad([](SubmitOptions& o) { o.launcher = "torchrun"; }, "--launcher 'torchrun': expected mpirun or srun");
  bad(
      [](SubmitOptions& o) {
        o.launcher = "srun";
        o.scheduler = "pbs";
      },
      "--launcher srun needs --scheduler slurm");
  bad([](SubmitOptions& o) { o.stages = "0"; }, "--stages '0'");
  bad([](SubmitOptions& o) { o.stages = "two"; }, "--stages 'two'");
  bad([](SubmitOptions& o) { o.gpus = "2,x"; }, "--gpus '2,x'");
  bad([](SubmitOptions& o) { o.gpus = "0"; }, "--gpus '0'");
  bad(
      [](SubmitOptions& o) {
        o.stages = "3";
        o.gpus = "2,4";
      },
      "--gpus lists 2 stages but --stages is 3");
  bad(
      [](SubmitOptions& o) {
        o.gpus = "3";
        o.nodes = "2";
      },
      "cannot be spread evenly over 2 nodes");
  bad([](SubmitOptions& o) { o.time = "1 h"; }, "--time: expected a duration like 90s, 15m, 2h, 1h30m");
  bad([](SubmitOptions& o) { o.gpus = "2,"; }, "--gpus '2,'");
  bad([](SubmitOptions& o) { o.time = "00:00:30"; }, "smallest time limit");
  bad([](SubmitOptions& o) { o.partition = "gpu; rm -rf /"; }, "--partition");
  bad([](SubmitOptions& o) { o.qos = "a b"; }, "--qos");
  bad([](SubmitOptions& o) { o.sbatch_args = {"--x=1\n#SBATCH --y"}; }, "--sbatch-arg");
  bad(
      [](SubmitOptions& o) {
        o.signal_lead_s = 120;
        o.time = "00:01:00";
      },
      "--signal-lead");
  SubmitOptions ok;
  ok.config_path = "x.toml";
  ok.stages = "3";
  ok.gpus = "2,4,1";
  ok.time = "1-02:00:00";
  EXPECT_EQ(validate_submit_options(ok), 3);
  EXPECT_DOUBLE_EQ(parse_slurm_time("1-02:00:00"), 26 * 3600.0);
  EXPECT_DOUBLE_EQ(parse_slurm_time("05:00"), 300.0);
  // Slurm's other forms, read as Slurm reads them ("1-00:30" used to be a day and 30 seconds).
  EXPECT_DOUBLE_EQ(parse_slurm_time("1-00:30"), 86400.0 + 1800);
  EXPECT_DOUBLE_EQ(parse_slurm_time("2-12"), 60 * 3600.0);
  EXPECT_DOUBLE_EQ(parse_slurm_time("90"), 5400.0);
  EXPECT_DOUBLE_EQ(parse_slurm_time("100:00:00"), 100 * 3600.0);
  EXPECT_THROW(parse_slurm_time("1-24:00"), ConfigError);
  EXPECT_THROW(parse_slurm_time("01:60:00"), ConfigError);
  EXPECT_THROW(parse_slurm_time("1:2:3:4"), ConfigError);
  EXPECT_EQ(hms(90000), "25:00:00");
  EXPECT_EQ(hms(3723), "01:02:03");
}

TEST(SubmitPlan, GpusFromListsAndWindows) {
  SubmitOptions o;
  o.gpus = "2,4,1";
  o.time = "00:30:00";
  auto p = plan_stages(o, 3, {}, 1e9);
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0].gpus, 2);
  EXPECT_EQ(p[1].gpus, 4);
  EXPECT_EQ(p[2].gpus, 1);
  EXPECT_EQ(p[2].begin_unix, 0);

  // Two windows: nights 18:00-08:00 with 8 GPUs, days with 2. Stages of 10 h starting at noon.
  WindowConfig night{"mon-sun", "18:00-08:00", 8}, day{"mon-sun", "08:00-18:00", 2};
  const std::vector<Window> ws = {parse_window(night, "n"), parse_window(day, "d")};
  std::tm tm{};
  tm.tm_year = 126, tm.tm_mon = 10, tm.tm_mday = 30, tm.tm_hour = 12, tm.tm_isdst = -1;
  const double noon = static_cast<double>(std::mktime(&tm));
  SubmitOptions w;
  w.gpus = "";
  w.time = "10:00:00";
  p = plan_stages(w, 2, ws, noon);
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[0].gpus, 2) << "noon is in the day window";
  EXPECT_EQ(p[0].begin_unix, 0);
  EXPECT_EQ(p[1].gpus, 8) << "22:00 is in the night window";
  EXPECT_EQ(p[1].begin_unix, noon + 6 * 3600) << "the night window opens at 18:00";

  // Only a night window: a stage asked for at noon begins at 18:00.
  p = plan_stages(w, 1, {parse_window(night, "n")}, noon);
  EXPECT_EQ(p[0].begin_unix, noon + 6 * 3600);
  EXPECT_EQ(p[0].gpus, 8);
  EXPECT_EQ(slurm_begin(noon + 6 * 3600), "2026-11-30T18:00:00");
  EXPECT_EQ(pbs_begin(noon + 6 * 3600), "202611301800.00");
  EXPECT_EQ(signal_lead_seconds(5.0, 2.0, 5.0), 45);
}

TEST(SubmitChain, SubmitsDependentStagesAndSteps) {
  test::TempDir dir;
  const std::string run_dir = dir.path() + "/run 'one'";
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, run_dir);
  o.stages = "3";
  o.gpus = "2,4,1";
  o.time = "00:05:00";
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0);
  ASSERT_EQ(fake.count("sbatch"), 3) << out.str();
  EXPECT_EQ(fake.calls[1][fake.calls[1].size() - 3], "--dependency=afterany:100");
  EXPECT_EQ(fake.calls[2][fake.calls[2].size() - 3], "--dependency=afterany:101");
  EXPECT_EQ(fake.calls[0].back(), run_dir + "/stage-1.sbatch");
  EXPECT_TRUE(fs::exists(run_dir + "/stage-3.sbatch"));
  Chain c = read_chain(run_dir);
  ASSERT_EQ(c.stages.size(), 3u);
  EXPECT_EQ(c.stages[2].job, "102");
  EXPECT_EQ(c.stages[1].gpus, 4);

  // A second submit while stages are queued is refused.
  EXPECT_THROW(submit_command(o, {}, fake.runner(), out), ConfigError);

  EXPECT_NE(chain_step(run_dir, 1, 3, "100", fake.runner()).find("stage 2 continues"), std::string::npos);
  EXPECT_NE(chain_step(run_dir, 2, 0, "101", fake.runner()).find("training complete"), std::string::npos);
  c = read_chain(run_dir);
  EXPECT_EQ(c.state, ChainState::completed);
  EXPECT_EQ(c.stages[0].state, StageState::resumable);
  EXPECT_EQ(c.stages[2].state, StageState::cancelled);
  EXPECT_EQ(fake.calls.back(), (std::vector<std::string>{"scancel", "102"}));

  std::ostringstream status;
  print_chain_status(run_dir, fake.runner(), status);
  EXPECT_NE(status.str().find("stage 3  job 102  1 GPU(s) on 1 node(s)  cancelled"), std::string::npos) << status.str();
}

TEST(SubmitChain, FailureCancelsTheRestAndSaysWhy) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  o.stages = "3";
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0);
  const std::string why = chain_step(o.run_dir, 1, 2, "100", fake.runner());
  EXPECT_NE(why.find("stage 1 failed with exit code 2 (bad input)"), std::string::npos) << why;
  EXPECT_EQ(fake.count("scancel"), 2);
  const Chain c = read_chain(o.run_dir);
  EXPECT_EQ(c.state, ChainState::failed);
  EXPECT_EQ(c.stages[1].state, StageState::cancelled);
}

TEST(SubmitChain, AutoStagesSubmitOneMoreWhileResumable) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0);
  ASSERT_EQ(fake.count("sbatch"), 1);
  chain_step(o.run_dir, 1, 3, "100", fake.runner());
  ASSERT_EQ(fake.count("sbatch"), 2);
  const auto& call = fake.calls.back();
  EXPECT_NE(std::find(call.begin(), call.end(), "--dependency=afterany:100"), call.end());
  EXPECT_NE(std::find(call.begin(), call.end(), "--export=ALL,GTRAIN_STAGE=2"), call.end());
  chain_step(o.run_dir, 2, 0, "101", fake.runner());
  const Chain c = read_chain(o.run_dir);
  EXPECT_EQ(c.stages.size(), 2u);
  EXPECT_EQ(c.state, ChainState::completed);
  std::ostringstream cancel;
  EXPECT_EQ(cancel_chain(o.run_dir, fake.runner(), cancel).cancelled, 0);
}

TEST(SubmitChain, RefusalShowsTheMessageAndTheLargestAcceptedPlan) {
  test::TempDir dir;
  FakeScheduler fake;
  fake.refuse = [](const std::vector<std::string>& argv) {
    // Accept at most 2 GPUs: the script asks for 4 unless the command line overrides it.
    for (const auto& a : argv) {
      if (a.rfind("--gpus-per-node=", 0) == 0) return std::stoi(a.substr(16)) > 2;
    }
    return true;
  };
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  o.gpus = "4";
  o.nodes = "2";
  o.stages = "2";
  o.time = "00:10:00";
  o.partition = "gpu";
  o.cpus_per_gpu = 3;
  o.sbatch_args = {"--comment=two words"};
  std::ostringstream out;
  try {
    submit_command(o, {}, fake.runner(), out);
    FAIL() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("sbatch: error: max 2 GPUs per job"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("largest GPU count the scheduler accepts is 2 (on 2 node(s))"), std::string::npos)
        << e.hint();
    // The command to run instead keeps the other options (it used to drop --nodes, --time, --stages).
    EXPECT_NE(e.hint().find("gtrain submit " + o.config_path + " --run-dir " + o.run_dir +
                            " --stages 2 --gpus 2 --nodes 2 --time 00:10:00 --partition gpu --sbatch-arg "
                            "'--comment=two words' --cpus-per-gpu 3; its plan:"),
              std::string::npos)
        << e.hint();
  }
  EXPECT_EQ(read_chain(o.run_dir).state, ChainState::failed);
}

TEST(SubmitChain, PbsDependsWithW) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  o.scheduler = "pbs";
  o.stages = "2";
  o.gpus = "4";
  o.nodes = "2";
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0);
  ASSERT_EQ(fake.count("qsub"), 2);
  const auto& call = fake.calls[1];
  EXPECT_NE(std::find(call.begin(), call.end(), "depend=afterany:100.pbs01"), call.end());
  EXPECT_NE(test::read_file(o.run_dir + "/stage-1.pbs").find("select=2:ngpus=2"), std::string::npos);
  // -V: the stage runs with the environment submit checked (GTRAIN_* overrides), as Slurm's --export=ALL.
  for (const auto& c : fake.calls) {
    if (c[0] == "qsub") {
      EXPECT_NE(std::find(c.begin(), c.end(), "-V"), c.end());
    }
  }
}

TEST(SubmitChain, DryRunSubmitsNothing) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run $x");
  o.dry_run = true;
  o.stages = "2";
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0);
  EXPECT_TRUE(fake.calls.empty());
  EXPECT_TRUE(fs::exists(o.run_dir + "/stage-2.sbatch"));
  EXPECT_NE(out.str().find("'--chdir=" + o.run_dir + "'"), std::string::npos) << out.str();
}

namespace {

// Runs the test body with `dir` as the working directory, then restores it.
struct InDirectory {
  fs::path old = fs::current_path();
  explicit InDirectory(const std::string& dir) { fs::current_path(dir); }
  ~InDirectory() { fs::current_path(old); }
};

// A fake gtrain at `path` that logs its working directory and arguments to `log`, exits `rc` for run.
void write_fake_gtrain(const std::string& path, const std::string& log, int rc) {
  fs::create_directories(fs::path(path).parent_path());
  test::write_file(path, "#!/bin/bash\necho \"pwd=$(pwd) argc=$# $*\" >> " + shell_quote(log) +
                             "\n[ \"$1\" = run ] && exit " + std::to_string(rc) + "\nexit 0\n");
  fs::permissions(path, fs::perms::owner_all);
}

}  // namespace

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

// Windows mon-fri 08:00-20:00 (8 GPUs) and 20:00-08:00 (32), 2 h stages submitted at 14:28 on a
// Monday: stages 2 and 3 follow on afterany in the day window, stage 4 waits for 20:00 exactly,
// stage 5 follows it in the night window.
TEST(SubmitPlan, BeginOnlyWhereAStageWaitsForAnotherWindow) {
  WindowConfig day{"mon-fri", "08:00-20:00", 8}, night{"mon-fri", "20:00-08:00", 32};
  const std::vector<Window> ws = {parse_window(day, "d"), parse_window(night, "n")};
  std::tm tm{};
  tm.tm_year = 126, tm.tm_mon = 10, tm.tm_mday = 30, tm.tm_hour = 14, tm.tm_min = 28, tm.tm_isdst = -1;
  const double now = static_cast<double>(std::mktime(&tm));
  ASSERT_EQ(tm.tm_wday, 1) << "2026-11-30 is a Monday";
  SubmitOptions o;
  o.time = "02:00:00";
  const auto p = plan_stages(o, 5, ws, now);
  ASSERT_EQ(p.size(), 5u);
  const std::vector<int> gpus = {8, 8, 8, 32, 32};
  const std::vector<double> begin = {0, 0, 0, now + 5 * 3600 + 32 * 60, 0};  // 20:00 = 14:28 + 5 h 32 min
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_EQ(p[i].gpus, gpus[i]) << "stage " << i + 1;
    EXPECT_EQ(p[i].begin_unix, begin[i]) << "stage " << i + 1;
  }
  EXPECT_EQ(slurm_begin(p[3].begin_unix), "2026-11-30T20:00:00");
  // Outside every window, the first stage waits for the next opening (Tuesday 08:00).
  tm = {};
  tm.tm_year = 126, tm.tm_mon = 11, tm.tm_mday = 1, tm.tm_hour = 8, tm.tm_isdst = -1;
  const double tuesday8 = static_cast<double>(std::mktime(&tm));
  const auto q = plan_stages(o, 1, {parse_window(day, "d")}, now + 6 * 3600);
  EXPECT_EQ(q[0].begin_unix, tuesday8);
}

// The dry run prints the exact commands, with --begin and GTRAIN_STAGE, each stage after $JOB(k-1).
TEST(SubmitChain, DryRunPrintsTheExactCommands) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  // A window that opens in two hours' time (whole hours, local time): stage 1 begins then.
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char hours[32];
  std::snprintf(hours, sizeof hours, "%02d:00-%02d:00", (local.tm_hour + 2) % 24, (local.tm_hour + 3) % 24);
  test::write_file(o.config_path, std::string(kMlp) + "[[schedule.window]]\nhours = \"" + hours + "\"\nmax_gpus = 2\n");
  o.dry_run = true;
  o.stages = "2";
  o.time = "00:10:00";  // stage 2 follows in the same window: no --begin of its own
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0) << out.str();
  const std::string text = out.str();
  EXPECT_NE(text.find("  JOB1=$(sbatch --parsable"), std::string::npos) << text;
  EXPECT_NE(text.find("--begin="), std::string::npos) << text;
  EXPECT_NE(text.find("--export=ALL,GTRAIN_STAGE=1 " + o.run_dir + "/stage-1.sbatch) && JOB1=${JOB1%%;*}\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("\"--dependency=afterany:$JOB1\" --export=ALL,GTRAIN_STAGE=2 " + o.run_dir +
                      "/stage-2.sbatch) && JOB2=${JOB2%%;*}\n"),
            std::string::npos)
      << text;
  // The lines run as they are against a fake sbatch that echoes its arguments and a job id with a
  // cluster name, as --parsable does on a multi-cluster site.
  fs::create_directories(dir.file("bin"));
  test::write_file(dir.file("bin/sbatch"),
                   "#!/bin/bash\necho \"$*\" >> " + dir.file("sbatch.log") + "\necho \"$RANDOM;cluster2\"\n");
  fs::permissions(dir.file("bin/sbatch"), fs::perms::owner_all);
  std::string commands;
  for (const auto& line : test::lines(text)) {
    if (line.rfind("  JOB", 0) == 0) commands += line + "\n";
  }
  test::write_file(dir.file("cmds.sh"), "set -eu\n" + commands + "echo \"$JOB1 $JOB2\"\n");
  const auto r = test::run_command("PATH=" + dir.file("bin") + ":$PATH bash " + dir.file("cmds.sh"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const auto calls = test::lines(test::read_file(dir.file("sbatch.log")));
  ASSERT_EQ(calls.size(), 2u);
  const auto ids = test::lines(r.output);
  ASSERT_FALSE(ids.empty());
  const std::string job1 = ids.back().substr(0, ids.back().find(' '));
  EXPECT_EQ(job1.find(';'), std::string::npos) << r.output;
  EXPECT_NE(calls[1].find("--dependency=afterany:" + job1 + " "), std::string::npos) << calls[1] << "\n" << r.output;
}

// What gtrain run refuses at once, submit refuses before writing anything.
TEST(SubmitChain, RefusesWhatRunWouldRefuseBeforeWritingScripts) {
  test::TempDir dir;
  FakeScheduler fake;
  auto expect_refused = [&](const std::string& config, const std::vector<std::string>& sets,
                            const std::string& needle) {
    SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
    test::write_file(o.config_path, config);
    o.sets = sets;
    o.dry_run = true;
    std::ostringstream out;
    try {
      submit_command(o, {}, fake.runner(), out);
      ADD_FAILURE() << "accepted; expected " << needle << "\n" << out.str();
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
    EXPECT_FALSE(fs::exists(o.run_dir + "/stage-1.sbatch"));
  };
  std::string unknown = kMlp;
  unknown.replace(unknown.find("\"mlp\""), 5, "\"resnet9000\"");
  expect_refused(unknown, {}, "resnet9000");
  expect_refused(kMlp, {"parallel.micro_batch=7"}, "micro_batch");
  // The stage scripts stop gtrain run with USR1: without it in the list, USR1 would kill the stage unsaved.
  expect_refused(kMlp, {"schedule.stop_signals=[\"TERM\", \"INT\"]"},
                 "schedule.stop_signals = [\"TERM\", \"INT\"] lacks \"USR1\", which the stage scripts send");
  // A GPT sized from its shape opens no data; its token files must exist all the same.
  const std::string gpt =
      "[model]\nname = \"gpt\"\nn_layer = 2\nn_head = 2\nn_embd = 64\nseq_len = 32\nvocab = 256\n"
      "[data]\nkind = \"tokens\"\npath = \"" +
      dir.file("missing.bin") + "\"\n[train]\nsteps = 10\nglobal_batch = 8\n";
  expect_refused(gpt, {}, "data.path: file \"" + dir.file("missing.bin") + "\" does not exist");
  expect_refused(gpt, {"data.path=\"" + dir.file("shard_*.bin") + "\""},
                 "data.path: no file matches \"" + dir.file("shard_*.bin") + "\"");
  test::write_file(dir.file("shard_0.bin"), std::string(4096, '\0'));
  expect_refused(gpt,
                 {"data.path=\"" + dir.file("shard_*.bin") + "\"", "data.eval_path=\"" + dir.file("val.bin") + "\""},
                 "data.eval_path: file \"" + dir.file("val.bin") + "\" does not exist");
  EXPECT_TRUE(fake.calls.empty());
}

// A cancel the scheduler refuses: exit 1 (runtime), the stage stays queued, the chain running.
TEST(SubmitChain, CancelThatFailsSaysSoAndKeepsTheChain) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  o.stages = "2";
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0);
  fake.answer = [](const std::vector<std::string>& argv) -> std::optional<std::string> {
    if (argv[0] == "scancel" && argv[1] == "101")
      return std::string("scancel: error: Unable to contact slurm controller (connect failure)\ngtrain-rc=1");
    return std::nullopt;
  };
  std::ostringstream cancel;
  try {
    cancel_command(o.run_dir, fake.runner(), cancel);
    ADD_FAILURE() << "cancel succeeded\n" << cancel.str();
  } catch (const ConfigError& e) {
    ADD_FAILURE() << "a failed scancel is not bad input: " << e.what();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 1);
    EXPECT_NE(std::string(e.what()).find("1 job(s) could not be cancelled"), std::string::npos) << e.what();
  }
  EXPECT_NE(cancel.str().find("gtrain cancel: 1 job(s) cancelled"), std::string::npos) << cancel.str();
  const Chain c = read_chain(o.run_dir);
  EXPECT_EQ(c.state, ChainState::running);
  EXPECT_EQ(c.stages[0].state, StageState::cancelled);
  EXPECT_EQ(c.stages[1].state, StageState::queued);
}

// Stages --stages auto adds follow the quota windows as the first ones did: one that would start
// outside every window gets --begin at the next opening, and (without --gpus) the cap of the window
// it starts in, put on the sbatch command line (it used to copy stage 1's size and start at once).
TEST(SubmitChain, AutoStagesFollowTheQuotaWindows) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  test::write_file(o.config_path,
                   std::string(kMlp) +
                       "[[schedule.window]]\ndays = \"mon-fri\"\nhours = \"08:00-20:00\"\nmax_gpus = 8\n"
                       "[[schedule.window]]\ndays = \"mon-fri\"\nhours = \"20:00-08:00\"\nmax_gpus = 32\n");
  o.launcher = "srun";
  std::ostringstream out;
  // Every window's size is checked at submit, whenever it runs: 16 samples cannot fill 32 GPUs.
  try {
    submit_command(o, {}, fake.runner(), out);
    ADD_FAILURE() << "a global batch of 16 accepted for the night window's 32 GPUs";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot be split evenly over dp = 32"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(fake.calls.empty());
  o.sets = {"train.global_batch=64"};
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0) << out.str();
  auto local = [](int mday, int hour) {
    std::tm tm{};
    tm.tm_year = 126, tm.tm_mon = 11, tm.tm_mday = mday, tm.tm_hour = hour, tm.tm_isdst = -1;
    return static_cast<double>(std::mktime(&tm));
  };
  // Stage 1 saves on Saturday 2026-12-05 at 09:00: no window until Monday 08:00, the day's 8 GPUs.
  std::string what = chain_step(o.run_dir, 1, 3, "100", fake.runner(), local(5, 9));
  EXPECT_NE(what.find("begin 2026-12-07T08:00:00 (the next quota window)"), std::string::npos) << what;
  Chain c = read_chain(o.run_dir);
  ASSERT_EQ(c.stages.size(), 2u);
  EXPECT_EQ(c.stages[1].begin, "2026-12-07T08:00:00");
  EXPECT_EQ(c.stages[1].gpus, 8);
  auto has = [](const std::vector<std::string>& call, const std::string& arg) {
    return std::count(call.begin(), call.end(), arg);
  };
  EXPECT_EQ(has(fake.calls.back(), "--begin=2026-12-07T08:00:00"), 1);
  // Stage 2 saves on Tuesday at 21:00, inside the night window: no wait, 32 GPUs, srun's 32 tasks.
  what = chain_step(o.run_dir, 2, 3, "101", fake.runner(), local(8, 21));
  EXPECT_NE(what.find("32 GPU(s) (the quota window's max_gpus)"), std::string::npos) << what;
  EXPECT_EQ(what.find("begin"), std::string::npos) << what;
  c = read_chain(o.run_dir);
  ASSERT_EQ(c.stages.size(), 3u);
  EXPECT_EQ(c.stages[2].gpus, 32);
  EXPECT_EQ(c.stages[2].begin, "");
  const auto& call = fake.calls.back();
  EXPECT_EQ(has(call, "--gpus-per-node=32"), 1);
  EXPECT_EQ(has(call, "--ntasks-per-node=32"), 1);
  EXPECT_EQ(has(call, "--gpus-per-node=8"), 0) << "the previous stage's size is replaced, not repeated";
  EXPECT_EQ(call.back(), o.run_dir + "/stage-1.sbatch");
  // Stage 3 saves on Thursday at 07:57, ahead of the night window's close: stage 4 is for the day
  // window that follows (it was sized and timed for the closing one, and ended at once or waited).
  what = chain_step(o.run_dir, 3, 3, "102", fake.runner(), local(10, 7) + 57 * 60);
  EXPECT_NE(what.find("begin 2026-12-10T08:00:00 (the next quota window)"), std::string::npos) << what;
  EXPECT_NE(what.find("8 GPU(s) (the quota window's max_gpus)"), std::string::npos) << what;
  EXPECT_EQ(read_chain(o.run_dir).stages[3].gpus, 8);
  // PBS: the new size is a new select chunk, with the cores --cpus-per-gpu asked for (kept in chain.json).
  SubmitOptions p = o;
  p.run_dir = dir.path() + "/run-pbs";
  p.scheduler = "pbs";
  p.launcher = "mpirun";
  p.cpus_per_gpu = 4;
  ASSERT_EQ(submit_command(p, {}, fake.runner(), out), 0) << out.str();
  EXPECT_NE(test::read_file(p.run_dir + "/stage-1.pbs").find("#PBS -l select=1:ngpus="), std::string::npos);
  EXPECT_EQ(read_chain(p.run_dir).cpus_per_gpu, 4);
  // Stage 2 waits for Monday's day window: 8 GPUs (stage 1 had the window of the hour the test runs).
  chain_step(p.run_dir, 1, 3, read_chain(p.run_dir).stages[0].job, fake.runner(), local(5, 9));
  EXPECT_EQ(read_chain(p.run_dir).stages[1].gpus, 8);
  what = chain_step(p.run_dir, 2, 3, read_chain(p.run_dir).stages[1].job, fake.runner(), local(8, 21));
  EXPECT_NE(what.find("32 GPU(s) (the quota window's max_gpus)"), std::string::npos) << what;
  EXPECT_EQ(has(fake.calls.back(), "select=1:ngpus=32:ncpus=128:mpiprocs=32"), 1);
}

// After gtrain cancel, the stage still running (scancel TERMs it: it saves and exits 3) reports
// through chain-step, which records it and submits nothing more, even for --stages auto.
TEST(SubmitChain, CancelledAutoChainSubmitsNoMoreStages) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0);
  std::ostringstream cancel;
  EXPECT_EQ(cancel_command(o.run_dir, fake.runner(), cancel), 0);
  const std::string what = chain_step(o.run_dir, 1, 3, "100", fake.runner());
  EXPECT_EQ(what,
            "stage 1 ended (exit 3) after gtrain cancel; nothing more is submitted (resume with gtrain submit again)");
  EXPECT_EQ(fake.count("sbatch"), 1);
  const Chain c = read_chain(o.run_dir);
  EXPECT_EQ(c.state, ChainState::cancelled);
  ASSERT_EQ(c.stages.size(), 1u);
  EXPECT_EQ(c.stages[0].state, StageState::resumable);
  EXPECT_EQ(c.stages[0].exit, 3);
}

// gtrain cancel asks a running stage to save first (scancel --batch --signal=USR1, which the script
// passes to gtrain run as at the time limit) and cancels the waiting ones; --now cancels it outright.
// A stage requeued after it saved (chain.json: resumable, the scheduler: PENDING) is cancelled too.
TEST(SubmitChain, CancelAsksTheRunningStageToSaveFirst) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  o.stages = "3";
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0);
  std::string squeue = "100 RUNNING\n101 PENDING\n102 PENDING\n";
  fake.answer = [&](const std::vector<std::string>& argv) -> std::optional<std::string> {
    if (argv[0] == "squeue") return squeue + "gtrain-rc=0";
    return std::nullopt;
  };
  std::ostringstream cancel;
  EXPECT_EQ(cancel_command(o.run_dir, fake.runner(), cancel), 0) << cancel.str();
  const auto called = [&](const std::vector<std::string>& argv) {
    return std::count(fake.calls.begin(), fake.calls.end(), argv);
  };
  EXPECT_EQ(called({"scancel", "--batch", "--signal=USR1", "100"}), 1);
  EXPECT_EQ(called({"scancel", "100"}), 0) << "the running stage is not cancelled before it saved";
  EXPECT_EQ(called({"scancel", "101"}), 1);
  EXPECT_EQ(called({"scancel", "102"}), 1);
  EXPECT_NE(cancel.str().find("stage 1 job 100: running: asked to save and stop (USR1)"), std::string::npos)
      << cancel.str();
  EXPECT_NE(cancel.str().find("gtrain cancel: 2 job(s) cancelled, 1 running stage(s) saving before they stop"),
            std::string::npos)
      << cancel.str();
  Chain c = read_chain(o.run_dir);
  EXPECT_EQ(c.state, ChainState::cancelled);
  EXPECT_EQ(c.stages[0].state, StageState::queued) << "until its chain-step reports";
  EXPECT_EQ(c.stages[1].state, StageState::cancelled);
  // The stage saves and reports: recorded, nothing more submitted.
  EXPECT_NE(chain_step(o.run_dir, 1, 3, "100", fake.runner()).find("after gtrain cancel"), std::string::npos);
  EXPECT_EQ(read_chain(o.run_dir).stages[0].state, StageState::resumable);
  // Slurm requeued it (--requeue): it waits again though chain.json says resumable. A new submit is
  // refused while it exists, and cancel cancels it, outright with --now even when it runs.
  squeue = "100 PENDING\n";
  try {
    submit_command(o, {}, fake.runner(), out);
    ADD_FAILURE() << "submit must refuse while job 100 waits";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("a chain still has stage 1 (job 100, PENDING)"), std::string::npos)
        << e.what();
  }
  squeue = "100 RUNNING\n";
  cancel.str("");
  EXPECT_EQ(cancel_command(o.run_dir, fake.runner(), cancel, /*now=*/true), 0) << cancel.str();
  EXPECT_EQ(called({"scancel", "100"}), 1);
  EXPECT_EQ(read_chain(o.run_dir).stages[0].state, StageState::cancelled);
  chain_step(o.run_dir, 1, 205, "100", fake.runner());  // what the kill left of gtrain run
  EXPECT_EQ(read_chain(o.run_dir).stages[0].state, StageState::cancelled);
  EXPECT_EQ(read_chain(o.run_dir).stages[0].exit, 205);
  // Once the scheduler has none of the chain's jobs, submit starts a new chain.
  squeue = "";
  EXPECT_EQ(submit_command(o, {}, fake.runner(), out), 0) << out.str();
  EXPECT_EQ(read_chain(o.run_dir).state, ChainState::running);
}

// PBS: a running stage (qstat -f: job_state = R) gets qsig -s USR1; a queued one qdel.
TEST(SubmitChain, PbsCancelSignalsTheRunningStage) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  o.scheduler = "pbs";
  o.stages = "2";
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0);
  fake.answer = [](const std::vector<std::string>& argv) -> std::optional<std::string> {
    if (argv[0] == "qstat" && argv.size() == 3)
      return std::string("Job Id: ") + argv[2] + "\n    job_state = " + (argv[2] == "100.pbs01" ? "R" : "Q") +
             "\ngtrain-rc=0";
    if (argv[0] == "qsig") return std::string("gtrain-rc=0");
    return std::nullopt;
  };
  std::ostringstream cancel;
  EXPECT_EQ(cancel_command(o.run_dir, fake.runner(), cancel), 0) << cancel.str();
  EXPECT_EQ(
      std::count(fake.calls.begin(), fake.calls.end(), std::vector<std::string>{"qsig", "-s", "USR1", "100.pbs01"}), 1);
  EXPECT_EQ(std::count(fake.calls.begin(), fake.calls.end(), std::vector<std::string>{"qdel", "101.pbs01"}), 1);
  EXPECT_EQ(std::count(fake.calls.begin(), fake.calls.end(), std::vector<std::string>{"qdel", "100.pbs01"}), 0);
}

// A job that is not the chain's stage (an earlier chain's, requeued or still saving) leaves chain.json
// alone; chain-step waits for a cancel or submit that holds the chain's lock, so neither writes back a
// stale copy over the other's changes.
TEST(SubmitChain, StepOfAnotherChainsJobAndConcurrentChangesAreSafe) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0);
  const std::string before = test::read_file(o.run_dir + "/chain.json");
  EXPECT_EQ(chain_step(o.run_dir, 1, 2, "77", fake.runner()),
            "job 77 is not in this run directory's chain (its stage 1 is job 100); chain.json unchanged");
  EXPECT_EQ(test::read_file(o.run_dir + "/chain.json"), before);
  std::string what;
  std::optional<ChainLock> held;
  held.emplace(o.run_dir);
  std::thread step([&] { what = chain_step(o.run_dir, 1, 3, "100", fake.runner()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_EQ(test::read_file(o.run_dir + "/chain.json"), before) << "chain-step must wait for the lock";
  Chain changed = read_chain(o.run_dir);
  changed.reason = "changed under the lock";
  write_chain(o.run_dir, changed);
  held.reset();
  step.join();
  EXPECT_NE(what.find("submitted stage 2"), std::string::npos) << what;
  const Chain c = read_chain(o.run_dir);
  EXPECT_EQ(c.reason, "changed under the lock") << "chain-step read the chain after the change";
  EXPECT_EQ(c.stages.size(), 2u);
}

// PBS_JOBID may carry the server's full name where qsub answered with its short one: the same job.
TEST(SubmitChain, PbsJobIdsMatchWithTheServersFullName) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  o.scheduler = "pbs";
  o.stages = "2";
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0);
  ASSERT_EQ(read_chain(o.run_dir).stages[0].job, "100.pbs01");
  EXPECT_NE(chain_step(o.run_dir, 1, 3, "100.pbs01.example.org", fake.runner()).find("stage 2 continues"),
            std::string::npos);
  EXPECT_EQ(read_chain(o.run_dir).stages[0].state, StageState::resumable);
  EXPECT_NE(chain_step(o.run_dir, 2, 0, "7.pbs01", fake.runner()).find("not in this run directory's chain"),
            std::string::npos);
  EXPECT_EQ(read_chain(o.run_dir).stages[1].state, StageState::queued);
}

// A chain that had ended (stopped, failed) when a stage Slurm requeued reports again: the result is
// recorded and nothing more is submitted, even for --stages auto; gtrain cancel of such a stage marks
// the chain cancelled.
TEST(SubmitChain, EndedChainSubmitsNothingForARequeuedStage) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0);
  Chain c = read_chain(o.run_dir);
  c.state = ChainState::failed;
  c.reason = "set by the test";
  write_chain(o.run_dir, c);
  const std::string what = chain_step(o.run_dir, 1, 3, "100", fake.runner());
  EXPECT_NE(what.find("after the chain ended (failed); nothing more is submitted"), std::string::npos) << what;
  EXPECT_EQ(fake.count("sbatch"), 1);
  EXPECT_EQ(read_chain(o.run_dir).stages[0].state, StageState::resumable);
  fake.answer = [](const std::vector<std::string>& argv) -> std::optional<std::string> {
    if (argv[0] == "squeue") return std::string("100 RUNNING\ngtrain-rc=0");
    return std::nullopt;
  };
  std::ostringstream cancel;
  EXPECT_EQ(cancel_command(o.run_dir, fake.runner(), cancel), 0) << cancel.str();
  EXPECT_EQ(read_chain(o.run_dir).state, ChainState::cancelled) << cancel.str();
}

// submit refuses a run directory a gtrain run works in now: its stages could not start.
TEST(SubmitChain, RefusesARunDirectoryInUse) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  fs::create_directories(o.run_dir);
  const auto lock = RunLock::acquire(o.run_dir, "");
  std::ostringstream out;
  try {
    submit_command(o, {}, fake.runner(), out);
    ADD_FAILURE() << "submit must refuse a run directory in use";
  } catch (const BusyError& e) {
    EXPECT_NE(std::string(e.what()).find("is in use by another gtrain run"), std::string::npos) << e.what();
  }
  EXPECT_EQ(fake.count("sbatch"), 0);
  EXPECT_FALSE(chain_exists(o.run_dir));
}

// A --time beyond the partition's MaxTime would pend for ever (PartitionTimeLimit): refused before
// anything is written, naming both.
TEST(SubmitChain, TimeBeyondThePartitionsMaxTimeIsRefused) {
  test::TempDir dir;
  FakeScheduler fake;
  fake.answer = [](const std::vector<std::string>& argv) -> std::optional<std::string> {
    if (argv[0] == "scontrol")
      return std::string(
          "PartitionName=gpu MaxTime=UNLIMITED State=UP\n"
          "PartitionName=debug Default=YES MaxTime=00:02:00 State=UP\n");
    return std::nullopt;
  };
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  o.time = "00:05:00";
  std::ostringstream out;
  try {
    submit_command(o, {}, fake.runner(), out);
    ADD_FAILURE() << "accepted a --time the default partition never runs";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--time 00:05:00 exceeds partition debug's MaxTime 00:02:00"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(fake.count("sbatch"), 0);
  EXPECT_FALSE(fs::exists(o.run_dir));
  o.partition = "gpu";  // unlimited
  EXPECT_EQ(submit_command(o, {}, fake.runner(), out), 0) << out.str();
  o.run_dir = dir.path() + "/run2";
  o.partition.clear();
  o.time = "00:02:00";
  EXPECT_EQ(submit_command(o, {}, fake.runner(), out), 0) << out.str();
}

// A stage killed outright (no chain-step) stays "queued" in chain.json: when the scheduler says it
// no longer knows the job, cancel marks it ended instead of failing forever, and a new submit is
// not refused for it. A scheduler that cannot be asked still counts as queued.
TEST(SubmitChain, StageThatDiedWithoutReportingDoesNotHoldTheChain) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  o.stages = "2";
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0);
  bool squeue_answers = false;
  fake.answer = [&](const std::vector<std::string>& argv) -> std::optional<std::string> {
    if (argv[0] == "scancel" && argv[1] == "100")
      return std::string("scancel: error: Kill job error on job id 100: Invalid job id specified\ngtrain-rc=1");
    if (argv[0] == "squeue" && argv[3] == "100")
      return squeue_answers ? std::string("slurm_load_jobs error: Invalid job id specified\ngtrain-rc=1")
                            : std::string("bash: squeue: command not found\ngtrain-rc=127");
    return std::nullopt;
  };
  std::ostringstream cancel;
  EXPECT_THROW(cancel_command(o.run_dir, fake.runner(), cancel), Error) << "squeue could not be asked";
  EXPECT_EQ(read_chain(o.run_dir).stages[0].state, StageState::queued);
  squeue_answers = true;
  cancel.str("");
  EXPECT_EQ(cancel_command(o.run_dir, fake.runner(), cancel), 0) << cancel.str();
  EXPECT_NE(cancel.str().find("stage 1 job 100: already ended without reporting (scancel: error: Kill job error on "
                              "job id 100: Invalid job id specified)"),
            std::string::npos)
      << cancel.str();
  Chain c = read_chain(o.run_dir);
  EXPECT_EQ(c.state, ChainState::cancelled);
  EXPECT_EQ(c.stages[0].state, StageState::ended);
  EXPECT_EQ(c.stages[1].state, StageState::cancelled);
  // A chain whose only queued stage the scheduler no longer lists (squeue prints no state) is over.
  c.stages[1].state = StageState::queued;
  write_chain(o.run_dir, c);
  fake.answer = [](const std::vector<std::string>& argv) -> std::optional<std::string> {
    if (argv[0] == "squeue") return std::string("gtrain-rc=0");
    return std::nullopt;
  };
  EXPECT_EQ(submit_command(o, {}, fake.runner(), out), 0) << out.str();
  EXPECT_EQ(read_chain(o.run_dir).state, ChainState::running);
}

// gtrain status shows the scheduler's whole reason, spaces and all, for each stage.
TEST(SubmitChain, StatusKeepsReasonsWithSpaces) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  o.stages = "2";
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0);
  fake.answer = [](const std::vector<std::string>& argv) -> std::optional<std::string> {
    if (argv[0] == "squeue")
      return std::string("100 PENDING ReqNodeNotAvail, UnavailableNodes:gpu[01-02]\n101 PENDING Dependency\n");
    return std::nullopt;
  };
  std::ostringstream status;
  print_chain_status(o.run_dir, fake.runner(), status);
  EXPECT_EQ(status.str().find("node(s)  running"), std::string::npos) << status.str();
  EXPECT_NE(status.str().find("queued  scheduler: PENDING (ReqNodeNotAvail, UnavailableNodes:gpu[01-02])"),
            std::string::npos)
      << status.str();
  EXPECT_NE(status.str().find("job 101  1 GPU(s) on 1 node(s)  queued  scheduler: PENDING (Dependency)"),
            std::string::npos)
      << status.str();
  // A stage the scheduler runs shows as running (chain.json still says queued until it reports).
  fake.answer = [](const std::vector<std::string>& argv) -> std::optional<std::string> {
    if (argv[0] == "squeue") return std::string("100 RUNNING None\n101 PENDING Dependency\n");
    return std::nullopt;
  };
  std::ostringstream running;
  print_chain_status(o.run_dir, fake.runner(), running);
  EXPECT_NE(running.str().find("job 100  1 GPU(s) on 1 node(s)  running  scheduler: RUNNING\n"), std::string::npos)
      << running.str();
  EXPECT_NE(running.str().find("job 101  1 GPU(s) on 1 node(s)  queued  scheduler: PENDING (Dependency)"),
            std::string::npos)
      << running.str();
  EXPECT_EQ(read_chain(o.run_dir).stages[0].state, StageState::queued);
  // A stage neither squeue nor sacct knows any more ended without reporting: not shown as queued.
  fake.answer = [](const std::vector<std::string>& argv) -> std::optional<std::string> {
    if (argv[0] == "squeue") return std::string("101 PENDING Dependency\n");
    return std::nullopt;
  };
  std::ostringstream gone;
  print_chain_status(o.run_dir, fake.runner(), gone);
  EXPECT_NE(gone.str().find("job 100  1 GPU(s) on 1 node(s)  queued  scheduler: gone (neither queued nor running; its "
                            "script did not report)"),
            std::string::npos)
      << gone.str();
  EXPECT_NE(gone.str().find("job 101  1 GPU(s) on 1 node(s)  queued  scheduler: PENDING (Dependency)"),
            std::string::npos)
      << gone.str();
}

// sbatch that cannot reach the controller is a runtime failure (exit 1) with sbatch's message, not
// a refusal of the job's options (exit 2).
TEST(SubmitChain, UnreachableControllerIsARuntimeError) {
  // A controller that does not answer, and a Slurm installed without a configuration to find it.
  for (const std::string message :
       {"sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)",
        "sbatch: error: resolve_ctls_from_dns_srv: res_nsearch error: Unknown host\nsbatch: error: fetch_config: DNS "
        "SRV lookup failed\nsbatch: error: _establish_config_source: failed to fetch config\nsbatch: fatal: Could "
        "not establish a configuration source"}) {
    test::TempDir dir;
    FakeScheduler fake;
    fake.answer = [message](const std::vector<std::string>& argv) -> std::optional<std::string> {
      if (argv[0] == "sbatch") return message + "\ngtrain-rc=1";
      return std::nullopt;
    };
    SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
    std::ostringstream out;
    try {
      submit_command(o, {}, fake.runner(), out);
      ADD_FAILURE() << "accepted";
    } catch (const ConfigError& e) {
      ADD_FAILURE() << "reported as bad input: " << e.what();
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 1);
      const std::string what = e.what();
      EXPECT_EQ(what.rfind("sbatch could not submit stage 1 (scheduler unreachable, exit 1)", 0), 0u) << what;
      EXPECT_NE(what.find("\n" + message), std::string::npos) << what;
    }
    EXPECT_EQ(fake.count("sbatch"), 1) << "no --test-only probing of a scheduler that is not there";
    EXPECT_EQ(read_chain(o.run_dir).state, ChainState::failed);
  }
}

// PBS: no QOS; a log per stage; the summary says how a stage stops (no early signal on PBS).
TEST(SubmitChain, PbsQosLogsAndStopping) {
  test::TempDir dir;
  FakeScheduler fake;
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  o.scheduler = "pbs";
  o.qos = "high";
  EXPECT_THROW(
      {
        try {
          validate_submit_options(o);
        } catch (const ConfigError& e) {
          EXPECT_NE(std::string(e.what()).find("--qos 'high': PBS has no QOS"), std::string::npos) << e.what();
          throw;
        }
      },
      ConfigError);
  o.qos.clear();
  o.stages = "auto";
  o.time = "01:00:00";
  o.signal_lead_s = 45;
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out), 0) << out.str();
  EXPECT_EQ(out.str().find("USR1"), std::string::npos) << out.str();
  // One lead: the deadline is the walltime less the exit margin (here --signal-lead 45); gtrain run
  // itself saves ahead of it by its measured save time.
  EXPECT_NE(out.str().find("gtrain run --time-limit 3555s less the script's start-up (PBS sends no early signal"),
            std::string::npos)
      << out.str();
  const std::string script = test::read_file(o.run_dir + "/stage-1.pbs");
  EXPECT_NE(script.find("TIME_LIMIT=$(( 3555 - SECONDS ))"), std::string::npos) << script;
  EXPECT_NE(script.find("#PBS -l walltime=01:00:00\n"), std::string::npos) << script;
  chain_step(o.run_dir, 1, 3, "100.pbs01", fake.runner());  // auto: one more stage
  ASSERT_EQ(fake.count("qsub"), 2);
  auto output_of = [](const std::vector<std::string>& call) {
    auto it = std::find(call.begin(), call.end(), "-o");
    return it == call.end() ? std::string() : *(it + 1);
  };
  EXPECT_EQ(output_of(fake.calls[0]), o.run_dir + "/pbs-stage-1.out");
  EXPECT_EQ(output_of(fake.calls.back()), o.run_dir + "/pbs-stage-2.out");
  o.signal_lead_s = 0;  // the default exit margin, 30 s
  o.run_dir = dir.path() + "/run2";
  std::ostringstream out2;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out2), 0) << out2.str();
  EXPECT_NE(test::read_file(o.run_dir + "/stage-1.pbs").find("TIME_LIMIT=$(( 3570 - SECONDS ))"), std::string::npos);
  // PBS walltime has no days: Slurm's D-HH:MM:SS is written as hours.
  o.time = "1-00:30:00";
  o.run_dir = dir.path() + "/run3";
  std::ostringstream out3;
  ASSERT_EQ(submit_command(o, {}, fake.runner(), out3), 0) << out3.str();
  EXPECT_NE(test::read_file(o.run_dir + "/stage-1.pbs").find("#PBS -l walltime=24:30:00\n"), std::string::npos);
}
