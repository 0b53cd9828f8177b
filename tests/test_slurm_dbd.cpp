// test_slurm_dbd.cpp: `gtrain cluster` and the stages `gtrain submit` shapes, on a real Slurm with
// accounting (the harness with GTRAIN_SLURM_DBD=1: slurmdbd and MariaDB, accounts gtrain and team
// with GrpTRESMins quotas, QOS normal with MaxWall 4 h and gpu2 with 2 GPUs a job). Label slurm.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <map>
#include <thread>

#include <nlohmann/json.hpp>

#include "launcher/base/text_util.h"
#include "launcher/cluster/week_profile.h"
#include "launcher/scheduler/scheduler_limits.h"
#include "runtime/core/format.h"
#include "tests/support/slurm_cleanup.h"
#include "tests/support/test_paths.h"
#include "tests/support/test_util.h"

using namespace gtrain;
using Clock = std::chrono::steady_clock;

namespace {

std::string dbd_dir() {
  return test::test_path("GTRAIN_SLURM_DBD_DIR");
}

// Every client command (and the jobs) uses the accounting harness's config.
const bool kEnvSet = [] {
  setenv("SLURM_CONF", (dbd_dir() + "/etc/slurm.conf").c_str(), 1);
  setenv("OMP_NUM_THREADS", "1", 0);
  setenv("GTRAIN_PROFILE_DIR", (dbd_dir() + "/profile").c_str(), 1);  // the stages' samples
  return true;
}();

const bool kCleanupSet = test::cancel_leftover_jobs_after_each_test();

std::string gtrain_cmd(const std::string& args) {
  return std::string(GTRAIN_BINARY) + " " + args;
}

std::string format_local(int64_t t) {
  return text::local_time(static_cast<double>(t), "%a %Y-%m-%d %H:%M");
}
std::string text_begin(int64_t t) {
  return text::local_time(static_cast<double>(t), "%Y-%m-%dT%H:%M:%S");
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

nlohmann::json cluster_json(const std::string& args = "") {
  const auto r = test::run_command(gtrain_cmd("cluster --json --weeks 4 " + args));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return nlohmann::json::parse(r.output.substr(r.output.find('{')), nullptr, false);
}

const nlohmann::json& quota(const nlohmann::json& c, const std::string& kind, const std::string& name) {
  static const nlohmann::json none = nlohmann::json::object();
  for (const auto& q : c["quotas"])
    if (q.value("kind", "") == kind && q.value("name", "") == name) return q;
  return none;
}

// The accounting harness is up (its start skips without slurmdbd and MariaDB).
#define REQUIRE_ACCOUNTING()                                                                             \
  if (test::run_command("sacctmgr -n show cluster 2>&1").output.find("gtraintest") == std::string::npos) \
  GTEST_SKIP() << "no Slurm accounting harness (apt-get install slurmdbd mariadb-server)"

const char* kJob =
    "[model]\nname = \"mlp\"\nhidden = [16]\n[data]\nkind = \"synthetic\"\nsynthetic_samples = 64\n"
    "[train]\nglobal_batch = 16\nsteps = 4\nthreads = 1\n[log]\nprogress = \"none\"\n";

// The limits come from the real sacctmgr and scontrol; a job of 8 GPUs for 15 s is charged to account
// gtrain's GrpTRESMins and read back as used; sacct's history has it.
TEST(SlurmDbd, ClusterReadsRealLimitsAndAQuotaUsedByRealJobs) {
  REQUIRE_ACCOUNTING();
  const auto before = cluster_json();
  ASSERT_TRUE(before.is_object());
  EXPECT_EQ(before["partitions"][0]["gpus"], 8);
  EXPECT_EQ(quota(before, "QOS", "gpu2").value("max_gpus_per_job", -1), 2);
  EXPECT_EQ(quota(before, "QOS", "normal").value("max_wall", ""), "04:00:00");
  EXPECT_TRUE(quota(before, "QOS", "normal").value("default", false));
  EXPECT_EQ(quota(before, "account", "team").value("gpu_minutes_limit", -1), 60);
  const auto& gtrain = quota(before, "account", "gtrain");
  ASSERT_EQ(gtrain.value("gpu_minutes_limit", -1), 600) << before.dump(2);
  EXPECT_TRUE(gtrain.value("default", false));
  const int64_t used_before = gtrain.value("gpu_minutes_used", int64_t{-1});
  ASSERT_GE(used_before, 0);
  const auto job = test::run_command("sbatch --parsable -N2 --gpus-per-node=4 -t 5 --wrap 'sleep 15'");
  ASSERT_EQ(job.exit_code, 0) << job.output;
  // priority/multifactor counts use every minute: 8 GPUs x 15 s = 2 GPU-minutes.
  int64_t used = used_before;
  for (auto t0 = Clock::now(); Clock::now() - t0 < std::chrono::seconds(120) && used < used_before + 2;) {
    std::this_thread::sleep_for(std::chrono::seconds(3));
    used = quota(cluster_json(), "account", "gtrain").value("gpu_minutes_used", int64_t{-1});
  }
  EXPECT_GE(used, used_before + 2);
  EXPECT_LE(used, used_before + 3);
  const auto after = cluster_json();
  EXPECT_TRUE(after["history"]["read"].get<bool>());
  EXPECT_GE(after["history"]["jobs"].get<int>(), 1);
  const auto text = test::run_command(gtrain_cmd("cluster --weeks 1"));
  EXPECT_NE(text.output.find("  account gtrain (default): GrpTRESMins gres/gpu 600 GPU-minutes, "), std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("  QOS gpu2: MaxTRESPerJob gres/gpu 2"), std::string::npos) << text.output;
  // A maintenance window tomorrow is a time rule the partition does not show: gtrain cluster lists it.
  const auto made = test::run_command(
      "scontrol create reservation reservationname=gtrain_maint starttime=now+1day duration=120 nodes=ALL "
      "users=root flags=maint,ignore_jobs");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const auto listed = test::run_command(gtrain_cmd("cluster --weeks 1"));
  test::run_command("scontrol delete reservationname=gtrain_maint");
  EXPECT_NE(listed.output.find("  gtrain_maint (maintenance: its nodes run no job): "), std::string::npos)
      << listed.output;
  EXPECT_NE(listed.output.find(" on node[1-2] (2 nodes)\n"), std::string::npos) << listed.output;
}

// --time auto: 6 GPUs are held for 30 minutes, so only 2 (on node2) start now; QOS normal caps a job
// at 4 hours. The stage is shaped 2 GPUs x 04:00:00 and starts within the minute predicted.
TEST(SlurmDbd, TimeAutoStageStartsWhereTheTestSubmissionSaidWithinAMinute) {
  REQUIRE_ACCOUNTING();
  test::TempDir dir;
  test::write_file(dir.file("job.toml"), kJob);
  for (const char* hold : {"sbatch --parsable -N1 -w node1 --gpus-per-node=4 -t 30 --wrap 'sleep 600'",
                           "sbatch --parsable -N1 -w node2 --gpus-per-node=2 -t 30 --wrap 'sleep 600'"})
    ASSERT_EQ(test::run_command(hold).exit_code, 0);
  for (int i = 0; i < 100 && trimmed(test::run_command("squeue -h -t R -o %i | wc -l").output) != "2"; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const std::string run = dir.file("run");
  const auto r = test::run_command(
      gtrain_cmd("submit " + dir.file("job.toml") + " --run-dir " + run + " --gpus 2-8 --time auto --stages 1"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("chosen: 2 GPU(s) x 04:00:00, the largest that starts now"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("  8 GPU(s) x "), std::string::npos) << r.output;
  const auto chain = nlohmann::json::parse(test::read_file(run + "/chain.json"));
  const std::string job = chain["stages"][0].value("job", "");
  ASSERT_FALSE(job.empty());
  const double submitted = chain["stages"][0].value("submitted", 0.0);
  double started = 0;
  for (auto t0 = Clock::now(); Clock::now() - t0 < std::chrono::seconds(90) && started == 0;) {
    const auto s = trimmed(test::run_command("sacct -n -X -P -j " + job + " --format=Start").output);
    if (!s.empty() && s != "Unknown" && s != "None") started = static_cast<double>(parse_slurm_datetime(s));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  ASSERT_GT(started, 0) << test::run_command("squeue").output;
  EXPECT_LE(started - submitted, 60) << "the stage waited " << started - submitted << " s";
}

// --account auto on the real accounts: a stage of 2 GPUs x 1 h (120 GPU-minutes) cannot be paid by
// team (60), so gtrain pays, and its script says so.
TEST(SlurmDbd, AccountAutoSkipsTheAccountWhoseQuotaCannotPay) {
  REQUIRE_ACCOUNTING();
  test::TempDir dir;
  test::write_file(dir.file("job.toml"), kJob);
  const std::string run = dir.file("run");
  const auto r = test::run_command(gtrain_cmd("submit " + dir.file("job.toml") + " --run-dir " + run +
                                              " --gpus 2 --time 1h --stages 1 --account auto --dry-run"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto line = r.output.find("  stage 1: account gtrain, starts now (");
  ASSERT_NE(line, std::string::npos) << r.output;
  EXPECT_NE(r.output.find("team: account team has 1.0 GPU-hours left", line), std::string::npos) << r.output;
  EXPECT_NE(test::read_file(run + "/stage-1.sbatch").find("#SBATCH --account=gtrain\n"), std::string::npos);
}

// --when quiet on four weeks of real accounting history: every hour a job held all 8 GPUs except
// Wednesday 05:00-09:00 (rows cloned in slurmdbd's job table from a real job), so a 6-GPU stage
// begins at the next Wednesday 05:00, and Slurm holds it until then.
TEST(SlurmDbd, WhenQuietBeginsAtTheQuietWindowTheHistoryShows) {
  REQUIRE_ACCOUNTING();
  const auto seed = test::run_command("sbatch --parsable --wait -N2 --gpus-per-node=4 -t 5 --wrap true");
  ASSERT_EQ(seed.exit_code, 0) << seed.output;
  const std::string id = trimmed(seed.output);
  const std::string sock = dbd_dir() + "/db/mysqld.sock";
  const std::string sql = "mariadb -S " + sock + " -N gtrain_acct_db -e ";
  // Wait until slurmdbd's row of the job is whole: its end and its partition (the row may not be
  // there at all yet, and the partition comes with a later update).
  for (int i = 0; i < 150; ++i) {
    const std::string row = trimmed(test::run_command(sql +
                                                      "'select concat(time_end, char(124), `partition`) from "
                                                      "gtraintest_job_table where id_job=" +
                                                      id + "'")
                                        .output);
    if (!row.empty() && row.rfind("0|", 0) != 0 && row.size() > 6 && row.substr(row.size() - 6) == "|debug") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  const std::string cols = trimmed(
      test::run_command(
          sql + "\"select group_concat(concat(char(96), column_name, char(96))) from information_schema.columns where "
                "table_schema='gtrain_acct_db' and table_name='gtraintest_job_table' and column_name "
                "not in ('job_db_inx','id_job','time_submit','time_eligible','time_start','time_end')\"")
          .output);
  ASSERT_FALSE(cols.empty());
  const int64_t now = std::time(nullptr), t0 = now - now % 3600 - 672 * 3600;
  const std::string at = "(" + std::to_string(t0) + "+seq*3600)";
  const auto ins = test::run_command(sql + "'insert into gtraintest_job_table (" + cols +
                                     ",id_job,time_submit,time_eligible,time_start,time_end) " + "select " + cols +
                                     ",200000+seq," + at + "-60," + at + "-60," + at + "," + at +
                                     "+3600 from gtraintest_job_table, " + "seq_0_to_671 where id_job=" + id +
                                     " and not (dayofweek(from_unixtime(" + at + "))=4 and hour(from_unixtime(" + at +
                                     ")) between 5 and 8)'");  // single quotes: the column names are in backquotes
  ASSERT_EQ(ins.exit_code, 0) << ins.output;
  // 672 hours less the 4 x 4 quiet ones.
  EXPECT_EQ(
      trimmed(test::run_command(sql + "'select count(*) from gtraintest_job_table where id_job >= 200000'").output),
      "656");
  test::TempDir dir;
  test::write_file(dir.file("job.toml"), kJob);
  const std::string run = dir.file("run");
  const auto r = test::run_command(gtrain_cmd("submit " + dir.file("job.toml") + " --run-dir " + run +
                                              " --gpus 6 --nodes 2 --time 1h --stages 1 --when quiet"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The next Wednesday 05:00 (local time), unless now is inside the window.
  const int wed5 = 2 * 24 + 5, how = hour_of_week(now);
  if (how >= wed5 && how < wed5 + 4) {
    EXPECT_EQ(r.output.find("begin"), std::string::npos) << r.output;
    return;
  }
  // What submit read is kept for gtrain report: the window for the stage's 6 GPUs and the quotas.
  const auto facts = nlohmann::json::parse(test::read_file(run + "/cluster.json"));
  EXPECT_EQ(facts["read_by"], "gtrain submit");
  EXPECT_EQ(facts["partition"], "debug");
  EXPECT_EQ(facts["quiet_for_gpus"], 6);
  EXPECT_EQ(facts["quiet_windows"], nlohmann::json({"Wed 05:00-09:00: 8 of 8 GPUs free in 100% of weeks"}))
      << facts.dump(2);
  std::map<std::string, double> limits;
  for (const auto& q : facts["quotas"]) limits[q.value("name", "")] = q.value("limit_gpu_hours", 0.0);
  EXPECT_EQ(limits["gtrain"], 10.0) << facts.dump(2);  // GrpTRESMins gres/gpu=600
  EXPECT_EQ(limits["team"], 1.0) << facts.dump(2);
  int64_t expect = now - now % 3600;
  while (hour_of_week(expect) != wed5) expect += 3600;
  const std::string begin = text_begin(expect);
  EXPECT_NE(r.output.find("  stage 1: begin " + format_local(expect) + ": 6 of 8 GPUs were free then in 100% of weeks"),
            std::string::npos)
      << r.output;
  const auto chain = nlohmann::json::parse(test::read_file(run + "/chain.json"));
  const std::string job = chain["stages"][0].value("job", "");
  ASSERT_FALSE(job.empty());
  const auto state = test::run_command("squeue -h -j " + job + " -o '%T %r %S'");
  EXPECT_EQ(trimmed(state.output), "PENDING BeginTime " + begin) << state.output;
}

}  // namespace
