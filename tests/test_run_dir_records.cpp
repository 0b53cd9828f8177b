// test_run_dir_records.cpp: the run directory's files and records (runtime/core/run_dir/): every
// record kind written and read back, the tolerant readers, the one "is this a run directory", and
// the docs' tables of files and record kinds checked against the code's.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/core/errors.h"
#include "runtime/core/run_dir/chain_file.h"
#include "runtime/core/run_dir/plan_record.h"
#include "runtime/core/run_dir/run_files.h"
#include "runtime/core/run_dir/run_records.h"
#include "runtime/core/run_dir/stage_records.h"
#include "tests/support/test_paths.h"
#include "tests/support/test_util.h"

namespace gtrain {
namespace {

TEST(RunRecords, KindNameTableRoundTripsAndRefusesOthers) {
  const auto kinds = all_record_kinds();
  EXPECT_EQ(kinds.size(), 11u);
  std::set<std::string> names;
  for (RecordKind k : kinds) {
    names.insert(record_kind_name(k));
    EXPECT_EQ(record_kind_from_name(record_kind_name(k)), k) << record_kind_name(k);
  }
  EXPECT_EQ(names.size(), kinds.size());
  EXPECT_EQ(record_kind_from_name("Train"), std::nullopt);
  EXPECT_EQ(record_kind_from_name(""), std::nullopt);
  EXPECT_EQ(record_kind(nlohmann::json::parse(R"({"kind": 3})")), std::nullopt);
  EXPECT_EQ(record_kind(nlohmann::json::parse(R"({"kind": "eval"})")), RecordKind::eval);
}

// One record of every kind, each field away from its default.
struct EveryKind {
  TrainRecord train;
  EvalRecord eval;
  EvalStoppedRecord eval_stopped;
  EstimateRecord estimate;
  StageEndRecord stage_end;
  ThreadsRecord threads;
  FinalRecord final_;
  CheckpointRecord checkpoint;
  ResumeRecord resume;
  RestartRecord restart;
  RecoveredRecord recovered;
  EveryKind() {
    train.step = 7, train.loss = 2.5, train.lr = 1e-3, train.grad_norm = 0.75, train.samples_per_s = 100;
    train.step_time_s = 0.25, train.data_wait_s = 0.01, train.consumed_samples = 112, train.elapsed_s = 3.5;
    train.time = 1.7e9, train.tokens_per_s = 6400, train.est_step_s = 0.3, train.mfu = 0.41, train.skipped = true;
    train.param_mb = 1.5, train.grad_mb = 1.5, train.opt_state_mb = 3, train.host_state_mb = 4;
    train.step_tensor_peak_mb = 9, train.loss_scale = 65536, train.cpu_util = 1.9, train.gpu_util = 88;
    train.gpu_mem_used_mb = 1234, train.peak_mem_mb = 1500, train.device = {{"alloc_retries", 2}};
    eval.step = 8, eval.loss = 2.25, eval.accuracy = 0.5, eval.samples = 64, eval.eval_s = 1.25, eval.time = 1.7e9 + 1;
    eval_stopped.step = 9, eval_stopped.reason = "signal 10 (USR1)";
    estimate.step = 20, estimate.est_step_s = 0.3, estimate.measured_step_s = 0.6, estimate.error = 1.0;
    estimate.profile = "cpu";
    stage_end.step = 21, stage_end.reason = "deadline (--time-limit)", stage_end.detail = "12 s left";
    threads.step = 4, threads.threads = 2, threads.measured = "1: 0.5 s, 2: 0.3 s";
    final_.step = 30, final_.train_loss = 1.5, final_.eval_loss = 1.75, final_.eval_accuracy = 0.625;
    final_.seconds = 12, final_.samples_per_s = 80, final_.data_wait_s = 0.5, final_.save_stall_s = 0.25;
    checkpoint.step = 10, checkpoint.stall_s = 0.05, checkpoint.async = false, checkpoint.time = 1.7e9 + 2;
    checkpoint.previous_write_s = 0.5;
    resume.step = 10, resume.path = "runs/x/checkpoints/step_00000010", resume.probe_loss = 2.0;
    resume.probe_loss_saved = 2.0, resume.plan = "dp=2 tp=1 pp=1";
    restart.restart = 2, restart.unix = 1.7e9 + 3, restart.detected_unix = 1.7e9 + 2.5, restart.cause = "rank 1 hung";
    restart.step_reached = 14, restart.resume_step = 10, restart.steps_lost = 4, restart.step_gained = true;
    restart.allocation = {{"scheduler", "slurm"}, {"gpus", 4}}, restart.host = "n2", restart.left_out = "n2";
    restart.ranks = 2, restart.plan = "dp=2";
    recovered.restart = 2, recovered.step = 15, recovered.seconds = 4.5;
  }
  std::vector<nlohmann::json> all() const {
    return {record_to_json(train),    record_to_json(eval),       record_to_json(eval_stopped),
            record_to_json(estimate), record_to_json(stage_end),  record_to_json(threads),
            record_to_json(final_),   record_to_json(checkpoint), record_to_json(resume),
            record_to_json(restart),  record_to_json(recovered)};
  }
};

template <class R>
void expect_round_trip(const R& r) {
  const nlohmann::json j = record_to_json(r);
  EXPECT_EQ(j.at("kind"), record_kind_name(R::kKind));
  EXPECT_EQ(record_to_json(record_from_json<R>(j)), j) << j.dump();
  // Through the text of a line, as a file holds it.
  EXPECT_EQ(record_to_json(record_from_json<R>(nlohmann::json::parse(j.dump()))), j) << j.dump();
}

TEST(RunRecords, EveryKindRoundTripsThroughJsonAndAFile) {
  const EveryKind e;
  expect_round_trip(e.train), expect_round_trip(e.eval), expect_round_trip(e.eval_stopped);
  expect_round_trip(e.estimate), expect_round_trip(e.stage_end), expect_round_trip(e.threads);
  expect_round_trip(e.final_), expect_round_trip(e.checkpoint), expect_round_trip(e.resume);
  expect_round_trip(e.restart), expect_round_trip(e.recovered);
  // Every field set: each kind's JSON holds exactly the fields its struct lists, none lost.
  EXPECT_EQ(record_to_json(e.train).size(), 26u);
  EXPECT_EQ(record_from_json<TrainRecord>(record_to_json(e.train)).device, nlohmann::json({{"alloc_retries", 2}}));

  test::TempDir dir;
  const std::string path = dir.file("metrics.jsonl");
  for (const auto& j : e.all()) ASSERT_TRUE(append_json_line(path, j));
  const auto read = read_run_records(path);
  ASSERT_EQ(read.size(), 11u);
  const auto kinds = all_record_kinds();
  for (size_t i = 0; i < read.size(); ++i) {
    EXPECT_EQ(read[i].kind, kinds[i]);
    EXPECT_EQ(read[i].json, e.all()[i]);
  }
  EXPECT_EQ(read_records_of<CheckpointRecord>(path).at(0).previous_write_s, 0.5);
  EXPECT_FALSE(read_records_of<CheckpointRecord>(path).at(0).async);
  EXPECT_EQ(read_records_of<RecoveredRecord>(path).at(0).step, 15);
}

TEST(RunRecords, OptionalFieldsAreLeftOutOrNullAsDocumented) {
  TrainRecord t;
  t.step = 1;
  const auto j = record_to_json(t);
  EXPECT_TRUE(j.at("grad_norm").is_null());  // a non-finite norm: null, always present
  for (const char* absent : {"tokens_per_s", "mfu", "est_step_s", "skipped", "loss_scale", "host_state_mb"})
    EXPECT_FALSE(j.contains(absent)) << absent;
  FinalRecord f;
  EXPECT_TRUE(record_to_json(f).at("eval_loss").is_null());
  StageEndRecord s;
  EXPECT_FALSE(record_to_json(s).contains("detail"));
  CheckpointRecord c;
  EXPECT_TRUE(record_to_json(c).at("async").get<bool>());
  EXPECT_FALSE(record_to_json(c).contains("previous_write_s"));
}

TEST(RunRecords, ReaderSkipsTornLinesUnknownKindsAndKeepsDefaultsForMistypedFields) {
  test::TempDir dir;
  const std::string path = dir.file("metrics.jsonl");
  test::write_file(path,
                   "{\"kind\":\"train\",\"step\":1,\"loss\":2.0,\"time\":5}\n"
                   "[1,2]\n"
                   "{\"kind\":\"frobnicate\",\"step\":2}\n"
                   "{\"step\":3}\n"
                   "{\"kind\":\"train\",\"step\":\"four\",\"loss\":1.5,\"time\":6}\n"
                   "{\"kind\":\"eval\",\"step\":4,\"lo");
  const auto read = read_run_records(path);
  ASSERT_EQ(read.size(), 2u);
  const auto second = read[1].as<TrainRecord>();
  EXPECT_EQ(second.step, 0);  // mistyped: the default
  EXPECT_EQ(second.loss, 1.5);
  EXPECT_FALSE(record_step(read[1].json));
  EXPECT_TRUE(read_run_records(dir.file("missing.jsonl")).empty());
  EXPECT_FALSE(has_final_record(path, 1));
  ASSERT_TRUE(append_json_line(path, record_to_json(FinalRecord{})));  // after the torn line
  EXPECT_FALSE(has_final_record(path, 0));                             // the torn line swallowed it: one line, not JSON
  ASSERT_TRUE(append_json_line(path, record_to_json(FinalRecord{})));
  EXPECT_TRUE(has_final_record(path, 0));
}

TEST(StageRecords, RoundTripAndTheStatusReaderSkipsMistypedLinesWithTheirLine) {
  StageRecord r;
  r.start = 1.5, r.end = 9.25, r.allocation = {{"scheduler", "pbs"}, {"job_id", "12.srv"}, {"gpus", 2}};
  r.world = 2, r.plan = "dp=2", r.step_from = 3, r.step_to = 9, r.total_steps = 20, r.samples = 96;
  r.productive_s = 5, r.save_s = 0.5, r.load_s = 0.25, r.exit = "resumable: signal 10 (USR1)";
  r.stop_detail = "30 s left", r.threads = 2, r.threads_measured = "1: 1 s, 2: 0.6 s";
  r.config_changes = {{"train.lr", {"1e-3", "2e-3"}}}, r.reported_by = "launcher", r.restarts = 1, r.prepare_s = 2.5;
  const auto [bad, back] = StageRecord::from_json(r.to_json());
  EXPECT_EQ(bad, "");
  EXPECT_EQ(back.to_json(), r.to_json());
  EXPECT_DOUBLE_EQ(back.prepare_s, 2.5);
  EXPECT_EQ(back.scheduler(), "pbs");
  EXPECT_EQ(back.job_id(), "12.srv");
  EXPECT_EQ(back.gpus(), 2);
  EXPECT_TRUE(back.resumable());

  test::TempDir dir;
  StageLedger ledger(RunDir(dir.path()).stages());
  ledger.append(r);
  test::write_file(RunDir(dir.path()).stages(), test::read_file(RunDir(dir.path()).stages()) +
                                                    "{\"step_to\":\"nine\"}\n{\"start\":1,\"end\":2,\"exit\":\"comp");
  ::testing::internal::CaptureStderr();
  const auto read = read_stage_records(dir.path(), /*warn=*/true);
  const std::string said = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(read.size(), 1u);
  EXPECT_EQ(read[0].to_json(), r.to_json());
  EXPECT_NE(said.find("stages.jsonl:2: key 'step_to' must be an integer, got string; line skipped"), std::string::npos)
      << said;
  EXPECT_EQ(said.find(":3:"), std::string::npos) << said;  // a torn line is skipped silently
  EXPECT_DOUBLE_EQ(ledger_end(dir.path()), 9.25);
}

TEST(StageRecords, LostStagesAreRecordedFromTheTrainRecordsWithThePlansWorld) {
  test::TempDir dir;
  const RunDir d(dir.path());
  PlanRecord plan;
  plan.world = 3;
  write_plan_record(dir.path(), plan);
  for (int step = 1; step <= 4; ++step) {
    TrainRecord t;
    t.step = step, t.time = 100.0 + step, t.elapsed_s = 10.0 + step, t.step_time_s = 0.5;
    t.consumed_samples = 8 * step;
    ASSERT_TRUE(append_json_line(d.metrics(), record_to_json(t)));
  }
  const auto lost = record_lost_stages(dir.path(), 4242, 10);
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].world, 3);
  EXPECT_EQ(lost[0].step_from, 0);
  EXPECT_EQ(lost[0].step_to, 4);
  EXPECT_EQ(lost[0].samples, 32);
  EXPECT_DOUBLE_EQ(lost[0].productive_s, 2.0);
  EXPECT_NE(lost[0].exit.find("(pid 4242)"), std::string::npos) << lost[0].exit;
  const auto ledger = read_stage_records(dir.path());
  ASSERT_EQ(ledger.size(), 1u);
  EXPECT_EQ(ledger[0].reported_by, "next start");
  EXPECT_TRUE(record_lost_stages(dir.path(), 0, 10).empty());  // recorded once
}

