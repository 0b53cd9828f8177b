// test_cluster_samples.cpp: the samples gtrain keeps of a cluster during its own stages: their file
// (append, read back, a torn line, pruning), the profile that fills the hours a site's accounting
// purged from them (equal to the profile of the full history), and the stage's sampling thread.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <thread>

#include "launcher/cluster/cluster_samples.h"
#include "launcher/cluster/week_profile.h"
#include "launcher/commands/cluster_command.h"
#include "launcher/scheduler/scheduler_backend.h"
#include "tests/support/test_util.h"
#include "tests/support/utc_test.h"

namespace gtrain {
namespace {

constexpr int64_t kNow = 1796601600;  // Mon 2026-12-07 00:00 UTC
constexpr int64_t kWeek = 7 * 86400;

class ClusterSamples : public test::UtcTest {};

// Five weeks of an 8-GPU partition: each hour a job holds 7 GPUs, but on Wednesdays 05:00-09:00 of
// weeks 2-5 only 1 (7 free), and on Saturdays 2 (6 free) (a job of 2 GPUs, pending 5 minutes first).
std::vector<HistoryJob> five_weeks() {
  std::vector<HistoryJob> jobs;
  int id = 1;
  for (int64_t t = kNow - 5 * kWeek; t < kNow; t += 3600) {
    const int how = hour_of_week(t), week = static_cast<int>((t - (kNow - 5 * kWeek)) / kWeek);
    HistoryJob j;
    j.id = std::to_string(id++), j.user = "bob", j.partition = "gpu", j.state = "COMPLETED";
    j.submit = t - 300, j.start = t, j.end = t + 3600, j.time_limit_s = 3600;
    j.gpus = how >= 2 * 24 + 5 && how < 2 * 24 + 9 && week != 0 ? 1 : how / 24 == 5 ? 2 : 7;
    jobs.push_back(j);
  }
  return jobs;
}

// What a stage sampling every 10 minutes over [from, to) would have seen of `jobs`.
std::vector<FreeSample> sampled(const std::vector<HistoryJob>& jobs, int64_t from, int64_t to) {
  std::vector<FreeSample> out;
  for (int64_t t = from; t < to; t += 600) {
    int64_t busy = 0;
    for (const auto& j : jobs) busy += j.start <= t && t < j.end ? j.gpus : 0;
    out.push_back({t, 8 - busy});
  }
  return out;
}

TEST_F(ClusterSamples, SamplesFillTheHoursTheAccountingPurged) {
  const auto all = five_weeks();
  const WeekProfile full = build_week_profile(all, 8, kNow - 5 * kWeek, kNow);
  ASSERT_EQ(full.weeks, 5);
  EXPECT_EQ(full.covered_from, kNow - 5 * kWeek);
  // The site purged all but the last two weeks: those hours are unknown, not idle.
  std::vector<HistoryJob> kept;
  for (const auto& j : all)
    if (j.start >= kNow - 2 * kWeek) kept.push_back(j);
  const WeekProfile purged = build_week_profile(kept, 8, kNow - 5 * kWeek, kNow);
  EXPECT_EQ(purged.covered_from, kNow - 2 * kWeek);  // the first whole hour from the first job's submission
  EXPECT_EQ(purged.weeks, 2);
  EXPECT_EQ(purged.sampled_hours, 0);
  // The samples of gtrain's stages over the purged weeks give back the full history's profile.
  const WeekProfile filled =
      build_week_profile(kept, 8, kNow - 5 * kWeek, kNow, sampled(all, kNow - 5 * kWeek, kNow - 2 * kWeek), true);
  EXPECT_EQ(filled.weeks, 5);
  EXPECT_EQ(filled.sampled_hours, 3 * 168);
  for (int h = 0; h < kHoursPerWeek; ++h) {
    auto a = full.free[static_cast<size_t>(h)], b = filled.free[static_cast<size_t>(h)];
    std::sort(a.begin(), a.end()), std::sort(b.begin(), b.end());
    EXPECT_EQ(a, b) << hour_of_week_name(h);
  }
  EXPECT_EQ(quiet_windows(filled, 7)[0].text(), "Wed 05:00-09:00: 7 of 8 GPUs free in 80% of weeks");
  // Without accounting at all, the samples alone make the profile.
  const WeekProfile only =
      build_week_profile({}, 8, kNow - 5 * kWeek, kNow, sampled(all, kNow - 5 * kWeek, kNow), false);
  EXPECT_EQ(only.weeks, 5);
  EXPECT_EQ(only.free_in_share(2 * 24 + 5, 0.8), 7);
  // No job at all in the period: an idle partition (every hour all free), not a purged one.
  const WeekProfile idle = build_week_profile({}, 8, kNow - 5 * kWeek, kNow);
  EXPECT_EQ(idle.weeks, 5);
  EXPECT_EQ(idle.free_in_share(0, 1.0), 8);
  // A sample in the hours the accounting covers does not override it.
  const WeekProfile covered = build_week_profile(all, 8, kNow - 5 * kWeek, kNow, {{kNow - 3600, 8}}, true);
  EXPECT_EQ(covered.sampled_hours, 0);
  EXPECT_EQ(covered.free, full.free);
}

TEST_F(ClusterSamples, FileAppendsReadsBackAndSkipsATornLine) {
  test::TempDir dir;
  const std::map<std::string, std::string> env = {{"GTRAIN_PROFILE_DIR", dir.path()}, {"HOME", "/nonexistent"}};
  const std::string path = cluster_samples_path(env, "slurm", "big/cluster");
  EXPECT_EQ(path, dir.path() + "/cluster/slurm-big_cluster.jsonl");
  EXPECT_EQ(cluster_samples_path({{"HOME", "/h"}}, "pbs", ""), "/h/.cache/gtrain/cluster/pbs-default.jsonl");
  EXPECT_EQ(cluster_samples_path({}, "slurm", "c"), "");
  ClusterReading r;
  r.scheduler = "slurm", r.cluster = "big/cluster";
  PartitionFacts gpu, cpu, unknown;
  gpu.name = "gpu", gpu.gpus = 8, gpu.free_gpus = 3, gpu.pending_jobs = 2, gpu.pending_gpus = 12, gpu.running_jobs = 4;
  cpu.name = "cpu", cpu.gpus = 0, cpu.free_gpus = 0;  // no GPUs: no sample
  unknown.name = "x", unknown.gpus = 4;               // free GPUs unknown: no sample
  r.partitions = {gpu, cpu, unknown};
  const auto s = samples_of(r, kNow, "77");
  ASSERT_EQ(s.size(), 1u);
  ASSERT_TRUE(append_cluster_samples(path, s));
  ASSERT_TRUE(append_cluster_samples(path, samples_of(r, kNow + 600, "77")));
  { std::ofstream(path, std::ios::app) << "{\"time\": 17, \"partit"; }  // a crash mid-line
  ASSERT_TRUE(append_cluster_samples(path, samples_of(r, kNow + 1200, "78")));
  int skipped = 0;
  const auto back = read_cluster_samples(path, &skipped);
  EXPECT_EQ(skipped, 1);
  ASSERT_EQ(back.size(), 2u);  // the torn line swallowed the next sample's line start
  EXPECT_EQ(back[0].time, kNow);
  EXPECT_EQ(back[0].partition, "gpu");
  EXPECT_EQ(back[0].cluster, "big/cluster");
  EXPECT_EQ(back[0].job, "77");
  EXPECT_EQ(back[0].free_gpus, 3);
  EXPECT_EQ(back[0].pending_gpus, 12);
  const auto f = free_samples(back, "gpu");
  ASSERT_EQ(f.size(), 2u);
  EXPECT_EQ(f[1].time, kNow + 600);
  EXPECT_TRUE(free_samples(back, "cpu").empty());
  EXPECT_FALSE(append_cluster_samples("", s));
  EXPECT_FALSE(append_cluster_samples("/proc/nope/x.jsonl", s));
}

TEST_F(ClusterSamples, AFileOverTwoMegabytesDropsSamplesOlderThanAYear) {
  test::TempDir dir;
  const std::string path = dir.file("cluster/slurm-c.jsonl");
  ClusterSample old;
  old.time = kNow - 400 * 86400, old.scheduler = "slurm", old.partition = "gpu", old.gpus = 8, old.free_gpus = 1;
  std::vector<ClusterSample> many(15000, old);
  ASSERT_TRUE(append_cluster_samples(path, many));
  ASSERT_GT(std::filesystem::file_size(path), 2u << 20);
  ClusterSample recent = old;
  recent.time = kNow;
  ASSERT_TRUE(append_cluster_samples(path, {recent}));
  const auto back = read_cluster_samples(path);
  ASSERT_EQ(back.size(), 1u);
  EXPECT_EQ(back[0].time, kNow);
}

TEST_F(ClusterSamples, SamplerSamplesAtOnceThenEveryPeriodAndStopsPromptly) {
  std::atomic<int> count{0};
  std::atomic<bool> saw_cancel{false};
  const auto t0 = std::chrono::steady_clock::now();
  {
    ClusterSampler s(
        [&](const std::function<bool()>& cancelled) {
          ++count;
          if (cancelled()) saw_cancel = true;
        },
        0.02);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(count.load(), 3);
  EXPECT_LE(count.load(), 12);
  EXPECT_FALSE(saw_cancel.load());
  EXPECT_LT(took, 1.0);
  // A long period: one sample at once, and the destructor does not wait for the next.
  count = 0;
  const auto t1 = std::chrono::steady_clock::now();
  {
    ClusterSampler s([&](const std::function<bool()>&) { ++count; }, 3600);
    for (int i = 0; i < 200 && count.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(count.load(), 1);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count(), 2.0);
}

// A scheduler whose reading is counted: one partition of 8 GPUs, 5 free.
class CountingBackend : public SchedulerBackend {
 public:
  mutable int reads = 0;
  SchedulerKind kind() const override { return SchedulerKind::slurm; }
  bool detect(const std::map<std::string, std::string>&) const override { return false; }
  void discover(DiscoveryContext&) const override {}
  bool can_submit() const override { return true; }
  std::string job_id_variable() const override { return "SLURM_JOB_ID"; }
  ClusterReading read_cluster(const ClusterQuery& q, const CommandRunner&) const override {
    ++reads;
    EXPECT_FALSE(q.read_history || q.read_quotas || q.read_reservations);  // a sample reads the queue only
    ClusterReading r;
    r.scheduler = "slurm", r.cluster = "c1";
    PartitionFacts p;
    p.name = "gpu", p.gpus = 8, p.free_gpus = 5;
    r.partitions = {p};
    return r;
  }
};

// Several stages (a sweep's trials) sampling at once read the cluster once per gap between them.
TEST_F(ClusterSamples, StagesSamplingTogetherReadTheClusterOncePerGap) {
  test::TempDir dir;
  const std::map<std::string, std::string> env = {{"GTRAIN_PROFILE_DIR", dir.path()}, {"SLURM_JOB_ID", "91"}};
  CountingBackend b;
  ASSERT_EQ(record_cluster_samples(b, env, kNow, 1.0, 540).size(), 1u);
  EXPECT_TRUE(record_cluster_samples(b, env, kNow + 1, 1.0, 540).empty());  // another stage, just after
  EXPECT_EQ(b.reads, 1);
  ASSERT_EQ(record_cluster_samples(b, env, kNow + 2, 1.0, 0).size(), 1u);  // no gap asked
  EXPECT_EQ(b.reads, 2);
  const auto back = read_cluster_samples(dir.path() + "/cluster/slurm-c1.jsonl");
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].job, "91");
  EXPECT_EQ(back[1].free_gpus, 5);
}

// gtrain cluster without accounting: the samples a stage kept make its profile and quiet windows.
TEST_F(ClusterSamples, ClusterCommandUsesTheKeptSamplesWithoutAccounting) {
  test::TempDir dir;
  const std::map<std::string, std::string> env = {{"GTRAIN_PROFILE_DIR", dir.path()}};
  std::vector<ClusterSample> kept;
  for (const auto& f : sampled(five_weeks(), kNow - 5 * kWeek, kNow)) {
    ClusterSample s;
    s.time = f.time, s.scheduler = "slurm", s.cluster = "c1", s.partition = "gpu", s.gpus = 8;
    s.free_gpus = f.free_gpus;
    kept.push_back(s);
  }
  ASSERT_TRUE(append_cluster_samples(cluster_samples_path(env, "slurm", "c1"), kept));
  const CommandRunner run = [](const std::vector<std::string>& wrapped) -> std::optional<std::string> {
    std::string line;
    for (size_t i = 4; i < wrapped.size(); ++i) line += (line.empty() ? "" : " ") + wrapped[i];
    if (line == "scontrol show config") return std::string("Configuration data\nClusterName = c1\ngtrain-rc=0");
    if (line == "scontrol show partition -o")
      return std::string(
          "PartitionName=gpu Default=YES MaxTime=1-00:00:00 State=UP TotalNodes=2 "
          "TRES=cpu=64,node=2,gres/gpu=8\ngtrain-rc=0");
    if (line == "scontrol show node -d -o")
      return std::string("NodeName=g1 State=IDLE Partitions=gpu CfgTRES=gres/gpu=8 AllocTRES=\ngtrain-rc=0");
    if (line.rfind("squeue", 0) == 0) return std::string("gtrain-rc=0");
    if (line == "scontrol show reservation -o") return std::string("No reservations in the system\ngtrain-rc=0");
    if (line.rfind("sacct ", 0) == 0)
      return std::string("sacct: error: Slurm accounting storage is disabled\ngtrain-rc=1");
    return std::string("gtrain-rc=127");
  };
  ClusterOptions o;
  o.user = "alice", o.weeks = 5, o.now = kNow, o.gpus = 7;
  std::ostringstream out;
  ASSERT_EQ(cluster_command(o, env, run, out), 0);
  const std::string text = out.str();
  EXPECT_NE(text.find("840 hours known from gtrain's own stages' samples (the accounting cannot be read)"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("    Wed 05:00-09:00: 7 of 8 GPUs free in 80% of weeks\n"), std::string::npos) << text;
  EXPECT_NE(text.find("samples from gtrain's own stages: 5040 in " + dir.path() + "/cluster/slurm-c1.jsonl"),
            std::string::npos)
      << text;
  std::ostringstream js;
  o.json = true;
  ASSERT_EQ(cluster_command(o, env, run, js), 0);
  const auto j = nlohmann::json::parse(js.str());
  EXPECT_EQ(j["cluster"], "c1");
  EXPECT_EQ(j["samples"]["count"], 5040);
  EXPECT_EQ(j["partitions"][0]["sampled_hours"], 840);
}

}  // namespace
}  // namespace gtrain
