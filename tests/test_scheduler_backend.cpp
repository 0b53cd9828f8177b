// test_scheduler_backend.cpp: the SchedulerBackend registry (the ordered detection list, the one
// name table, "does not support" defaults), and a tiny fake backend added as a new scheduler is:
// one class in one file, one line in the detection list (here the test hook), nothing else edited.
#include <gtest/gtest.h>

#include <sstream>

#include <nlohmann/json.hpp>

#include "launcher/chain/chain.h"
#include "launcher/commands/submit_command.h"
#include "launcher/scheduler/allocation.h"
#include "launcher/scheduler/discovery.h"
#include "launcher/scheduler/scheduler_backend.h"
#include "runtime/core/errors.h"
#include "tests/support/submit_fixture.h"
#include "tests/support/test_util.h"

using namespace gtrain;
using namespace gtrain::submit_test;

namespace {

std::string config_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

// A new scheduler in one class: "flux"-like commands, detected by FAKE_JOB_ID. SchedulerKind comes
// from the detection list's line; the test hook puts it first, so it stands in for slurm's kind.
class FakeFluxBackend : public SchedulerBackend {
 public:
  SchedulerKind kind() const override { return SchedulerKind::slurm; }
  bool detect(const std::map<std::string, std::string>& env) const override { return env.count("FAKE_JOB_ID") > 0; }
  void discover(DiscoveryContext& ctx) const override {
    ctx.a->job_id = ctx.str("FAKE_JOB_ID");
    ctx.a->nodes = {{"f1", {}, 8, 1}, {"f2", {}, 8, 1}};
    assign_gpus(ctx.a, 0, {0, 1}, 2, false);
  }
  bool can_submit() const override { return true; }
  std::string submit_program() const override { return "flux"; }
  std::string script_suffix() const override { return ".flux"; }
  std::string job_id_variable() const override { return "FAKE_JOB_ID"; }
  std::string script_directives(const BatchStage& s) const override {
    return "#!/bin/bash\n#FLUX: -N " + std::to_string(s.nodes) + " -g " + std::to_string(s.gpus / s.nodes) + "\n";
  }
  bool signals_before_limit() const override { return true; }
  std::string time_limit_text(int64_t seconds) const override { return std::to_string(seconds) + "s"; }
  std::vector<std::string> submit_argv(const SubmitRequest& r) const override {
    return {"flux", "batch", "--job-name=" + r.job_name, r.script};
  }
  std::vector<std::string> dependency_args(const std::string& after_job) const override {
    return {"--dependency=afterany:" + after_job};
  }
  std::string begin_time(double unix_time) const override { return std::to_string(static_cast<int64_t>(unix_time)); }
  std::vector<std::string> begin_args(const std::string& begin) const override { return {"--begin-time=" + begin}; }
  std::vector<std::string> stage_env_args(int stage_index) const override {
    return {"--env=GTRAIN_STAGE=" + std::to_string(stage_index)};
  }
  std::vector<std::string> cancel_argv(const std::string& job) const override { return {"flux", "cancel", job}; }
  std::vector<std::string> signal_argv(const std::string& job) const override {
    return {"flux", "kill", "-s", "USR1", job};
  }
  std::string kill_grace_name() const override { return "the kill timeout"; }
  std::optional<std::map<std::string, JobState>> job_states(const std::vector<std::string>& jobs,
                                                            const CommandRunner& run) const override {
    std::vector<std::string> argv = {"flux", "jobs"};
    argv.insert(argv.end(), jobs.begin(), jobs.end());
    const CommandOutput r = run_merged(run, argv);
    if (r.rc != 0) return std::nullopt;
    std::map<std::string, JobState> out;
    std::istringstream in(r.text);
    std::string id, state;
    while (in >> id >> state) out[id] = {state == "RUN" ? JobPhase::running : JobPhase::pending, state};
    return out;
  }
  bool job_gone(const std::string&, const CommandRunner&) const override { return false; }
};

}  // namespace

TEST(SchedulerBackend, OneOrderedDetectionListAndOneNameTable) {
  std::vector<std::string> names;
  for (const SchedulerBackend* b : scheduler_backends()) names.push_back(b->name());
  EXPECT_EQ(names, (std::vector<std::string>{"slurm", "pbs", "lsf", "cuda_env", "local"}));
  for (const SchedulerBackend* b : scheduler_backends()) {
    EXPECT_EQ(scheduler_from_name(b->name()), b->kind());
    EXPECT_EQ(&scheduler_backend(b->kind()), b);
    EXPECT_EQ(find_scheduler_backend(b->name()), b);
  }
  EXPECT_FALSE(scheduler_from_name("flux").has_value());
  EXPECT_EQ(find_scheduler_backend("SLURM"), nullptr);
  // JSON and text hold the name, never the number.
  EXPECT_EQ(nlohmann::json(SchedulerKind::cuda_env), "cuda_env");
  EXPECT_EQ(nlohmann::json({{"scheduler", SchedulerKind::pbs}}).dump(), "{\"scheduler\":\"pbs\"}");
  std::ostringstream text;
  text << SchedulerKind::lsf;
  EXPECT_EQ(text.str(), "lsf");
}

