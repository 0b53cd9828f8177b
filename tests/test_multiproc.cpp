// test_multiproc.cpp: the gtrain binary on several MPI ranks: the same losses and parameters on
// any world size, accumulation and ZeRO stage; failures stop every rank with a message.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "launcher/commands/run_command.h"
#include "runtime/checkpoint/checkpoint.h"
#include "tests/support/multiproc_util.h"

namespace gtrain {
namespace {

namespace fs = std::filesystem;
using test::run_command;

const std::string kMlp = mlp_job(50);

struct MlpJob {
  static const std::string& config() { return kMlp; }
};
using MultiRank = MatchesOneRank<MlpJob>;

TEST_F(MultiRank, ReferenceRunLearns) {
  ASSERT_EQ(reference_->losses.size(), 50u);
  EXPECT_LT(reference_->losses.back(), 0.8 * reference_->losses.front());
}

TEST_F(MultiRank, TwoRanksMatchOne) {
  expect_same_run(*reference_, run_gtrain(kMlp, 2, {}), "2 ranks");
}

TEST_F(MultiRank, FourRanksMatchOne) {
  expect_same_run(*reference_, run_gtrain(kMlp, 4, {}), "4 ranks");
}

TEST_F(MultiRank, TwoRanksWithAccumulationMatchOne) {
  auto r = run_gtrain(kMlp, 2, {"parallel.micro_batch=8"});
  EXPECT_NE(r.output.find("micro_batch=8 grad_accum=2"), std::string::npos) << r.output;
  expect_same_run(*reference_, r, "2 ranks x accumulation 2");
}

TEST_F(MultiRank, ZeroStagesMatchPlainDataParallel) {
  for (int ranks : {2, 4}) {
    for (int zero : {1, 2}) {
      // Small buckets: several reduce-scatters / all-gathers, padding in the last chunk.
      auto r = run_gtrain(
          kMlp, ranks, {"parallel.mode=explicit", "parallel.zero=" + std::to_string(zero), "parallel.bucket_mb=0.001"});
      EXPECT_NE(r.output.find("zero=" + std::to_string(zero)), std::string::npos) << r.output;
      expect_same_run(*reference_, r, std::to_string(ranks) + " ranks, ZeRO-" + std::to_string(zero));
    }
  }
}

TEST(MultiRankGpt, TransformerMatchesOnTwoRanks) {
  const std::string gpt = R"(
[model]
name = "gpt"
n_layer = 2
n_head = 2
n_embd = 32
seq_len = 16
vocab = 16
[data]
kind = "synthetic"
[train]
global_batch = 8
steps = 20
[log]
progress = "none"
)";
  expect_same_run(run_gtrain(gpt, 1, {}), run_gtrain(gpt, 2, {"parallel.mode=explicit", "parallel.zero=1"}),
                  "gpt on 2 ranks with ZeRO-1");
}

// Tensor and pipeline parallel: every layout starts from the single-rank parameters (each rank
// builds the whole model from the seed and keeps its part), so losses and the final parameters
// (assembled from every rank's state shards into the end checkpoint) match the single-rank run.
const std::string kGpt4 = gpt4_job(16, 30);

struct Gpt4Job {
  static const std::string& config() { return kGpt4; }
};
using ModelParallel = MatchesOneRank<Gpt4Job>;

TEST_F(ModelParallel, TensorParallel2) {
  check(2, {"parallel.tp=2"}, "dp=1 tp=2 pp=1", "tp=2");
}

// The fused output layer + loss on the last pipeline stage (and on 1 rank) keeps the trajectory.
TEST_F(ModelParallel, PipelineParallel2WithFusedLoss) {
  check(2, {"parallel.pp=2", "train.fused_loss=on"}, "pipeline pp=2", "pp=2 fused loss");
  check(1, {"train.fused_loss=on"}, "dp=1 tp=1 pp=1", "1 rank fused loss");
}

// checkpoint.init_from loads one set of full weights into every layout's parts (tensor-parallel
// slices, pipeline stages, ZeRO-2 chunks with fresh optimizer moments): the runs from there match
// the single-rank run, which starts where the exported run ended, not at the seed's initialisation.
TEST_F(ModelParallel, InitFromLoadsIntoEveryLayout) {
  test::TempDir dir;
  test::write_file(dir.file("job.toml"), kGpt4);
  auto r = test::run_command(GTRAIN_BINARY + " run " + dir.file("job.toml") + " --run-dir " + dir.file("a") + " && " +
                             GTRAIN_BINARY + " ckpt export " + dir.file("a") + " " + dir.file("a.safetensors"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::vector<std::string> init = {"checkpoint.init_from=" + dir.file("a.safetensors"), "train.steps=8"};
  const auto with = [&](std::vector<std::string> sets) {
    sets.insert(sets.end(), init.begin(), init.end());
    return sets;
  };
  const RunResult one = run_gtrain(kGpt4, 1, with({}));
  EXPECT_NE(one.output.find("gtrain: weights from " + dir.file("a.safetensors")), std::string::npos) << one.output;
  ASSERT_FALSE(one.losses.empty());
  EXPECT_LT(one.losses[0], reference_->losses[0] - 0.3) << "starts where the exported run ended";
  expect_same_run(one, run_gtrain(kGpt4, 2, with({"parallel.mode=explicit", "parallel.tp=2"})), "init_from tp=2");
  expect_same_run(one, run_gtrain(kGpt4, 2, with({"parallel.mode=explicit", "parallel.pp=2"})), "init_from pp=2");
  expect_same_run(one, run_gtrain(kGpt4, 2, with({"parallel.mode=explicit", "parallel.zero=2"})),
                  "init_from dp=2 zero=2");
}

// GTRAIN_STAGED_COMM=all sends every tensor through a host buffer of its own, the path CUDA ranks
// that share one GPU take (device_sharing.h): tp, pp and ZeRO-2's asynchronous reduce-scatters and
// all-gathers keep the one-rank trajectory through it.
TEST_F(ModelParallel, StagedCommunicationKeepsTheTrajectory) {
  struct Env {
    Env() { setenv("GTRAIN_STAGED_COMM", "all", 1); }
    ~Env() { unsetenv("GTRAIN_STAGED_COMM"); }
  } env;
  const std::string note = "gtrain: GTRAIN_STAGED_COMM=all: every tensor, CPU ones too, goes through a host buffer";
  check(2, {"parallel.tp=2"}, note, "tp=2 staged");
  check(2, {"parallel.pp=2"}, "over mpi (GPU tensors through host memory)", "pp=2 staged");
  check(2, {"parallel.zero=2", "parallel.bucket_mb=0.001"}, note, "dp=2 zero=2 staged");
}

TEST_F(ModelParallel, PipelineParallel2) {
  check(2, {"parallel.pp=2"}, "pipeline pp=2 stage 0 blocks [0, 2) schedule 1f1b", "pp=2");
}

// Stages that do not divide the blocks (4 on 3, split by cost: 1/2/1) keep the trajectory.
TEST_F(ModelParallel, PipelineParallel3On4Blocks) {
  check(3, {"parallel.pp=3"}, "pipeline pp=3 stage 0 blocks [0, 1) schedule 1f1b", "pp=3 on 4 blocks");
}

TEST_F(ModelParallel, PipelineParallel4With4And8MicroBatches) {
  check(4, {"parallel.pp=4", "parallel.pp_microbatches=4"}, "micro_batch=4 grad_accum=4", "pp=4 m=4");
  check(4, {"parallel.pp=4", "parallel.pp_microbatches=8"}, "micro_batch=2 grad_accum=8", "pp=4 m=8");
}

TEST_F(ModelParallel, GPipeSchedule) {
  check(2, {"parallel.pp=2", "parallel.pp_microbatches=4", "parallel.pp_schedule=gpipe"}, "schedule gpipe",
        "pp=2 gpipe");
}

TEST_F(ModelParallel, DataTimesTensorParallelWithZero1) {
  check(4, {"parallel.dp=2", "parallel.tp=2", "parallel.zero=1"}, "dp=2 tp=2 pp=1 zero=1", "dp=2 x tp=2");
}

TEST_F(ModelParallel, DataTimesPipelineParallelWithZero1) {
  check(4, {"parallel.dp=2", "parallel.pp=2", "parallel.zero=1", "parallel.micro_batch=2"}, "dp=2 tp=1 pp=2 zero=1",
        "dp=2 x pp=2");
}

// Also the unit check of state shards: the end checkpoint of this run is assembled from the
// tp=2 x pp=2 ranks' state_shards() and must equal the single-rank parameters.
TEST_F(ModelParallel, TensorTimesPipelineParallelWithRecompute) {
  check(4, {"parallel.tp=2", "parallel.pp=2", "parallel.pp_microbatches=4"}, "tp=2 pp=2", "tp=2 x pp=2");
  check(4, {"parallel.tp=2", "parallel.pp=2", "parallel.pp_microbatches=4", "parallel.recompute=true"}, "recompute=on",
        "tp=2 x pp=2 with recompute");
}

// Recompute reruns blocks in backward with the first run's random state: dropout matches exactly.
TEST(ModelParallelRecompute, DropoutMatchesWithRecompute) {
  const std::vector<std::string> base = {"model.dropout=0.1", "parallel.mode=explicit"};
  auto plain = run_gtrain(kGpt4, 1, base);
  auto with = base;
  with.push_back("parallel.recompute=true");
  expect_same_run(plain, run_gtrain(kGpt4, 1, with), "recompute with dropout");
}

// Dropout masks are keyed by (seed, global sample, site) (runtime/models/keyed_dropout.h), not by
// rank or micro-batch: with dropout on, data, tensor and pipeline parallel layouts, accumulation
// and recompute follow the single-rank trajectory too, so a resume on another layout keeps it.
TEST(ModelParallelDropout, EveryLayoutMatchesOneRank) {
  const std::vector<std::string> base = {"model.dropout=0.1", "parallel.mode=explicit"};
  auto with = [&](const std::vector<std::string>& more) {
    auto s = base;
    s.insert(s.end(), more.begin(), more.end());
    return s;
  };
  auto one = run_gtrain(kGpt4, 1, base);
  auto dp_tp = run_gtrain(kGpt4, 4, with({"parallel.dp=2", "parallel.tp=2", "parallel.micro_batch=4"}));
  EXPECT_NE(dp_tp.output.find("micro_batch=4 grad_accum=2"), std::string::npos) << dp_tp.output;
  expect_same_run(one, dp_tp, "dropout dp=2 x tp=2 x accumulation 2");
  expect_same_run(
      one, run_gtrain(kGpt4, 2, with({"parallel.pp=2", "parallel.pp_microbatches=4", "parallel.recompute=true"})),
      "dropout pp=2 with recompute");
}

TEST(MultiRankDropout, MlpOnTwoRanksWithAccumulationMatchesOne) {
  auto one = run_gtrain(kMlp, 1, {"model.dropout=0.2"});
  expect_same_run(one, run_gtrain(kMlp, 2, {"model.dropout=0.2", "parallel.micro_batch=8"}), "mlp dropout 2 ranks x 2");
}

// Impossible layouts are one ConfigError naming the factor, before any rank starts.
TEST(ModelParallelErrors, ImpossibleRequestsNameTheFactor) {
  test::TempDir dir;
  std::string eight_heads = kGpt4;
  eight_heads.replace(eight_heads.find("n_head = 4"), 10, "n_head = 8");
  test::write_file(dir.file("gpt.toml"), eight_heads);
  test::write_file(dir.file("mlp.toml"), kMlp);
  auto run = [&](const std::string& file, int ranks, const std::string& sets) {
    return run_command(GTRAIN_BINARY + " run " + dir.file(file) + " --run-dir " + dir.file("run") + " --ranks " +
                       std::to_string(ranks) + " --set parallel.mode=explicit " + sets);
  };
  auto tp3 = run("gpt.toml", 3, "--set parallel.tp=3");
  EXPECT_NE(tp3.exit_code, 0);
  EXPECT_NE(tp3.output.find("tp = 3 must divide the 8 attention heads"), std::string::npos) << tp3.output;
  auto pp8 = run("gpt.toml", 8, "--set parallel.pp=8");
  EXPECT_NE(pp8.exit_code, 0);
  EXPECT_NE(pp8.output.find("pp = 8 must not exceed the 4 blocks (a stage needs one)"), std::string::npos)
      << pp8.output;
  auto mlp = run("mlp.toml", 2, "--set parallel.tp=2");
  EXPECT_NE(mlp.exit_code, 0);
  EXPECT_NE(mlp.output.find("tp = 2: this model does not support tensor parallel"), std::string::npos) << mlp.output;
  for (const auto* r : {&tp3, &pp8, &mlp}) EXPECT_EQ(r->output.find("[rank "), std::string::npos) << r->output;
}

// The planner's per-rank estimate against rank 0's measured peak (it writes metrics;
// tests/test_memory_estimate.cpp has single-rank shapes). A tp rank holds its slice of the weights,
// gradients and optimizer state, the whole norms, and split activations and logits; a pp rank its
// stage, with 1F1B keeping up to pp micro-batches in flight on the first stage (rank 0). The whole
// model exists only while a rank builds it. 8 steps: past the ~5 the heap's high-water mark takes to
// settle. Tolerance: within 15% either way.
constexpr double kMemoryTolerance = 0.15;

void expect_memory_within(int ranks, const std::vector<std::string>& sets, const std::string& what,
                          bool explicit_layout = true, double tolerance = kMemoryTolerance) {
  const std::string gpt =
      "[model]\nname = \"gpt\"\nn_layer = 4\nn_head = 4\nn_embd = 256\nseq_len = 128\nvocab = 256\n"
      "[data]\nkind = \"synthetic\"\nsynthetic_samples = 256\n[train]\nglobal_batch = 32\nsteps = 8\n"
      "threads = 1\neval_batches = 1\n[checkpoint]\nat_end = false\n[log]\nprogress = \"none\"\n";
  test::TempDir dir;
  test::write_file(dir.file("job.toml"), gpt);
  std::string cmd = GTRAIN_BINARY + " run " + dir.file("job.toml") + " --run-dir " + dir.file("run") + " --ranks " +
                    std::to_string(ranks) + (explicit_layout ? " --set parallel.mode=explicit" : "");
  for (const auto& s : sets) cmd += " --set " + s;
  auto r = run_command(cmd);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto [peak, est] = test::memory_peak_and_estimate(dir.file("run/metrics.jsonl"));  // rank 0's
  ASSERT_GT(est, 0) << what;
  EXPECT_NEAR(peak / est, 1.0, tolerance) << what << ": measured " << peak << " MiB, estimated " << est << " MiB";
}

// 2 data-parallel ranks with the layout the planner chooses.
TEST(MultiRankMemory, DataParallelEstimateWithinFifteenPercent) {
  GTRAIN_SKIP_MEMORY_MEASURE_IF_SANITIZED();
  expect_memory_within(2, {}, "dp=2 (planned)", /*explicit_layout=*/false);
}

TEST(MultiRankMemory, TensorParallelEstimateWithinFifteenPercent) {
  GTRAIN_SKIP_MEMORY_MEASURE_IF_SANITIZED();
  expect_memory_within(2, {"parallel.tp=2"}, "tp=2");
}

TEST(MultiRankMemory, PipelineParallelEstimateWithinFifteenPercent) {
  GTRAIN_SKIP_MEMORY_MEASURE_IF_SANITIZED();
  expect_memory_within(2, {"parallel.pp=2", "parallel.pp_microbatches=4", "parallel.pp_schedule=1f1b"}, "pp=2 1F1B");
}

// GPipe keeps every micro-batch's activations until the backwards start (8 here, against 1F1B's 2).
TEST(MultiRankMemory, GPipeEstimateCountsEveryMicroBatchInFlight) {
  GTRAIN_SKIP_MEMORY_MEASURE_IF_SANITIZED();
  expect_memory_within(2, {"parallel.pp=2", "parallel.pp_microbatches=8", "parallel.pp_schedule=gpipe"}, "pp=2 GPipe");
}

TEST(MultiRankMemory, TensorTimesPipelineParallelEstimateWithinFifteenPercent) {
  GTRAIN_SKIP_MEMORY_MEASURE_IF_SANITIZED();
  // On CPU the measured peak is the resident high-water mark, which also holds what the estimate
  // leaves out (allocator slack, pages LibTorch touches after the baseline): 10-24 MiB on 4 ranks,
  // the most of the smallest estimate here. Debian's LibTorch 1.13 measures +10% (109 MiB against
  // 99 MiB); pip's 2.11 measured +18% to +26% in six runs (110-118 MiB against 94: its SDPA keeps no
  // [H, T, T] scores, so the estimate is smaller while the rest stays). Within 35% on 2.x until the
  // CPU peak counts tensors only, as the CUDA one does.
  expect_memory_within(4, {"parallel.tp=2", "parallel.pp=2", "parallel.pp_microbatches=4"}, "tp=2 x pp=2", true,
                       TORCH_VERSION_MAJOR >= 2 ? 0.35 : kMemoryTolerance);
}

// PIDs of the ranks of a job whose command line contains `marker`, by rank.
std::map<int, int> rank_pids(const std::string& marker) {
  std::map<int, int> out;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = test::read_file(e.path().string() + "/cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline.find(marker) == std::string::npos || cmdline.rfind("mpirun", 0) == 0) continue;
    std::string environ = test::read_file(e.path().string() + "/environ");
    auto pos = environ.find("OMPI_COMM_WORLD_RANK=");
    if (pos == std::string::npos) continue;
    out[std::stoi(environ.substr(pos + 21))] = std::stoi(name);
  }
  return out;
}

struct Background {
  std::FILE* pipe = nullptr;
  std::string output;
  int exit_code = -1;
  double seconds = 0;
};

// Starts a long 2-rank run, waits until it trains, applies `signal_rank1`, and collects the result.
Background disrupt_rank1(int signo, const std::vector<std::string>& sets) {
  test::TempDir dir;
  std::string text = kMlp;
  text.replace(text.find("steps = 50"), 10, "steps = 1000000");
  test::write_file(dir.file("long.toml"), text);
  std::string cmd = GTRAIN_BINARY + " run " + dir.file("long.toml") + " --ranks 2 --run-dir " + dir.file("run");
  for (const auto& s : sets) cmd += " --set " + s;
  Background bg;
  bg.pipe = popen((cmd + " 2>&1").c_str(), "r");
  // Wait for training to start (metrics appear), then find rank 1.
  std::map<int, int> pids;
  for (int i = 0; i < 300; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    pids = rank_pids(dir.file("long.toml"));
    if (pids.size() == 2 && test::read_file(dir.file("run/metrics.jsonl")).size() > 1000) break;
  }
  EXPECT_EQ(pids.size(), 2u);
  auto t0 = std::chrono::steady_clock::now();
  if (pids.count(1)) kill(pids[1], signo);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), bg.pipe)) > 0) bg.output.append(buf, n);
  int status = pclose(bg.pipe);
  bg.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  bg.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (pids.count(1) && signo == SIGSTOP) kill(pids[1], SIGKILL);
  EXPECT_TRUE(rank_pids(dir.file("long.toml")).empty()) << "ranks left running";
  return bg;
}

