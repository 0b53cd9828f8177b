// test_cluster.cpp: `gtrain cluster` on a replayed Slurm: the sacct / scontrol / sacctmgr parsers,
// the hour-of-week model on a synthetic five weeks with a known quiet window (Wed 05:00-09:00, 6 of
// 8 GPUs free in 4 of 5 weeks), start predictions against held-out jobs, and a quota's burn-down date.
#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <functional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "launcher/base/text_util.h"
#include "launcher/cluster/quota_burn.h"
#include "launcher/cluster/start_prediction.h"
#include "launcher/cluster/week_profile.h"
#include "launcher/commands/cluster_command.h"
#include "launcher/commands/submit_command.h"
#include "runtime/core/errors.h"
#include "tests/support/test_util.h"
#include "tests/support/utc_test.h"

namespace gtrain {
namespace {

// Every test here reads times in UTC (and gives the binary's other tests their zone back).
using test::UtcTest;
class ClusterParse : public UtcTest {};
class ClusterModel : public UtcTest {};
class ClusterCommand : public UtcTest {};

constexpr int64_t kNow = 1796601600;  // Mon 2026-12-07 00:00 UTC
constexpr int64_t kWeek = 7 * 86400;

std::string stamp(int64_t t) {
  return t <= 0 ? "Unknown" : text::local_time(static_cast<double>(t), "%Y-%m-%dT%H:%M:%S");
}

// Five weeks of a partition of 8 GPUs: every hour one job of other users holds 7 GPUs, except Wed
// 05:00-09:00, when one of 1 GPU does (in 4 weeks of 5; the first week stays busy). A job starting
// in the day (08:00-20:00) waited 40 minutes, at night 10, in the quiet window none. Alice's 1-GPU
// job has run for 10 days on account proj (so the last week's window has 6 free).
std::string synthetic_sacct() {
  std::ostringstream o;
  o << "JobID|User|Account|Partition|QOS|Submit|Start|End|AllocTRES|ReqTRES|Timelimit|State\n";
  int id = 1000;
  for (int64_t t = kNow - 5 * kWeek; t < kNow; t += 3600) {
    const int how = hour_of_week(t), week = static_cast<int>((t - (kNow - 5 * kWeek)) / kWeek);
    const bool quiet = how >= 2 * 24 + 5 && how < 2 * 24 + 9 && week != 0;
    const int gpus = quiet ? 1 : 7;
    const int64_t wait = quiet ? 0 : how % 24 >= 8 && how % 24 < 20 ? 2400 : 600;
    o << id++ << "|bob|other|gpu|normal|" << stamp(t - wait) << "|" << stamp(t) << "|" << stamp(t + 3600)
      << "|billing=1,cpu=1,gres/gpu=" << gpus << ",node=1|cpu=1,gres/gpu=" << gpus << "|01:00:00|COMPLETED\n";
    o << id << ".batch|bob|other|gpu||" << stamp(t) << "|" << stamp(t) << "|" << stamp(t + 3600)
      << "|cpu=1|cpu=1||COMPLETED\n";  // a step: skipped
  }
  o << "42|alice|proj|gpu|normal|" << stamp(kNow - 10 * 86400 - 60) << "|" << stamp(kNow - 10 * 86400)
    << "|Unknown|cpu=1,gres/gpu=1|cpu=1,gres/gpu=1|14-00:00:00|RUNNING\n";
  o << "43|alice|proj|gpu|normal|" << stamp(kNow - 3600) << "|Unknown|Unknown||cpu=1,gres/gpu=4|02:00:00|PENDING\n";
  return o.str();
}

const char* kPartitions =
    "PartitionName=gpu AllowGroups=ALL Default=YES QoS=N/A MaxNodes=UNLIMITED MaxTime=1-00:00:00 Nodes=g[1-2] "
    "State=UP TotalCPUs=64 TotalNodes=2 TRES=cpu=64,mem=500G,node=2,billing=64,gres/gpu=8\n"
    "PartitionName=cpu AllowGroups=ALL Default=NO MaxTime=2-00:00:00 State=UP TotalNodes=4 TRES=cpu=128,node=4\n";
const char* kNodes =
    "NodeName=g1 State=MIXED Partitions=gpu CfgTRES=cpu=32,gres/gpu=4 AllocTRES=cpu=8,gres/gpu=4\n"
    "NodeName=g2 State=MIXED Partitions=gpu CfgTRES=cpu=32,gres/gpu=4 AllocTRES=cpu=2,gres/gpu=2\n"
    "NodeName=g3 State=DOWN* Partitions=gpu,cpu CfgTRES=cpu=32 AllocTRES=\n";
const char* kAssocMgr =
    "Current Association Manager state\n\nAssociation Records\n\n"
    "ClusterName=c Account=proj UserName= Partition= Priority=0 ID=3\n"
    "    GrpTRES=cpu=N(0),gres/gpu=8(1)\n"
    "    GrpTRESMins=cpu=N(0),mem=N(0),gres/gpu=30000(12000)\n"
    "    MaxTRESPJ=\n"
    "ClusterName=c Account=proj UserName=alice(1001) Partition= Priority=0 ID=4\n"
    "    GrpTRESMins=cpu=N(0),gres/gpu=N(12000)\n"
    "ClusterName=c Account=proj UserName=bob(1002) Partition= Priority=0 ID=5\n";
const char* kQosMgr =
    "Current Association Manager state\n\nQOS Records\n\n"
    "QOS=normal(1)\n    UsageRaw=0.000000\n    GrpTRESMins=cpu=N(0),gres/gpu=N(0)\n    MaxTRESPJ=gres/gpu=4\n"
    "    MaxWallPJ=1440\nQOS=burst(3)\n    GrpTRESMins=gres/gpu=6000(5990)\n    MaxTRESPU=gres/gpu=16\n";

// A replayed Slurm: each command's recorded answer; `sacct_fails` as when accounting is off.
struct ReplayedSlurm {
  bool sacct_fails = false;
  std::string assoc = "proj||normal,burst|normal\n";  // sacctmgr show assoc
  std::string assoc_mgr = kAssocMgr;
  std::string queue = "43|PENDING|gpu|1|gres:gpu:4\n40|RUNNING|gpu|1|gres:gpu:4\n";  // squeue
  std::string reservations =                                                         // scontrol show reservation
      "ReservationName=maint StartTime=2026-12-08T06:00:00 EndTime=2026-12-08T12:00:00 Duration=06:00:00 "
      "Nodes=g[1-2] NodeCnt=2 CoreCnt=64 Features=(null) PartitionName=(null) Flags=MAINT,SPEC_NODES "
      "TRES=cpu=64 Users=root Groups=(null) Accounts=(null) State=INACTIVE\n"
      "ReservationName=course StartTime=2026-12-07T09:00:00 EndTime=2026-12-07T17:00:00 Nodes=g2 NodeCnt=1 "
      "PartitionName=gpu Flags=DAILY Users=(null) Accounts=teaching State=INACTIVE\n";
  // sbatch --test-only's start for an argv (0: refused); default: in 30 minutes.
  std::function<double(const std::vector<std::string>&)> test_start;
  std::vector<std::string> calls;
  CommandRunner runner() {
    return [this](const std::vector<std::string>& wrapped) -> std::optional<std::string> {
      std::vector<std::string> argv(wrapped.begin() + 4, wrapped.end());  // run_merged's bash wrapper
      std::string line;
      for (const auto& a : argv) line += (line.empty() ? "" : " ") + a;
      calls.push_back(line);
      auto ok = [](const std::string& s) { return s + "gtrain-rc=0"; };
      if (line == "scontrol show partition -o") return ok(kPartitions);
      if (line == "scontrol show node -d -o") return ok(kNodes);
      if (line == "scontrol show reservation -o") return ok(reservations);
      if (argv[0] == "squeue") return ok(queue);
      if (argv[0] == "sacct")
        return sacct_fails ? "sacct: error: Slurm accounting storage is disabled\ngtrain-rc=1" : ok(synthetic_sacct());
      if (line.rfind("sacctmgr -nP show assoc", 0) == 0) return ok(assoc);
      if (line.rfind("sacctmgr -nP show user", 0) == 0) return ok("proj\n");
      if (line.rfind("scontrol show assoc_mgr flags=assoc", 0) == 0) return ok(assoc_mgr);
      if (line.rfind("scontrol show assoc_mgr flags=qos", 0) == 0) return ok(kQosMgr);
      if (argv[0] == "sbatch") {
        const double start = test_start ? test_start(argv) : double(kNow + 1800);
        if (start <= 0)
          return std::string(
              "sbatch: error: QOSMaxGRESPerJob\nsbatch: error: Batch job submission failed\ngtrain-rc=1");
        return "sbatch: Job 77 to start at " + stamp(static_cast<int64_t>(start)) +
               " using 8 processors on nodes g1 in partition gpu\ngtrain-rc=0";
      }
      return std::string("gtrain-rc=127");
    };
  }
};

TEST_F(ClusterParse, SacctAssocMgrPartitionsNodesAndQueue) {
  const auto jobs = parse_sacct_jobs(synthetic_sacct());
  ASSERT_EQ(jobs.size(), 5u * 168 + 2);  // steps skipped
  EXPECT_EQ(jobs.back().state, "PENDING");
  EXPECT_EQ(jobs.back().gpus, 4);  // pending: from ReqTRES
  EXPECT_EQ(jobs[jobs.size() - 2].end, 0);
  EXPECT_EQ(jobs[jobs.size() - 2].time_limit_s, 14 * 86400);
  const auto q = parse_assoc_mgr(kAssocMgr, "alice");
  ASSERT_EQ(q.size(), 2u);  // bob's row skipped
  EXPECT_EQ(q[0].kind, "account");
  EXPECT_EQ(q[0].limit_gpu_minutes, 30000);
  EXPECT_EQ(q[0].used_gpu_minutes, 12000);
  EXPECT_EQ(q[0].left_gpu_minutes(), 18000);
  EXPECT_EQ(q[0].grp_gpus, 8);
  EXPECT_EQ(q[1].name, "proj/alice");
  EXPECT_EQ(q[1].limit_gpu_minutes, -1);
  const auto qos = parse_assoc_mgr(kQosMgr, "alice");
  ASSERT_EQ(qos.size(), 2u);
  EXPECT_EQ(qos[0].max_gpus_per_job, 4);
  EXPECT_EQ(qos[0].max_wall_s.value, 86400);
  EXPECT_EQ(qos[1].left_gpu_minutes(), 10);
  EXPECT_EQ(qos[1].max_gpus_per_user, 16);
  EXPECT_EQ(assoc_mgr_tres("cpu=N(3),gres/gpu=N(45)", "gres/gpu"), (std::pair<int64_t, int64_t>{-1, 45}));
  const auto parts = parse_partitions(kPartitions);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].gpus, 8);
  EXPECT_EQ(parts[0].gpus_per_node, 4);
  EXPECT_EQ(parts[1].gpus, 0);
  EXPECT_EQ(parse_node_gpus(kNodes).at("gpu").free(), 2);  // g3 is down
  // Without gres/gpu in the accounting's TRES, the nodes' GRES count (scontrol show node -d).
  const auto gres = parse_node_gpus(
      "NodeName=n1 Gres=gpu:a100:4(S:0-1),shard:8 GresUsed=gpu:a100:3(IDX:0,2-3),shard:0 State=MIXED "
      "Partitions=debug,long CfgTRES=cpu=2,mem=1000M AllocTRES=cpu=1\n"
      "NodeName=n2 Gres=gpu:4 GresUsed=gpu:0 State=IDLE+DRAIN Partitions=debug CfgTRES=cpu=2 AllocTRES=\n");
  EXPECT_EQ(gres.at("debug").gpus, 8);
  EXPECT_EQ(gres.at("debug").free(), 1);  // n2 drains
  EXPECT_EQ(gres.at("long").gpus, 4);
  EXPECT_EQ(gres_gpu_count("gpu:2(IDX:0,2)"), 2);
  EXPECT_EQ(gres_gpu_count("(null)"), 0);
  const auto queue = parse_queue("43|PENDING|gpu|2|gres:gpu:a100:4\n40|RUNNING|gpu|1|gres:gpu:4\n");
  EXPECT_EQ(queue.at("gpu"), (std::vector<int64_t>{1, 8, 1, 0}));
  // %S: the earliest start backfill plans for a pending job ("N/A" before it has planned one).
  const auto planned = parse_queue(
      "50|PENDING|gpu|2|gres:gpu:4|2026-12-07T03:00:00\n51|PENDING|gpu|1|gres:gpu:1|N/A\n"
      "52|PENDING|gpu|1|gres:gpu:1|2026-12-07T02:00:00\n"
      "40|RUNNING|gpu|1|gres:gpu:4|2026-12-06T20:00:00\n");
  EXPECT_EQ(planned.at("gpu"), (std::vector<int64_t>{3, 10, 1, kNow + 2 * 3600}));
}