TEST(SchedulerBackend, FirstBackendThatClaimsTheEnvironmentWins) {
  EXPECT_EQ(detect_scheduler({{"SLURM_JOB_ID", "1"}, {"PBS_JOBID", "2"}}).kind(), SchedulerKind::slurm);
  EXPECT_EQ(detect_scheduler({{"SLURM_JOBID", "1"}}).kind(), SchedulerKind::slurm);
  EXPECT_EQ(detect_scheduler({{"PBS_JOBID", "2"}, {"CUDA_VISIBLE_DEVICES", "0"}}).kind(), SchedulerKind::pbs);
  EXPECT_EQ(detect_scheduler({{"LSB_JOBID", "3"}, {"CUDA_VISIBLE_DEVICES", "0"}}).kind(), SchedulerKind::lsf);
  EXPECT_EQ(detect_scheduler({{"NVIDIA_VISIBLE_DEVICES", "all"}}).kind(), SchedulerKind::cuda_env);
  EXPECT_EQ(detect_scheduler({{"HOME", "/root"}}).kind(), SchedulerKind::local);
  EXPECT_TRUE(scheduler_backend(SchedulerKind::slurm).is_batch_scheduler());
  EXPECT_FALSE(scheduler_backend(SchedulerKind::cuda_env).is_batch_scheduler());
  EXPECT_FALSE(scheduler_backend(SchedulerKind::local).is_batch_scheduler());
}

TEST(SchedulerBackend, WhatABackendDoesNotSupportSaysSo) {
  const SchedulerBackend& lsf = scheduler_backend(SchedulerKind::lsf);
  EXPECT_FALSE(lsf.can_submit());
  EXPECT_EQ(config_error([&] {
              lsf.submit_argv({"gtrain-x", "/r", 1, "/r/stage-1"});
            }),
            "scheduler lsf does not support submitting jobs");
  EXPECT_EQ(config_error([&] { scheduler_backend(SchedulerKind::local).cancel_argv("1"); }),
            "scheduler local does not support cancelling jobs");
  EXPECT_EQ(config_error([&] { scheduler_backend(SchedulerKind::pbs).read_limits(Allocation{}, no_command_runner()); }),
            "scheduler pbs does not support reading limits");
  EXPECT_EQ(config_error([&] { scheduler_backend(SchedulerKind::cuda_env).job_states({"1"}, no_command_runner()); }),
            "scheduler cuda_env does not support job states");
  // Only the schedulers that can submit are offered to gtrain submit.
  SubmitOptions o;
  o.config_path = "x.toml";
  o.scheduler = "lsf";
  EXPECT_EQ(config_error([&] { validate_submit_options(o); }), "--scheduler 'lsf': expected slurm or pbs");
}