TEST(PlanRecordFile, WrittenAndReadBackWithEveryField) {
  Plan plan;
  plan.world = 4, plan.dp = 2, plan.tp = 2, plan.zero = 3, plan.offload = true, plan.micro_batch = 3;
  plan.shard_teacher = true;
  plan.grad_accum = 2, plan.recompute = true, plan.precision = "bf16", plan.est_memory_bytes = 1e9;
  plan.est_tensor_bytes = 5e8, plan.est_step_seconds = 0.5, plan.flops_per_step = 1e12, plan.peak_flops = 4e14;
  plan.profile = "H100-80GB", plan.reason = "fastest that fits";
  const PlanRecord p = PlanRecord::from_plan(plan, 14);
  EXPECT_EQ(p.global_batch, 12);
  EXPECT_EQ(p.offload, "optimizer");
  EXPECT_EQ(p.summary, plan.summary());
  EXPECT_TRUE(p.on_gpus());
  test::TempDir dir;
  EXPECT_FALSE(read_plan_record(dir.path()));
  write_plan_record(dir.path(), p);
  const auto back = read_plan_record(dir.path());
  ASSERT_TRUE(back);
  EXPECT_EQ(back->to_json(), p.to_json());
  EXPECT_TRUE(back->shard_teacher);
  EXPECT_NE(p.summary.find(" teacher=sharded"), std::string::npos) << p.summary;
  EXPECT_EQ(p.to_json().size(), 22u);
  test::write_file(RunDir(dir.path()).plan(), "[]");
  EXPECT_FALSE(read_plan_record(dir.path()));
}