TEST_F(ClusterModel, FindsTheQuietWindowOfTheSyntheticWeeks) {
  const auto jobs = parse_sacct_jobs(synthetic_sacct());
  const WeekProfile p = build_week_profile(jobs, 8, kNow - 5 * kWeek, kNow);
  EXPECT_EQ(p.weeks, 5);
  const int wed5 = 2 * 24 + 5;
  EXPECT_EQ(p.free_in_share(wed5, 0.8), 6);
  EXPECT_DOUBLE_EQ(p.share_free(wed5, 6), 0.8);
  EXPECT_EQ(p.free_in_share(wed5, 1.0), 1);  // the busy first week
  EXPECT_EQ(p.free_in_share(wed5 + 4, 0.8), 1);
  const auto w = quiet_windows(p, 6);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].text(), "Wed 05:00-09:00: 6 of 8 GPUs free in 80% of weeks");
  // A window that wraps past Sunday midnight, and one over the whole week.
  WeekProfile all = p;
  for (auto& v : all.free) v.assign(5, 8);
  EXPECT_EQ(quiet_windows(all, 8)[0].text(), "all week: 8 of 8 GPUs free in 100% of weeks");
  for (int h = 0; h < kHoursPerWeek; ++h) all.free[static_cast<size_t>(h)].assign(5, h < 2 || h >= 166 ? 8 : 0);
  EXPECT_EQ(quiet_windows(all, 8)[0].text(), "Sun 22:00-Mon 02:00: 8 of 8 GPUs free in 100% of weeks");
  // The next quiet hour after Mon 00:00 is Wed 05:00; inside the window it is now.
  EXPECT_EQ(next_in_window(w[0], kNow), kNow + 2 * 86400 + 5 * 3600);
  EXPECT_EQ(next_in_window(w[0], kNow + 2 * 86400 + 6 * 3600 + 17), kNow + 2 * 86400 + 6 * 3600 + 17);
  // Waits by the hour jobs were submitted: none in the window, 40 min by day, 10 at night.
  EXPECT_DOUBLE_EQ(p.median_wait(wed5, 1, 8), 0);
  EXPECT_DOUBLE_EQ(p.median_wait(13, 1, 8), 2400);
  EXPECT_DOUBLE_EQ(p.median_wait(2, 1, 8), 600);
  EXPECT_EQ(p.median_wait(13, 9, 16), -1);
  const std::string map = free_heat_map(p);
  // 6 of 8 free in 80% of weeks: '*'; 1 of 8: '.'; Friday to Sunday alice's GPU leaves none.
  EXPECT_NE(map.find("Wed  .....****...............\nThu  ........................\nFri                          \n"),
            std::string::npos)
      << map;
  // Submitted 07:20 for 08:00 by day (40 min), 19:50 for 20:00 at night (10 min).
  EXPECT_NE(wait_heat_map(p, 1, 8).find("Mon  111111122222222222211111\n"), std::string::npos)
      << wait_heat_map(p, 1, 8);
}