// The fake backend, put first in the detection list, is what discovery, submit, chain-step and
// cancel use: every scheduler command comes from the backend, none from a name compared elsewhere.
TEST(SchedulerBackend, FakeBackendAddedByOneClassAndOneLine) {
  const FakeFluxBackend flux;
  test::TempDir dir;
  const std::map<std::string, std::string> env = {{"FAKE_JOB_ID", "f7"}};
  DiscoveryOptions d;
  d.hardware = HardwareInfo{};
  d.read_limits = false;
  EXPECT_EQ(discover_allocation(env, no_command_runner(), d).scheduler, SchedulerKind::local);

  const ScopedSchedulerBackend line(flux);  // the one line
  const Allocation a = discover_allocation(env, no_command_runner(), d);
  EXPECT_EQ(a.job_id, "f7");
  EXPECT_EQ(a.total_gpus(), 4);
  EXPECT_EQ(a.cpu_ranks, 2) << "a batch scheduler's tasks";

  std::vector<std::vector<std::string>> calls;
  int next = 100;
  std::string states;
  const CommandRunner runner = [&](const std::vector<std::string>& wrapped) -> std::optional<std::string> {
    const std::vector<std::string> argv(wrapped.begin() + (wrapped[0] == "bash" ? 4 : 0), wrapped.end());
    calls.push_back(argv);
    if (argv[0] != "flux") return std::nullopt;
    if (argv[1] == "batch") return "f" + std::to_string(next++) + "\ngtrain-rc=0";
    if (argv[1] == "jobs") return states + "gtrain-rc=0";
    return std::string("gtrain-rc=0");
  };
  SubmitOptions o = mlp_submit(dir, dir.path() + "/run");
  o.stages = "2";
  o.gpus = "4";
  o.nodes = "2";
  std::ostringstream out;
  ASSERT_EQ(submit_command(o, {}, runner, out), 0) << out.str();
  const Chain c = read_chain(o.run_dir);
  ASSERT_EQ(c.stages.size(), 2u);
  EXPECT_EQ(c.stages[0].script, "stage-1.flux");
  EXPECT_EQ(test::read_file(o.run_dir + "/stage-1.flux").rfind("#!/bin/bash\n#FLUX: -N 2 -g 2\n", 0), 0u);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_EQ(calls[0], (std::vector<std::string>{"flux", "batch", "--job-name=gtrain-mlp", "--env=GTRAIN_STAGE=1",
                                                o.run_dir + "/stage-1.flux"}));
  EXPECT_EQ(calls[1], (std::vector<std::string>{"flux", "batch", "--job-name=gtrain-mlp", "--dependency=afterany:f100",
                                                "--env=GTRAIN_STAGE=2", o.run_dir + "/stage-2.flux"}));
  EXPECT_NE(out.str().find("stage 2 submitted as job f101"), std::string::npos) << out.str();

  EXPECT_EQ(chain_step(o.run_dir, 1, 3, "f100", runner), "stage 1 saved; stage 2 continues");
  states = "f101 RUN\n";
  calls.clear();
  std::ostringstream cancel;
  EXPECT_EQ(cancel_command(o.run_dir, runner, cancel), 0);
  EXPECT_EQ(calls.back(), (std::vector<std::string>{"flux", "kill", "-s", "USR1", "f101"})) << cancel.str();
  EXPECT_EQ(read_chain(o.run_dir).state, ChainState::cancelled);
}

namespace {
// A runner that answers each program from `answers` (nullopt: the program fails or is missing),
// as run_merged's bash wrapper prints it: the output, then the exit code.
CommandRunner answering(std::map<std::string, std::optional<std::string>> answers, std::vector<std::string>* calls) {
  return [answers, calls](const std::vector<std::string>& argv) -> std::optional<std::string> {
    const std::string program = argv.size() > 4 ? argv[4] : argv.front();  // bash -c '"$@" 2>&1; ...' gtrain PROGRAM
    calls->push_back(program);
    auto it = answers.find(program);
    if (it == answers.end() || !it->second) return program + ": not found\ngtrain-rc=127";
    return *it->second + "gtrain-rc=0";
  };
}
}  // namespace

// gtrain report's queue waits for stages submitted by hand: Slurm's accounting, else the
// controller's job record; PBS's qstat -x; none elsewhere.
TEST(SchedulerBackend, SubmitTimesFromAccountingOrTheJobRecord) {
  std::tm tm{};
  tm.tm_year = 2026 - 1900, tm.tm_mon = 11, tm.tm_mday = 5, tm.tm_hour = 10, tm.tm_min = 37, tm.tm_sec = 20;
  tm.tm_isdst = -1;
  const double want = static_cast<double>(std::mktime(&tm));
  const auto& slurm = scheduler_backend(SchedulerKind::slurm);
  std::vector<std::string> calls;
  EXPECT_EQ(slurm.job_submit_time("42", answering({{"sacct", "2026-12-05T10:37:20\n"}}, &calls)), want);
  EXPECT_EQ(calls, (std::vector<std::string>{"sacct"}));
  calls.clear();  // no accounting storage: the controller's record
  EXPECT_EQ(slurm.job_submit_time("42", answering({{"sacct", std::nullopt},
                                                   {"scontrol",
                                                    "JobId=42 JobName=x SubmitTime=2026-12-05T10:37:20 "
                                                    "EligibleTime=2026-12-05T10:37:21\n"}},
                                                  &calls)),
            want);
  EXPECT_EQ(calls, (std::vector<std::string>{"sacct", "scontrol"}));
  calls.clear();
  EXPECT_EQ(slurm.job_submit_time("42", answering({{"sacct", ""}, {"scontrol", std::nullopt}}, &calls)), std::nullopt);
  const auto& pbs = scheduler_backend(SchedulerKind::pbs);
  EXPECT_EQ(pbs.job_submit_time("7.server", answering({{"qstat",
                                                        "Job Id: 7.server\n    job_state = F\n"
                                                        "    qtime = Sat Dec  5 10:37:20 2026\n"}},
                                                      &calls)),
            want);
  EXPECT_EQ(scheduler_backend(SchedulerKind::lsf).job_submit_time("3", answering({}, &calls)), std::nullopt);
  EXPECT_EQ(scheduler_backend(SchedulerKind::local).job_submit_time("", answering({}, &calls)), std::nullopt);
}