TEST(ChainFile, RoundTripsWithoutTheSchedulerCodeAndNamesABadScheduler) {
  Chain c;
  c.scheduler = SchedulerKind::pbs, c.auto_stages = true, c.max_auto_stages = 7, c.state = ChainState::stopped;
  c.reason = "quota", c.gpus_from_windows = true, c.launcher = "srun", c.cpus_per_gpu = 4;
  c.sizing.candidates = {1, 2, 4}, c.sizing.gpus = "auto", c.sizing.objective = "gpu-hours", c.sizing.slack = 0.2;
  c.config = "/abs/job.toml", c.sets = {"train.lr=1e-3"}, c.limit_s = 3600, c.lead_s = 60;
  WindowConfig w;
  w.days = "mon-fri", w.hours = "20:00-08:00", w.max_gpus = 8;
  c.windows.push_back(w);
  ChainStage s;
  s.index = 2, s.gpus = 4, s.nodes = 2, s.nodes_min = 1, s.script = "stage-2.pbs", s.submit_argv = {"qsub", "x"};
  s.begin = "2026-12-07T20:00:00", s.job = "12.srv", s.submitted = 1.7e9, s.state = StageState::queued, s.exit = 3;
  s.decision = {{"chosen", 4}};
  c.stages.push_back(s);
  test::TempDir dir;
  write_chain(dir.path(), c);
  EXPECT_TRUE(chain_exists(dir.path()));
  const Chain back = read_chain_file(dir.path());
  EXPECT_EQ(chain_to_json(back), chain_to_json(c));
  try {
    read_chain_file(dir.path(), {SchedulerKind::slurm});
    ADD_FAILURE() << "a chain of a scheduler that cannot submit was read";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), chain_path(dir.path()) + ": key 'scheduler' must be one of slurm, got 'pbs'");
  }
}