TEST_F(ClusterModel, PredictionsBeatTheOverallMedianOnHeldOutJobs) {
  const auto jobs = parse_sacct_jobs(synthetic_sacct());
  const PredictionCheck c = check_predictions(jobs, kNow - kWeek);
  std::cout << "held-out jobs " << c.jobs << ": median error " << c.model_error_s << " s with the hour-of-week "
            << "model, " << c.baseline_error_s << " s with the overall median\n";
  EXPECT_GE(c.jobs, 160);
  EXPECT_LE(c.model_error_s, 60);
  EXPECT_GE(c.baseline_error_s, 600);
  // A 6-GPU job on Monday 13:00 waits 40 minutes as jobs submitted then did; at 02:00, 10.
  const auto mon = predict_start(jobs, 6, 3600, kNow - kWeek + 13 * 3600, nullptr);
  EXPECT_DOUBLE_EQ(mon.wait_s, 2400);
  EXPECT_EQ(mon.basis, "13 jobs of 3-12 GPUs with a similar time limit submitted Mon 12:00-Mon 15:00");
  EXPECT_DOUBLE_EQ(predict_start(jobs, 6, 3600, kNow - kWeek + 2 * 3600, nullptr).wait_s, 600);
  // On Wednesday 06:00 the profile has 6 GPUs free in 80% of weeks: it starts at once.
  const WeekProfile p = build_week_profile(jobs, 8, kNow - 5 * kWeek, kNow);
  const auto wed = predict_start(jobs, 6, 3600, kNow + 2 * 86400 + 6 * 3600, nullptr, &p);
  EXPECT_TRUE(wed.known);
  EXPECT_EQ(wed.wait_s, 0);
  EXPECT_EQ(wed.basis.rfind("6 of 8 GPUs free at this hour in 80% of weeks", 0), 0u) << wed.basis;
  PartitionFacts idle;
  idle.free_gpus = 8, idle.pending_jobs = 0;
  EXPECT_TRUE(predict_start(jobs, 6, 3600, kNow, &idle).starts_now);
}

