// multiproc_util.h: running the gtrain binary on several ranks and comparing runs: per-step
// losses from metrics.jsonl and final parameters read back from the end checkpoint.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint/checkpoint.h"
#include "tests/support/test_util.h"

namespace gtrain {

inline std::vector<double> train_losses(const std::string& metrics_path) {
  std::vector<double> out;
  for (const auto& l : test::lines(test::read_file(metrics_path))) {
    auto j = nlohmann::json::parse(l);
    if (j.at("kind") == "train") out.push_back(j.at("loss").get<double>());
  }
  return out;
}

// Parameters (not optimizer state) of the newest checkpoint in a run directory.
inline std::map<std::string, torch::Tensor> final_params(const std::string& run_dir) {
  std::map<std::string, torch::Tensor> out;
  auto ckpts = list_checkpoints(run_dir + "/checkpoints");
  EXPECT_FALSE(ckpts.empty()) << run_dir;
  if (ckpts.empty()) return out;
  CheckpointReader ck(ckpts.back().path);
  for (const auto& name : ck.tensor_names()) {
    if (name.find("exp_avg") == std::string::npos && name.find("momentum_buffer") == std::string::npos &&
        name.rfind("optimizer.", 0) != 0) {
      out[name] = ck.read(name);
    }
  }
  return out;
}

// A small MLP classifier on synthetic data, global batch 32, for data-parallel comparisons.
inline std::string mlp_job(int64_t steps) {
  return R"(
[model]
name = "mlp"
hidden = [32, 16]
[data]
kind = "synthetic"
synthetic_samples = 2048
synthetic_features = 12
synthetic_classes = 4
[optimizer]
learning_rate = 0.01
[train]
global_batch = 32
steps = )" +
         std::to_string(steps) +
         R"(
grad_clip = 0.5
warmup_steps = 5
threads = 1
[log]
progress = "none"
)";
}

// A 4-block transformer (4 heads, width 32) for layout comparisons: one thread, so every layout
// sums in one order.
inline std::string gpt4_job(int64_t global_batch, int64_t steps) {
  return R"(
[model]
name = "gpt"
n_layer = 4
n_head = 4
n_embd = 32
seq_len = 16
vocab = 16
[data]
kind = "synthetic"
[train]
global_batch = )" +
         std::to_string(global_batch) + "\nsteps = " + std::to_string(steps) + R"(
threads = 1  # the same matmul summation order on every layout
[optimizer]
# Tensor parallel sums partial products in another order (float32 rounding ~1e-7); with eps = 1e-8
# Adam turns that into ~1e-5 steps on weights whose gradient is nearly zero. A larger eps keeps
# the parameter comparison at 1e-5 meaningful.
eps = 1e-6
[log]
progress = "none"
)";
}

struct RunResult {
  std::vector<double> losses;
  std::map<std::string, torch::Tensor> params;
  std::string output;
};

// Runs the binary and reads back per-step losses and the final parameters from its checkpoint.
inline RunResult run_gtrain(const std::string& config_text, int ranks, const std::vector<std::string>& sets) {
  test::TempDir dir;
  test::write_file(dir.file("job.toml"), config_text);
  std::string cmd = GTRAIN_BINARY + " run " + dir.file("job.toml") + " --run-dir " + dir.file("run") + " --ranks " +
                    std::to_string(ranks);
  for (const auto& s : sets) cmd += " --set " + s;
  auto r = test::run_command(cmd);
  RunResult out;
  out.output = r.output;
  EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
  out.losses = train_losses(dir.file("run/metrics.jsonl"));
  out.params = final_params(dir.file("run"));
  return out;
}

inline void expect_same_run(const RunResult& ref, const RunResult& got, const std::string& what,
                            double param_tol = 1e-5) {
  ASSERT_EQ(got.losses.size(), ref.losses.size()) << what << "\n" << got.output;
  for (size_t i = 0; i < ref.losses.size(); ++i) {
    EXPECT_NEAR(got.losses[i], ref.losses[i], 1e-5 * std::abs(ref.losses[i])) << what << " step " << i + 1;
  }
  ASSERT_EQ(got.params.size(), ref.params.size()) << what;
  for (const auto& kv : ref.params) {
    const double diff = (got.params.at(kv.first) - kv.second).abs().max().item<double>();
    EXPECT_LE(diff, param_tol) << what << " parameter " << kv.first;
  }
}

// FNV-1a over every parameter's bytes, in name order (train.reproducible = "bitwise" comparisons).
inline uint64_t checksum(const std::map<std::string, torch::Tensor>& params) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& [name, t] : params) {
    const auto c = t.contiguous();
    const auto* p = static_cast<const unsigned char*>(c.data_ptr());
    for (size_t i = 0; i < c.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
    for (char ch : name) h = (h ^ static_cast<unsigned char>(ch)) * 1099511628211ull;
  }
  return h;
}

inline void expect_bitwise(const RunResult& ref, const RunResult& got, const std::string& what) {
  ASSERT_EQ(got.losses.size(), ref.losses.size()) << what << "\n" << got.output;
  size_t differ = 0;
  for (size_t i = 0; i < ref.losses.size(); ++i) {
    if (got.losses[i] != ref.losses[i]) {
      if (differ++ == 0)
        ADD_FAILURE() << what << ": step " << i + 1 << " loss " << got.losses[i] << " vs " << ref.losses[i];
    }
  }
  EXPECT_EQ(differ, 0u) << what << ": steps whose loss differs";
  EXPECT_EQ(checksum(got.params), checksum(ref.params)) << what << ": final weights";
}

// A suite whose tests compare runs of Job::config() with its one-rank run, made once per suite.
template <class Job>
class MatchesOneRank : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { reference_ = new RunResult(run_gtrain(Job::config(), 1, {})); }
  static void TearDownTestSuite() {
    delete reference_;
    reference_ = nullptr;
  }
  // `ranks` ranks in explicit mode with `sets`: `expect` in the output, the one-rank run's losses
  // and parameters.
  static void check(int ranks, std::vector<std::string> sets, const std::string& expect, const std::string& what) {
    sets.insert(sets.begin(), "parallel.mode=explicit");
    auto r = run_gtrain(Job::config(), ranks, sets);
    EXPECT_NE(r.output.find(expect), std::string::npos) << r.output;
    expect_same_run(*reference_, r, what);
  }
  static inline RunResult* reference_ = nullptr;
};

}  // namespace gtrain
