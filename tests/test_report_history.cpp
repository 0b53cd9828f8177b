// test_report_history.cpp: gtrain report's reading of a run directory (torch-free, label cpu): a
// hand-written run of three stages (the second killed -9 after its last checkpoint, its records of
// the steps trained again moved to metrics.superseded.jsonl as a resume moves them) whose every
// time bucket, the goodput, GPU-hours, queue waits and lost work are computed here by hand; and
// the one-line errors for directories the report cannot read.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "launcher/report/report.h"
#include "launcher/report/run_history.h"
#include "runtime/core/errors.h"
#include "runtime/core/run_dir/cluster_facts.h"

namespace fs = std::filesystem;
using namespace gtrain;

namespace {

struct Dir {
  fs::path path;
  Dir() {
    char tmpl[] = "/tmp/gtrain-report-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~Dir() { fs::remove_all(path); }
  void write(const std::string& name, const std::string& text) const { std::ofstream(path / name) << text; }
};

const char* kConfig = R"([model]
name = "gpt"
n_layer = 2
n_head = 2
n_embd = 32
seq_len = 16
vocab = 64
[data]
kind = "synthetic"
[train]
global_batch = 4
steps = 10
)";

// A train record: step `step` ended at `time`, its trainer started at `start`; every step takes
// 1 s of which 0.1 s waiting for data.
std::string train(int step, double time, double start) {
  char b[300];
  std::snprintf(b, sizeof(b),
                R"({"kind":"train","step":%d,"loss":%.2f,"lr":0.001,"step_time_s":1.0,"data_wait_s":0.1,)"
                R"("samples_per_s":4.0,"elapsed_s":%.1f,"time":%.1f,"est_step_s":0.5,"mfu":0.3})"
                "\n",
                step, 3.0 - 0.1 * step, time - start, time);
  return b;
}

// Stage 1 (2 GPUs, Slurm job 11, submitted at 990): trainer at 1000, first step begins at 1002,
// steps 1-4 end at 1003-1006, a save at step 4 stalls 0.5 s, an evaluation takes 1.5 s, ends at 1010
// on its deadline. Stage 2 (1 rank, no scheduler): resumes at 4, trainer at 1020, steps 5-7 end at
// 1022-1024, killed; its launcher never recorded it (the next start did). Stage 3 (2 GPUs, job 13,
// submitted at 1005 after job 11): loads the step-5 checkpoint in 1 s, trainer at 1030, steps 6-10
// end at 1033-1037 (6 and 7 trained again), a save stalls 0.2 s, the final evaluation takes 1.8 s,
// ends at 1040.
void write_three_stage_run(const Dir& d) {
  d.write("config.toml", kConfig);
  d.write("stages.jsonl",
          R"({"start":1000,"end":1010,"world":2,"allocation":{"gpus":2,"scheduler":"slurm","job_id":"11"},)"
          R"("step_from":0,"step_to":4,"total_steps":10,"save_s":0.5,"load_s":0,"productive_s":4,)"
          R"x("plan":"dp=2","exit":"resumable: deadline (schedule.time_limit_s)"})x"
          "\n"
          R"({"start":1020,"end":1024,"world":1,"allocation":{},"step_from":4,"step_to":7,"total_steps":10,)"
          R"("save_s":0,"load_s":0,"productive_s":3,"exit":"failed: its launcher ended without recording the stage",)"
          R"("reported_by":"next start"})"
          "\n"
          R"({"start":1030,"end":1040,"world":2,"allocation":{"gpus":2,"scheduler":"slurm","job_id":"13"},)"
          R"("step_from":5,"step_to":10,"total_steps":10,"save_s":0.2,"load_s":1.0,"productive_s":5,)"
          R"("plan":"dp=2","exit":"completed"})"
          "\n");
  std::string m;
  for (int s = 1; s <= 4; ++s) m += train(s, 1002 + s, 1000);
  m += R"({"kind":"checkpoint","step":4,"stall_s":0.5,"time":1006.5})"
       "\n";
  m += R"({"kind":"eval","step":4,"loss":2.5,"accuracy":0.1,"eval_s":1.5,"time":1008})"
       "\n";
  m += R"({"kind":"resume","step":4,"path":"step_4"})"
       "\n";
  m += train(5, 1022, 1020);
  m += R"({"kind":"resume","step":5,"path":"step_5"})"
       "\n";
  for (int s = 6; s <= 10; ++s) m += train(s, 1027 + s, 1030);
  m += R"({"kind":"checkpoint","step":10,"stall_s":0.2,"time":1037.2})"
       "\n";
  m += R"({"kind":"eval","step":10,"loss":2.0,"accuracy":0.2,"eval_s":1.8,"time":1039})"
       "\n";
  d.write("metrics.jsonl", m);
  d.write("metrics.superseded.jsonl", train(6, 1023, 1020) + train(7, 1024, 1020));
  d.write("chain.json", R"({"scheduler":"slurm","state":"completed","stages":[)"
                        R"({"index":1,"gpus":2,"nodes":1,"job":"11","state":"completed","submitted":990},)"
                        R"({"index":2,"gpus":2,"nodes":1,"job":"13","state":"completed","submitted":1005}]})");
}

// A first stage on text data (data.kind = "jsonl") spent 3 s preparing it before its trainer was
// built: the stage began at 997, and "data preparation" is its own bucket, listed first, in every
// stage's row (0 for the others, which found the cache).
TEST(ReportHistory, DataPreparationIsABucketBeforeStartUp) {
  Dir d;
  write_three_stage_run(d);
  std::string stages;
  {
    std::ifstream in(d.path / "stages.jsonl");
    stages.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  stages.replace(stages.find("\"save_s\":0.5,"), 13, "\"save_s\":0.5,\"prepare_s\":3,");
  d.write("stages.jsonl", stages);
  const RunHistory h = read_run_history(d.path.string(), 2000);
  const TimeBuckets& a = h.stages[0].t;
  EXPECT_NEAR(a.prepare, 3.0, 1e-9);
  EXPECT_NEAR(a.startup, 2.0, 1e-9);  // first step at 1002: 5 s after 997, less the preparation
  EXPECT_NEAR(a.queue, 7.0, 1e-9);    // submitted at 990, began at 997
  EXPECT_NEAR(a.allocated(), 13.0, 1e-9);
  EXPECT_NEAR(h.stages[0].start, 997.0, 1e-9);
  const auto rows = report_text::buckets(h.total);
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows[0].first, "data preparation");
  EXPECT_NEAR(rows[0].second, 3.0 * 2, 1e-9);  // 2 GPUs
  EXPECT_EQ(report_text::buckets(h.stages[2].t, true).size(), rows.size());
  EXPECT_EQ(report_text::buckets(h.stages[2].t).size(), rows.size() - 1);
}

// A stage on conversations (data.format = "chat") records what its rows kept and left out: the
// report carries it per stage, in JSON and in words.
TEST(ReportHistory, ConversationCountsOfAStage) {
  Dir d;
  write_three_stage_run(d);
  std::string stages;
  {
    std::ifstream in(d.path / "stages.jsonl");
    stages.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  const std::string counts =
      R"({"documents":5,"kept":4,"truncated":1,"dropped_overlong":0,"dropped_untrainable":1,"bad_lines_skipped":0,)"
      R"("tools_ignored":0,"rows":2,"trained_tokens":40,"padding_fraction":0.25})";
  stages.replace(stages.find("\"save_s\":0.5,"), 13, "\"save_s\":0.5,\"data\":" + counts + ",");
  d.write("stages.jsonl", stages);
  Report r;
  r.h = read_run_history(d.path.string(), 2000);
  r.model = "gpt";
  r.request.error = "not planned in this test";
  EXPECT_EQ(r.h.stages[0].data, nlohmann::json::parse(counts));
  EXPECT_TRUE(r.h.stages[1].data.is_null());
  EXPECT_EQ(report_json(r).at("stages").at(0).at("data").at("kept"), 4);
  const std::string md = render_markdown(r);
  EXPECT_NE(
      md.find("Stage 1 data: 5 conversations: 4 kept (1 truncated), 0 dropped as overlong, 1 dropped as "
              "untrainable, 0 bad lines skipped, 0 with tools ignored; 2 rows, 40 trained tokens, 25.0% padding."),
      std::string::npos)
      << md;
}

TEST(ReportHistory, BucketsGoodputAndLostWorkMatchAHandComputation) {
  Dir d;
  write_three_stage_run(d);
  const RunHistory h = read_run_history(d.path.string(), 2000);
  ASSERT_EQ(h.stages.size(), 3u);
  ASSERT_EQ(h.attempts.size(), 3u);
  EXPECT_EQ(h.state, "complete");
  EXPECT_EQ(h.done, 10);
  EXPECT_EQ(h.total_steps, 10);
  EXPECT_TRUE(h.gpus);

  // Stage 1: wall 10 = start-up 2 + training 4 x 0.9 + data wait 0.4 + save 0.5 + eval 1.5 + other 2.
  const TimeBuckets& a = h.stages[0].t;
  EXPECT_NEAR(a.startup, 2.0, 1e-9);
  EXPECT_NEAR(a.training, 3.6, 1e-9);
  EXPECT_NEAR(a.data_wait, 0.4, 1e-9);
  EXPECT_NEAR(a.save, 0.5, 1e-9);
  EXPECT_NEAR(a.eval, 1.5, 1e-9);
  EXPECT_NEAR(a.other, 2.0, 1e-9);
  EXPECT_NEAR(a.queue, 10.0, 1e-9);  // submitted at 990
  EXPECT_NEAR(a.allocated(), 10.0, 1e-9);
  // Stage 2: steps 6 and 7 were trained again by stage 3: 2 s lost; step 5 kept.
  const TimeBuckets& b = h.stages[1].t;
  EXPECT_FALSE(h.stages[1].recorded);
  EXPECT_EQ(h.stages[1].units, 1);
  EXPECT_NEAR(b.startup, 1.0, 1e-9);
  EXPECT_NEAR(b.training, 0.9, 1e-9);
  EXPECT_NEAR(b.data_wait, 0.1, 1e-9);
  EXPECT_NEAR(b.lost, 2.0, 1e-9);
  EXPECT_NEAR(b.other, 0.0, 1e-9);
  EXPECT_EQ(h.attempts[1].lost_steps, 2);
  ASSERT_EQ(h.retrained.size(), 2u);
  EXPECT_EQ(h.retrained[0].step, 6);
  // Stage 3: load 1 s, start-up 1 s; queued from stage 2's end (1024, after its submission) to 1030.
  const TimeBuckets& c = h.stages[2].t;
  EXPECT_NEAR(c.load, 1.0, 1e-9);
  EXPECT_NEAR(c.startup, 1.0, 1e-9);
  EXPECT_NEAR(c.training, 4.5, 1e-9);
  EXPECT_NEAR(c.save, 0.2, 1e-9);
  EXPECT_NEAR(c.eval, 1.8, 1e-9);
  EXPECT_NEAR(c.other, 1.0, 1e-9);
  EXPECT_NEAR(c.queue, 6.0, 1e-9);

  // The run: 44 GPU(rank)-seconds allocated, 17.1 in training steps.
  EXPECT_NEAR(h.total.allocated(), 44.0, 1e-9);
  EXPECT_NEAR(h.total.training, 17.1, 1e-9);
  EXPECT_NEAR(h.total.lost, 2.0, 1e-9);
  EXPECT_NEAR(h.goodput, 17.1 / 44.0, 1e-12);
  EXPECT_NEAR(h.unit_hours, 44.0 / 3600.0, 1e-12);
  EXPECT_NEAR(h.total.queue, 16.0, 1e-9);
  // The curves keep one record a step: steps 6 and 7 as stage 3 trained them.
  ASSERT_EQ(h.train.size(), 10u);
  EXPECT_EQ(h.train[5].step, 6);
  EXPECT_EQ(h.train[5].attempt, 2);
}

// Stage 2 starts 0.1 s after stage 1 ends and saves and evaluates within the next second: those
// records are stage 2's (its steps), not counted in stage 1 too.
TEST(ReportHistory, NextStagesEarlyRecordsAreNotCountedTwice) {
  Dir d;
  d.write("config.toml", kConfig);
  d.write("stages.jsonl",
          R"({"start":1000,"end":1004,"world":1,"allocation":{},"step_from":0,"step_to":2,"total_steps":10,)"
          R"("save_s":0,"load_s":0,"productive_s":2,"exit":"resumable: signal 10"})"
          "\n"
          R"({"start":1004.1,"end":1010,"world":1,"allocation":{},"step_from":2,"step_to":4,"total_steps":10,)"
          R"("save_s":0.3,"load_s":0,"productive_s":2,"exit":"completed"})"
          "\n");
  std::string m = train(1, 1002, 1000) + train(2, 1003, 1000);
  m += R"({"kind":"resume","step":2,"path":"step_2"})"
       "\n";
  m += train(3, 1004.4, 1004.1);
  m += R"({"kind":"checkpoint","step":3,"stall_s":0.3,"time":1004.6})"
       "\n";
  m += R"({"kind":"eval","step":3,"loss":2.5,"accuracy":0.1,"eval_s":0.2,"time":1004.9})"
       "\n";
  m += train(4, 1006, 1004.1);
  d.write("metrics.jsonl", m);
  const RunHistory h = read_run_history(d.path.string(), 2000);
  ASSERT_EQ(h.stages.size(), 2u);
  EXPECT_NEAR(h.stages[0].t.eval, 0.0, 1e-9);
  EXPECT_NEAR(h.stages[0].t.save, 0.0, 1e-9);
  EXPECT_NEAR(h.stages[0].t.allocated(), 4.0, 1e-9);
  EXPECT_NEAR(h.stages[1].t.eval, 0.2, 1e-9);
  EXPECT_NEAR(h.stages[1].t.save, 0.3, 1e-9);
}

TEST(ReportHistory, ReportsCarryCostAdviceAndEveryChart) {
  Dir d;
  write_three_stage_run(d);
  Report r;
  r.h = read_run_history(d.path.string(), 2000);
  r.model = "gpt";
  r.price = 3.0;
  r.request.error = "not planned in this test";
  r.advice = report_advice(r.h);
  // Evaluation: (1.5 + 1.8) s x 2 GPUs = 6.6 of 44 GPU-seconds, 15% > 10%; lost work 2 / 44 > 2%.
  bool eval = false, lost = false, estimate = false;
  for (const auto& a : r.advice) {
    eval = eval || a.find("Evaluation took 15.0%") != std::string::npos;
    lost = lost || a.find("2 steps (4.5% of the allocated time) were trained again") != std::string::npos;
    estimate = estimate || a.find("off by +100%") != std::string::npos;  // measured 1 s, estimated 0.5 s
  }
  EXPECT_TRUE(eval && lost && estimate) << testing::PrintToString(r.advice);
  const auto j = report_json(r);
  EXPECT_NEAR(j.at("cost").get<double>(), 44.0 / 3600.0 * 3.0, 1e-12);
  EXPECT_EQ(j.at("lost_steps").get<int64_t>(), 2);
  const std::string md = render_markdown(r);
  EXPECT_NE(md.find("| lost work | 0 | 0.000556 | 0 | 0.000556 | 4.5% |"), std::string::npos) << md;
  EXPECT_NE(md.find("| idle in the queue (wall) | 0.00278 | 0 | 0.00167 | 0.00444 | - |"), std::string::npos) << md;
  const std::string html = render_html(r);
  size_t charts = 0;
  for (size_t at = 0; (at = html.find("<svg class=\"chart\"", at)) != std::string::npos; ++at) ++charts;
  EXPECT_EQ(charts, 6u);  // loss, lr, throughput, MFU, timeline, buckets
  EXPECT_EQ(html.find("<script"), std::string::npos) << "self-contained and script-free";
  EXPECT_EQ(html.find("http"), std::string::npos) << "nothing fetched from the network";
}

// The resource request with the cluster's facts (cluster.json, read back): the quiet windows, the
// quota left, and the sentence for the admin: the GPU-hours more it asks for, or that it fits.
TEST(ReportHistory, ResourceRequestCarriesTheClusterFactsAndTheAdminSentence) {
  Dir d;
  setenv("TZ", "UTC", 1);
  tzset();
  ClusterFacts f;
  f.read_at = 1796601600, f.read_by = "gtrain report", f.scheduler = "slurm", f.cluster = "c1";
  f.partition = "gpu", f.gpus = 8, f.free_gpus = 2, f.max_time = "1-00:00:00";
  f.quiet_for_gpus = 4, f.history_weeks = 4;
  f.quiet_windows = {"Wed 05:00-09:00: 6 of 8 GPUs free in 80% of weeks"};
  QuotaLeft proj;
  proj.kind = "account", proj.name = "proj", proj.is_default = true, proj.limit_gpu_hours = 500;
  proj.left_gpu_hours = 1.0, proj.burn_gpu_hours_per_day = 24, proj.runs_out = 1796601600 + 3600;
  QuotaLeft burst = proj;
  burst.kind = "QOS", burst.name = "burst", burst.is_default = false, burst.burn_gpu_hours_per_day = 0;
  f.quotas = {burst, proj};
  ASSERT_TRUE(write_cluster_facts(d.path.string(), f));
  EXPECT_FALSE(read_cluster_facts((d.path / "nope").string()));
  Report r;
  r.cluster = read_cluster_facts(d.path.string());
  ASSERT_TRUE(r.cluster);
  EXPECT_EQ(r.cluster->to_json(), f.to_json());
  ASSERT_EQ(r.cluster->charged()->name, "proj");  // the default account, though listed second
  r.h.gpus = true, r.h.total_steps = 1000, r.h.done = 400, r.h.global_batch = 32;
  r.request.steps = 600;
  for (int g : {1, 2, 4}) {
    RequestRow row;
    row.units = g, row.nodes = 1, row.feasible = true, row.layout = "dp=" + std::to_string(g);
    row.step_s = 10.0 / g;
    r.request.rows.push_back(row);
  }
  finish_request_rows(r.request);
  // 4 GPUs x 600 steps x 2.5 s = 1.67 GPU-hours; 1.0 left: 360 of the 600 steps.
  const std::string short_of = request_summary(r);
  EXPECT_NE(short_of.find(" It needs 1.7 GPU-hours; account proj has 1.0 left: we ask for 0.7 GPU-hours more on "
                          "proj; without them the run stops near step 760 of 1000."),
            std::string::npos)
      << short_of;
  EXPECT_NE(short_of.find(" It starts soonest in the cluster's quiet hours: Wed 05:00-09:00: 6 of 8 GPUs free in 80% "
                          "of weeks."),
            std::string::npos)
      << short_of;
  const std::string md = render_markdown(r);
  EXPECT_NE(md.find("- Cluster facts (read by gtrain report, 2026-12-07 00:00:00): partition gpu, 8 GPUs (2 free "
                    "then), MaxTime 1-00:00:00.\n- Quiet windows for 4 GPUs: Wed 05:00-09:00: 6 of 8 GPUs free in 80% "
                    "of weeks (from 4 weeks).\n- Quota: QOS burst: 1.0 of 500.0 GPU-hours left.\n- Quota: account proj "
                    "(default): 1.0 of 500.0 GPU-hours left; burning 24.00 a day: runs out 2026-12-07 01:00:00.\n"),
            std::string::npos)
      << md;
  EXPECT_NE(render_html(r).find("<ul class=\"cluster\"><li>Cluster facts (read by gtrain report"), std::string::npos);
  EXPECT_EQ(report_json(r)["cluster"]["quotas"][1]["name"], "proj");
  // Enough left: it says so, and when the quota runs out at its present rate.
  r.cluster->quotas[1].left_gpu_hours = 5;
  const std::string enough = request_summary(r);
  EXPECT_NE(enough.find(" It needs 1.7 GPU-hours; account proj has 5.0 left, enough if it is not used up first (at "
                        "its present rate it runs out 2026-12-07 01:00:00)."),
            std::string::npos)
      << enough;
  // Windows learned for fewer GPUs than the request's are not offered; a partition too small is said.
  r.cluster->quiet_for_gpus = 2, r.cluster->gpus = 2;
  const std::string small = request_summary(r);
  EXPECT_EQ(small.find("quiet hours"), std::string::npos) << small;
  EXPECT_NE(small.find(" Partition gpu has 2 GPUs, fewer than that."), std::string::npos) << small;
  unsetenv("TZ");
  tzset();
}

TEST(ReportHistory, UnreadableDirectoriesAreOneLineErrors) {
  Dir d;
  const auto message = [](const std::string& dir) {
    try {
      read_run_history(dir, 0);
    } catch (const ConfigError& e) {
      EXPECT_EQ(e.exit_code(), 2);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message((d.path / "nope").string()).find("no such run directory"), std::string::npos);
  EXPECT_NE(message(d.path.string()).find("not a gtrain run directory"), std::string::npos);
  d.write("config.toml", kConfig);
  d.write("metrics.jsonl", "");
  EXPECT_NE(message(d.path.string()).find("metrics.jsonl: no train record yet"), std::string::npos);
  d.write("metrics.jsonl", R"({"kind":"train","step":1,"loss":2.0,"elapsed_s":1})"
                           "\n");
  EXPECT_NE(message(d.path.string()).find("have no \"time\" (a run directory of an older gtrain)"), std::string::npos);
}

}  // namespace