TEST_F(ClusterModel, BurnDownDateIsExact) {
  const auto jobs = parse_sacct_jobs(synthetic_sacct());
  QuotaFacts q = parse_assoc_mgr(kAssocMgr, "alice")[0];
  const BurnDown b = burn_down(q, jobs, kNow);
  EXPECT_DOUBLE_EQ(b.burn_gpu_minutes_per_day, 1440);  // alice's 1 GPU all day; bob charges "other"
  EXPECT_EQ(b.left_gpu_minutes, 18000);
  EXPECT_EQ(b.runs_out_unix, kNow + 18000 * 60);  // 12.5 days
  EXPECT_EQ(b.text(),
            "account proj: 300.0 of 500.0 GPU-hours left (200.0 used); burning 24.00 a day over the last 7 days: "
            "runs out Sat 2026-12-19 12:00");
}

TEST_F(ClusterCommand, PrintsLimitsWindowsQuotasAndAPrediction) {
  ReplayedSlurm slurm;
  ClusterOptions o;
  o.user = "alice", o.weeks = 5, o.now = kNow, o.predict = true, o.gpus = 6, o.time = "1h", o.partition = "gpu";
  std::ostringstream out;
  ASSERT_EQ(cluster_command(o, {}, slurm.runner(), out), 0);
  const std::string s = out.str();
  for (const char* want :
       {"partition gpu (default), UP: 2 nodes, 8 GPUs (4 a node), 2 free now; 1 jobs pending (4 GPUs), 1 running",
        "MaxTime 1-00:00:00", "history: 842 jobs over 5 whole weeks",
        "    Wed 05:00-09:00: 6 of 8 GPUs free in 80% of weeks",
        "  account proj (default): GrpTRESMins gres/gpu 30000 GPU-minutes, 12000 used; GrpTRES gres/gpu 8 (1 in use)",
        "burn-down: account proj: 300.0 of 500.0 GPU-hours left", "runs out Sat 2026-12-19 12:00",
        "  QOS normal (default): MaxTRESPerJob gres/gpu 4; MaxWall 1-00:00:00",
        "  QOS burst: GrpTRESMins gres/gpu 6000 GPU-minutes, 5990 used; MaxTRESPerUser gres/gpu 16",
        "prediction for 6 GPUs x 01:00:00 on gpu, submitted now:",
        "from history: starts in about 10 min (Mon 2026-12-07 00:10)",
        "slurm's own estimate (test submission): Mon 2026-12-07 00:30",
        // The time rules partitions do not show: a maintenance window and a daily course, sorted by start.
        "reservations (scontrol show reservation -o):\n  course: Mon 2026-12-07 09:00 to Mon 2026-12-07 17:00 on g2 "
        "(1 nodes), partition gpu, for accounts teaching\n  maint (maintenance: its nodes run no job): Tue 2026-12-08 "
        "06:00 to Tue 2026-12-08 12:00 on g[1-2] (2 nodes)\n"}) {
    EXPECT_NE(s.find(want), std::string::npos) << want << "\n" << s;
  }
  bool asked_all_users = false;
  for (const auto& c : slurm.calls)
    asked_all_users |= c.rfind("sacct --allusers --parsable2 -X --starttime 2026-11-02T00:00:00", 0) == 0;
  EXPECT_TRUE(asked_all_users);
  // --json has the same facts.
  o.json = true;
  std::ostringstream js;
  ASSERT_EQ(cluster_command(o, {}, slurm.runner(), js), 0);
  const auto j = nlohmann::json::parse(js.str());
  EXPECT_EQ(j["partitions"][0]["quiet_windows"][0]["text"], "Wed 05:00-09:00: 6 of 8 GPUs free in 80% of weeks");
  EXPECT_EQ(j["partitions"][0]["hours"].size(), 168u);
  EXPECT_EQ(j["quotas"][0]["runs_out"], kNow + 18000 * 60);
  EXPECT_EQ(j["prediction"]["scheduler_estimate"], kNow + 1800);
  EXPECT_EQ(j["reservations"][1]["name"], "maint");
  EXPECT_TRUE(j["reservations"][1]["maintenance"].get<bool>());
  EXPECT_EQ(j["reservations"][1]["start"], kNow + 30 * 3600);
  EXPECT_EQ(j["reservations"][0]["users"], "");
}