TEST(RunFiles, LooksLikeARunDirOnlyWithAFileThatMarksOne) {
  test::TempDir dir;
  EXPECT_FALSE(looks_like_run_dir(dir.file("missing")));
  EXPECT_FALSE(looks_like_run_dir(dir.path()));
  test::write_file(RunDir(dir.path()).plan(), "{}");  // plan.json alone marks nothing
  EXPECT_FALSE(looks_like_run_dir(dir.path()));
  EXPECT_EQ(run_marker_names(), "config.toml, metrics.jsonl, stages.jsonl, chain.json or checkpoints/");
  for (const auto& info : run_file_table()) {
    if (!info.marks_run) continue;
    test::TempDir one;
    const std::string p = RunDir(one.path()).path(info.file);
    if (info.folder)
      std::filesystem::create_directories(p);
    else
      test::write_file(p, "");
    EXPECT_TRUE(looks_like_run_dir(one.path())) << info.name;
  }
  test::write_file(dir.file("f"), "");
  EXPECT_FALSE(looks_like_run_dir(dir.file("f")));  // a file is no directory
}

// The rows `| \`NAME\` |` of the markdown table under `heading` in `page`, and the section's text.
std::pair<std::vector<std::string>, std::string> doc_table(const std::string& page, const std::string& heading) {
  const std::string text = test::read_file(std::string(GTRAIN_SOURCE_DIR) + "/docs/" + page);
  const size_t at = text.find("\n" + heading + "\n");
  EXPECT_NE(at, std::string::npos) << page << " has no " << heading;
  const size_t end = text.find("\n## ", at + 1);
  const std::string section = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
  std::vector<std::string> rows;
  std::istringstream in(section);
  static const std::regex kRow(R"(^\| `([^`]+)` \|)");
  std::smatch m;
  for (std::string line; std::getline(in, line);)
    if (std::regex_search(line, m, kRow)) rows.push_back(m[1]);
  return {rows, section};
}

TEST(RunFiles, ConceptsPageListsExactlyTheFilesTheCodeOwns) {
  const auto [rows, section] = doc_table("concepts.md", "## Run directory");
  std::vector<std::string> listed;
  for (const auto& info : run_file_table()) {
    const std::string name = std::string(info.name) + (info.folder ? "/" : "");
    if (info.listed)
      listed.push_back(name);
    else
      EXPECT_NE(section.find("`" + name + "`"), std::string::npos) << name << " is not named in the text";
  }
  EXPECT_EQ(rows, listed);
}

TEST(RunRecords, ReportsPageListsEveryRecordKind) {
  const auto [rows, section] = doc_table("reports-and-monitoring.md", "## metrics.jsonl");
  std::vector<std::string> kinds;
  for (RecordKind k : all_record_kinds()) kinds.push_back(record_kind_name(k));
  EXPECT_EQ(rows, kinds);
}

}  // namespace
}  // namespace gtrain