// With restarts off (schedule.max_restarts = 0; tests/test_restart.cpp has them on).
TEST(MultiRankFailure, KilledRankStopsEveryRank) {
  auto bg = disrupt_rank1(SIGKILL, {"schedule.max_restarts=0"});
  EXPECT_NE(bg.exit_code, 0) << bg.output;
  EXPECT_LT(bg.seconds, 30.0) << bg.output;
  EXPECT_NE(bg.output.find("rank 1"), std::string::npos) << bg.output;
}

// Only rank 0 writes metrics.jsonl: when opening it throws, rank 1 (gone on to its first collective)
// must stop too. (A checkpoint.dir that cannot be created is refused before any rank starts.)
TEST(MultiRankFailure, ThrowingRankStopsEveryRank) {
  test::TempDir dir;
  test::write_file(dir.file("job.toml"), kMlp);
  fs::create_directories(dir.file("run/metrics.jsonl"));  // a directory where rank 0 opens its file
  auto t0 = std::chrono::steady_clock::now();
  auto r = run_command(GTRAIN_BINARY + " run " + dir.file("job.toml") + " --ranks 2 --run-dir " + dir.file("run"));
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(secs, 30.0);
  EXPECT_NE(r.output.find("[rank 0] gtrain: error: " + dir.file("run/metrics.jsonl") +
                          ": cannot open metrics file: Is a directory"),
            std::string::npos)
      << r.output;
  auto bad = run_command(GTRAIN_BINARY + " run " + dir.file("job.toml") + " --ranks 2 --run-dir " + dir.file("run2") +
                         " --set checkpoint.dir=/dev/null/ckpt");
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_EQ(bad.output,
            "gtrain: config error: /dev/null/ckpt: cannot create checkpoint directory: Not a directory; hint: check "
            "that its parent folder is writable\n");
  EXPECT_NE(r.output.find("[rank 0 on "), std::string::npos) << r.output;
  // The one-line error is the whole story: Open MPI's MPI_ABORT banner and its show_help noise are gone.
  EXPECT_EQ(r.output.find("MPI_ABORT"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("ORTE_ERROR_LOG"), std::string::npos) << r.output;
}

// A rank that stops answering (SIGSTOP) leaves its peer inside a collective: the launching gtrain
// sees rank 1's heartbeat stop, names it after parallel.collective_timeout_s and ends every rank.
TEST(MultiRankFailure, HungRankIsCaughtByCollectiveTimeout) {
  auto bg = disrupt_rank1(SIGSTOP, {"parallel.collective_timeout_s=3", "schedule.max_restarts=0"});
  EXPECT_EQ(bg.exit_code, 1) << bg.output;
  EXPECT_LT(bg.seconds, 30.0) << bg.output;
  // At a 3 s limit the rank named is the first past it, not always the stopped one (rank 0 waiting
  // for it may have stalled a moment earlier); tests/test_restart.cpp checks the naming at the
  // default limit.
  EXPECT_NE(bg.output.find("gtrain: error: rank "), std::string::npos) << bg.output;
  EXPECT_NE(bg.output.find(" made no progress for "), std::string::npos) << bg.output;
  EXPECT_NE(bg.output.find("(limit 3 s)"), std::string::npos) << bg.output;
  EXPECT_NE(bg.output.find("; stopping every rank"), std::string::npos) << bg.output;
}

}  // namespace
}  // namespace gtrain