TEST_F(ClusterCommand, WithoutAccountingItSaysWhatItCannotKnowAndGoesOn) {
  ReplayedSlurm slurm;
  slurm.sacct_fails = true;
  ClusterOptions o;
  o.user = "alice", o.now = kNow, o.quota_hours = 100;
  std::ostringstream out;
  ASSERT_EQ(cluster_command(o, {}, slurm.runner(), out), 0);
  const std::string s = out.str();
  EXPECT_NE(s.find("sacct: sacct: error: Slurm accounting storage is disabled: no job history"), std::string::npos)
      << s;
  EXPECT_NE(s.find("partition gpu (default)"), std::string::npos) << s;
  EXPECT_NE(s.find("partition cpu"), std::string::npos) << s;
  EXPECT_EQ(s.find("quiet windows"), std::string::npos) << s;
  EXPECT_NE(s.find("stated alice: GrpTRESMins gres/gpu 6000 GPU-minutes, ? used"), std::string::npos) << s;
}

TEST_F(ClusterCommand, BadInputIsOneLineNamingTheFlag) {
  ReplayedSlurm slurm;
  auto message = [&](ClusterOptions o) {
    o.user = "alice", o.now = kNow;
    std::ostringstream out;
    try {
      cluster_command(o, {}, slurm.runner(), out);
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  ClusterOptions o;
  o.predict = true;
  EXPECT_EQ(message(o), "--predict needs the job's shape: --gpus N and --time T");
  o = {};
  o.partition = "nosuch";
  EXPECT_EQ(message(o), "--partition nosuch: Slurm has no such partition (gpu, cpu)");
  o = {};
  o.weeks = 0;
  EXPECT_EQ(message(o), "--weeks: expected 1 to 52 weeks of history, got 0");
  o = {};
  o.quota_hours = 10, o.quota_since = "yesterday";
  EXPECT_EQ(message(o), "--quota-since: expected a date YYYY-MM-DD, got 'yesterday'");
  o = {};
  o.scheduler = "lsf";
  EXPECT_EQ(message(o), "--scheduler lsf: expected slurm or pbs");
}

}  // namespace
}  // namespace gtrain

