// test_llama_layouts.cpp: the llama model in every layout matches one rank for 10 steps (losses
// within 1e-5 relative, parameters within 1e-5): tensor parallel with key/value heads split (tp 2)
// and replicated (tp 4 over 2 kv heads), pipeline parallel with recompute, data parallel with
// ZeRO-2; and a Qwen-style model (per-head q/k norms, q/k/v biases, a head width other than
// n_embd / n_head, dropout) under tensor parallel, where the norms' partial gradients are summed.
#include <gtest/gtest.h>

#include "tests/support/multiproc_util.h"

namespace gtrain {
namespace {

std::string llama_job(const std::string& extra) {
  return R"(
[model]
name = "llama"
n_layer = 4
n_head = 4
n_kv_head = 2
n_embd = 32
intermediate_size = 64
seq_len = 16
vocab = 16
rope_theta = 500000.0
rope_scaling = "llama3"
rope_original_max_positions = 8
)" + extra +
         R"(
[data]
kind = "synthetic"
[train]
global_batch = 8
steps = 10
threads = 1  # the same matmul summation order on every layout
[optimizer]
eps = 1e-6   # see gpt4_job: keeps the parameter comparison at 1e-5 meaningful under tp
[log]
progress = "none"
)";
}

struct LlamaJob {
  static const std::string& config() {
    static const std::string c = llama_job("tied_embeddings = false");
    return c;
  }
};
struct QwenJob {
  static const std::string& config() {
    static const std::string c = llama_job("head_dim = 16\nqk_norm = true\nqkv_bias = true\ndropout = 0.1");
    return c;
  }
};
using LlamaLayouts = MatchesOneRank<LlamaJob>;
using QwenLayouts = MatchesOneRank<QwenJob>;

TEST_F(LlamaLayouts, TensorParallelSplitsOrReplicatesKeyValueHeads) {
  ASSERT_EQ(reference_->losses.size(), 10u) << reference_->output;
  check(2, {"parallel.tp=2"}, "dp=1 tp=2 pp=1", "tp 2 (one kv head per rank)");
  check(4, {"parallel.tp=4"}, "dp=1 tp=4 pp=1", "tp 4 (both kv heads on every rank)");
}

TEST_F(LlamaLayouts, PipelineWithRecomputeAndDataParallelWithZero2) {
  check(2, {"parallel.pp=2", "parallel.recompute=true", "parallel.micro_batch=4"},
        "dp=1 tp=1 pp=2 zero=0 micro_batch=4 grad_accum=2 recompute=on", "pp 2 with recompute");
  check(2, {"parallel.dp=2", "parallel.zero=2"}, "dp=2 tp=1 pp=1 zero=2", "dp 2 with ZeRO-2");
}

TEST_F(QwenLayouts, QkNormsBiasesAndDropoutUnderTensorParallel) {
  ASSERT_EQ(reference_->losses.size(), 10u) << reference_->output;
  check(2, {"parallel.tp=2"}, "dp=1 tp=2 pp=1", "tp 2");
  check(4, {"parallel.tp=4"}, "dp=1 tp=4 pp=1", "tp 4 (replicated kv heads)");
}

}  // namespace
}  // namespace gtrain