namespace gtrain {
namespace {

const char* kQstatQ =
    "Queue: workq\n    queue_type = Execution\n    total_jobs = 5\n"
    "    state_count = Transit:0 Queued:3 Held:0 Waiting:0 Running:2 Exiting:0 Begun:0\n"
    "    resources_max.walltime = 24:00:00\n    enabled = True\n    started = True\n\n"
    "Queue: route\n    queue_type = Route\n    enabled = True\n    started = True\n";
const char* kPbsNodes =
    "n1\n     Mom = n1\n     state = job-busy\n     resources_available.ngpus = 4\n"
    "     resources_assigned.ngpus = 4\n\nn2\n     Mom = n2\n     state = free\n"
    "     resources_available.ngpus = 4\n     resources_assigned.ngpus = 1\n\n"
    "n3\n     state = down,offline\n     resources_available.ngpus = 4\n";
const char* kQstatX =
    "Job Id: 101.pbs\n    Job_Name = a\n    Job_Owner = carol@login1\n    job_state = F\n    queue = workq\n"
    "    qtime = Mon Nov 30 10:00:00 2026\n    stime = Mon Nov 30 10:30:00 2026\n"
    "    obittime = Mon Nov 30 12:30:00 2026\n    Resource_List.select = 2:ncpus=8:ngpus=2\n"
    "    Resource_List.walltime = 02:00:00\n    Account_Name = proj\n\n"
    "Job Id: 102.pbs\n    Job_Owner = dave@login1\n    euser = dave\n    job_state = Q\n    queue = workq\n"
    "    qtime = Sun Dec  6 23:00:00 2026\n    Resource_List.ngpus = 4\n"
    "    Resource_List.walltime = 04:00:00\n";

TEST_F(ClusterParse, PbsQueuesNodesAndJobHistory) {
  const auto jobs = parse_pbs_jobs(kQstatX);
  ASSERT_EQ(jobs.size(), 2u);
  EXPECT_EQ(jobs[0].user, "carol");
  EXPECT_EQ(jobs[0].gpus, 4);  // 2 chunks of 2
  EXPECT_EQ(jobs[0].start - jobs[0].submit, 1800);
  EXPECT_EQ(jobs[0].end - jobs[0].start, 7200);
  EXPECT_EQ(jobs[0].time_limit_s, 7200);
  EXPECT_EQ(jobs[1].state, "PENDING");
  EXPECT_EQ(jobs[1].gpus, 4);
  CommandRunner run = [](const std::vector<std::string>& wrapped) -> std::optional<std::string> {
    std::string line;
    for (size_t i = 4; i < wrapped.size(); ++i) line += (line.empty() ? "" : " ") + wrapped[i];
    if (line == "qstat -Q -f") return std::string(kQstatQ) + "gtrain-rc=0";
    if (line == "pbsnodes -a") return std::string(kPbsNodes) + "gtrain-rc=0";
    if (line == "qstat -x -f") return std::string(kQstatX) + "gtrain-rc=0";
    return std::string("gtrain-rc=1");
  };
  ClusterOptions o;
  o.scheduler = "pbs", o.user = "carol", o.now = kNow;
  std::ostringstream out;
  ASSERT_EQ(cluster_command(o, {}, run, out), 0);
  const std::string s = out.str();
  for (const char* want : {"gtrain cluster: pbs, user carol", "history: 2 jobs since",
                           "partition workq, UP: 3 nodes, 12 GPUs (4 a node), 3 free now; 3 jobs pending, 2 running",
                           "MaxTime 1-00:00:00", "PBS keeps no GPU-hour quota gtrain can read"}) {
    EXPECT_NE(s.find(want), std::string::npos) << want << "\n" << s;
  }
  EXPECT_EQ(s.find("route"), std::string::npos) << s;
}

}  // namespace
}  // namespace gtrain

namespace gtrain {
namespace {

// A small gpt whose chain is planned against the replayed cluster (dry runs: nothing is submitted).
SubmitOptions shaped_submit(const test::TempDir& dir, const std::string& extra_toml = "") {
  test::write_file(dir.file("job.toml"),
                   "[model]\nname = \"gpt\"\nn_layer = 2\nn_embd = 64\nn_head = 4\nseq_len = 64\nvocab = 256\n"
                   "[data]\nkind = \"synthetic\"\n[train]\nglobal_batch = 8\nsteps = 100\n" +
                       extra_toml);
  SubmitOptions o;
  o.config_path = dir.file("job.toml");
  o.run_dir = dir.file("run");
  o.gtrain = "/bin/true";
  o.dry_run = true;
  o.now_unix = kNow;
  o.partition = "gpu";
  o.stages = "2";
  o.gpus = "6";
  o.time = "2h";
  return o;
}

std::string submit_text(const SubmitOptions& o, ReplayedSlurm& slurm) {
  std::ostringstream out;
  EXPECT_EQ(submit_command(o, {{"USER", "alice"}}, slurm.runner(), out), 0) << out.str();
  return out.str();
}

// --when quiet (issue 53): Monday 00:00, 6 of 8 GPUs were free in the last 4 weeks only Wed 05:00-09:00, so
// the first 2-hour stage begins Wed 05:00 and the second, predicted to start Wed 07:00, needs no delay.
TEST_F(ClusterCommand, SubmitWhenQuietBeginsStagesInTheQuietWindow) {
  setenv("USER", "alice", 1);
  test::TempDir dir;
  ReplayedSlurm slurm;
  SubmitOptions o = shaped_submit(dir);
  o.when = "quiet";
  const std::string s = submit_text(o, slurm);
  EXPECT_NE(s.find("  stage 1: begin Wed 2026-12-09 05:00: 6 of 8 GPUs were free then in 100% of weeks, at Mon "
                   "2026-12-07 00:00 in 0%"),
            std::string::npos)
      << s;
  EXPECT_EQ(s.find("  stage 2: begin"), std::string::npos) << s;
  EXPECT_NE(s.find("--begin=2026-12-09T05:00:00"), std::string::npos) << s;
  // A deadline the delay would pass: no delay, and why.
  o.deadline = "1d";
  const std::string d = submit_text(o, slurm);
  EXPECT_NE(d.find("stage 1: not delayed: waiting for Wed 2026-12-09 05:00 (6 GPUs free then in 80% of weeks) would "
                   "end the chain after the deadline Tue 2026-12-08 00:00"),
            std::string::npos)
      << d;
  EXPECT_EQ(d.find("--begin="), std::string::npos) << d;
  // No accounting: it says so and starts as soon as it can.
  slurm.sacct_fails = true;
  o.deadline.clear();
  const std::string n = submit_text(o, slurm);
  EXPECT_NE(n.find("--when quiet: no quiet hours known (sacct: sacct: error: Slurm accounting storage is disabled"),
            std::string::npos)
      << n;
  EXPECT_EQ(n.find("--begin="), std::string::npos) << n;
}

// --account auto: proj starts the stage in an hour, team at once but has 10 GPU-minutes left: proj pays.
// With team's quota raised, team pays (it starts earlier); the script and chain say which.
TEST_F(ClusterCommand, SubmitAccountAutoPicksTheEarliestStartWithinQuota) {
  setenv("USER", "alice", 1);
  test::TempDir dir;
  ReplayedSlurm slurm;
  slurm.assoc = "proj||normal|normal\nteam||normal|normal\n";
  const std::string team =
      "ClusterName=c Account=team UserName= Partition= Priority=0 ID=7\n"
      "    GrpTRESMins=cpu=N(0),gres/gpu=600(590)\n";
  slurm.assoc_mgr = std::string(kAssocMgr) + team;
  slurm.test_start = [](const std::vector<std::string>& argv) {
    for (const auto& a : argv)
      if (a == "--account=team") return double(kNow);
    return double(kNow + 3600);
  };
  SubmitOptions o = shaped_submit(dir);
  o.account = "auto";
  o.stages = "1";
  o.gpus = "4";
  o.time = "1h";
  std::string s = submit_text(o, slurm);
  EXPECT_NE(s.find("  stage 1: account proj, starts Mon 2026-12-07 01:00 (team: account team has 0.2 GPU-hours left)"),
            std::string::npos)
      << s;
  EXPECT_NE(test::read_file(o.run_dir + "/stage-1.sbatch").find("#SBATCH --account=proj\n"), std::string::npos);
  slurm.assoc_mgr = std::string(kAssocMgr) +
                    "ClusterName=c Account=team UserName= Partition= Priority=0 ID=7\n"
                    "    GrpTRESMins=cpu=N(0),gres/gpu=6000(590)\n";
  s = submit_text(o, slurm);
  EXPECT_NE(s.find("  stage 1: account team, starts now"), std::string::npos) << s;
  EXPECT_NE(test::read_file(o.run_dir + "/stage-1.sbatch").find("#SBATCH --account=team\n"), std::string::npos);
  // Neither can pay: one line naming each.
  slurm.assoc_mgr =
      "ClusterName=c Account=proj UserName= Partition= Priority=0 ID=3\n"
      "    GrpTRESMins=cpu=N(0),gres/gpu=30000(25000)\n" +
      team;
  o.time = "20h";
  o.gpus = "8";
  std::ostringstream out;
  try {
    submit_command(o, {}, slurm.runner(), out);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("no account and QOS you may charge can pay for stage 1 (160.0 GPU-hours); "
                                         "team: account team has 0.2 GPU-hours left; proj: account proj has 83.3 "
                                         "GPU-hours left"),
              std::string::npos)
        << e.what();
  }
}

// --time auto: 8 GPUs start now for up to 1 hour, 3-4 for up to 4, 2 for up to 12: the largest
// rectangle that starts now is 2 GPUs x 12 h, found in at most 20 test submissions.
// --time auto with a job pending ahead: sbatch --test-only puts every probe behind it, but backfill
// starts what ends before that job's planned start on the GPUs free now (2, on g2).
TEST_F(ClusterCommand, SubmitTimeAutoFitsTheHoleBeforeAPendingJobsPlannedStart) {
  setenv("USER", "alice", 1);
  test::TempDir dir;
  ReplayedSlurm slurm;
  slurm.test_start = [](const std::vector<std::string>&) { return double(kNow + 3 * 3600 + 600); };
  slurm.queue = "43|PENDING|gpu|2|gres:gpu:4|" + stamp(kNow + 3 * 3600) + "\n40|RUNNING|gpu|1|gres:gpu:4|" +
                stamp(kNow - 600) + "\n";
  SubmitOptions o = shaped_submit(dir);
  o.gpus = "1-8";
  o.stages = "1";
  o.time = "auto";
  const std::string s = submit_text(o, slurm);
  EXPECT_NE(s.find("  the queue: 2 GPU(s) free on one node now, the next pending job planned to start Mon "
                   "2026-12-07 03:00 (squeue --start): backfill fits 2 GPU(s) for the time before it\n"),
            std::string::npos)
      << s;
  // 3 hours less 2 minutes of backfill's resolution.
  EXPECT_NE(s.find("chosen: 2 GPU(s) x 02:58:00, the largest that backfill starts now before the pending jobs' "
                   "planned starts (5.9 GPU-hours)"),
            std::string::npos)
      << s;
  EXPECT_NE(test::read_file(o.run_dir + "/stage-1.sbatch").find("#SBATCH --time=02:58:00\n"), std::string::npos);
  // No planned start: the hole has no known end, and --time auto says so.
  slurm.queue = "43|PENDING|gpu|2|gres:gpu:4|N/A\n";
  std::ostringstream out;
  o.run_dir = dir.file("run2");
  try {
    submit_command(o, {{"USER", "alice"}}, slurm.runner(), out);
    ADD_FAILURE() << "expected a ConfigError\n" << out.str();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--time auto: no size of --gpus 1-8 starts now"), std::string::npos);
    EXPECT_NE(out.str().find("  the queue: no start planned yet for the pending jobs: no hole to size\n"),
              std::string::npos)
        << out.str();
  }
}

TEST_F(ClusterCommand, SubmitTimeAutoTakesTheLargestShapeThatStartsNow) {
  setenv("USER", "alice", 1);
  test::TempDir dir;
  ReplayedSlurm slurm;
  int probes = 0;
  slurm.test_start = [&](const std::vector<std::string>& argv) {
    ++probes;
    int per_node = 0, nodes = 1;
    double t = 0;
    for (const auto& a : argv) {
      if (a.rfind("--gpus-per-node=", 0) == 0) per_node = std::stoi(a.substr(16));
      if (a.rfind("--nodes=", 0) == 0) nodes = std::stoi(a.substr(8));
      if (a.rfind("--time=", 0) == 0) t = static_cast<double>(parse_slurm_duration(a.substr(7)).value);
    }
    const int gpus = per_node * nodes;
    const double most = gpus >= 8 ? 3600 : gpus >= 3 ? 4 * 3600 : 12 * 3600;
    return double(t <= most ? kNow : kNow + 5 * 3600);
  };
  SubmitOptions o = shaped_submit(dir);
  o.gpus = "2-8";
  o.stages = "auto";
  o.time = "auto";
  const std::string s = submit_text(o, slurm);
  EXPECT_LE(probes, 20);
  EXPECT_NE(s.find("chosen: 2 GPU(s) x 12:00:00, the largest that starts now (24.0 GPU-hours)"), std::string::npos)
      << s;
  EXPECT_NE(s.find("  8 GPU(s) x 01:00:00: starts now"), std::string::npos) << s;
  EXPECT_NE(test::read_file(o.run_dir + "/stage-1.sbatch").find("#SBATCH --time=12:00:00\n"), std::string::npos);
}

// The quota warning: finishing the run needs more GPU-hours than account proj has left.
TEST_F(ClusterCommand, SubmitWarnsWhenTheChainWouldUseUpTheQuota) {
  setenv("USER", "alice", 1);
  test::TempDir dir;
  ReplayedSlurm slurm;
  SubmitOptions o = shaped_submit(dir);
  test::write_file(dir.file("job.toml"),
                   "[model]\nname = \"gpt\"\nn_layer = 24\nn_embd = 1024\nn_head = 16\nseq_len = 1024\n"
                   "vocab = 50304\n[data]\nkind = \"synthetic\"\n[train]\nglobal_batch = 256\nsteps = 100000\n");
  const std::string s = submit_text(o, slurm);
  const auto at =
      s.find("gtrain submit: warning: account proj has 300.0 GPU-hours left; finishing the run needs about ");
  ASSERT_NE(at, std::string::npos) << s;
  EXPECT_NE(s.find("(100000 steps on 6 GPUs): the chain would stop near step ", at), std::string::npos) << s;
  // A small job fits: no warning.
  ReplayedSlurm quiet;
  EXPECT_EQ(submit_text(shaped_submit(dir), quiet).find("warning"), std::string::npos);
  // A quota stated in the config: alice's GPU time since Dec 1 (her 1-GPU job: 144 GPU-hours) of 150.
  SubmitOptions big = shaped_submit(dir);
  test::write_file(dir.file("job.toml"),
                   "[model]\nname = \"gpt\"\nn_layer = 24\nn_embd = 1024\nn_head = 16\nseq_len = 1024\n"
                   "vocab = 50304\n[data]\nkind = \"synthetic\"\n[train]\nglobal_batch = 256\nsteps = 100000\n"
                   "[cluster]\ngpu_hours_quota = 150\n");
  const std::string q = submit_text(big, quiet);
  EXPECT_NE(q.find("gtrain submit: warning: stated quota of alice has 6.0 GPU-hours left"), std::string::npos) << q;
}

}  // namespace
}  // namespace gtrain
