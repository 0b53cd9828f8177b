// test_lora.cpp: LoRA adapters on one process: the adapted layers against their formula, what
// apply_lora adds and freezes (counts against rank x (in + out)), a fresh adapter computing exactly
// the base model, the bf16 base, and the one-line errors of bad [adapter] settings.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <cmath>
#include <map>
#include <string>

#include "runtime/core/config/job_config.h"
#include "runtime/core/errors.h"
#include "runtime/models/gpt.h"
#include "runtime/models/llama.h"
#include "runtime/models/lora.h"
#include "runtime/models/parallel_layers.h"
#include "tests/support/test_util.h"

namespace gtrain {
namespace {

using test::token_spec;

ModelConfig tiny_llama() {
  ModelConfig c;
  c.name = "llama";
  c.n_layer = 2;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.n_embd = 32;
  c.intermediate_size = 48;
  c.seq_len = 12;
  c.tied_embeddings = false;
  return c;
}

AdapterConfig lora(std::vector<std::string> targets, int64_t rank = 4) {
  AdapterConfig a;
  a.kind = "lora";
  a.rank = rank;
  a.alpha = 8.0;
  a.targets = std::move(targets);
  return a;
}

// y = x W^T + b + alpha / r x B A x, for a column- and a row-parallel layer, B set non-zero.
TEST(Lora, AdaptedLayersComputeTheirFormula) {
  torch::manual_seed(3);
  ColumnParallelLinear col(10, 6, true);
  RowParallelLinear row(10, 6, true);
  LoraOptions o;
  o.rank = 3;
  o.scaling = 8.0 / 3.0;
  col->add_lora(o);
  row->add_lora(o);
  for (auto* l : {&col->lora_B, &row->lora_B}) {
    EXPECT_EQ(l->abs().max().item<double>(), 0.0) << "B starts at zero";
    torch::NoGradGuard ng;
    l->normal_();
  }
  // A is kaiming-uniform with a = sqrt(5): within +-1 / sqrt(in).
  EXPECT_LE(col->lora_A.abs().max().item<double>(), 1.0 / std::sqrt(10.0));
  EXPECT_GT(col->lora_A.abs().max().item<double>(), 0.5 / std::sqrt(10.0));
  auto x = torch::randn({2, 5, 10});
  for (auto [y, w, b, A, B] : {std::make_tuple(col->forward(x), col->weight, col->bias, col->lora_A, col->lora_B),
                               std::make_tuple(row->forward(x), row->weight, row->bias, row->lora_A, row->lora_B)}) {
    auto want = torch::matmul(x, w.t()) + b + (8.0 / 3.0) * torch::matmul(torch::matmul(x, A.t()), B.t());
    EXPECT_TRUE(torch::allclose(y, want, 1e-5, 1e-6));
  }
}

TEST(Lora, ApplyAddsAdaptersAndFreezesTheBase) {
  torch::manual_seed(1);
  const ModelConfig c = tiny_llama();
  Llama m(c, token_spec(c.seq_len, 40));
  const int64_t total = m.num_parameters();
  const LoraSummary s = apply_lora(m, lora({"q", "v", "down"}));
  // Per layer: q 32 -> 32, v 32 -> 16 (2 kv heads of 8), down 48 -> 32; rank 4 x (in + out) each.
  const int64_t per_layer = 4 * (32 + 32) + 4 * (32 + 16) + 4 * (48 + 32);
  EXPECT_EQ(s.adapters, 6);
  EXPECT_EQ(s.trainable, 2 * per_layer);
  EXPECT_EQ(s.frozen, total);
  for (const auto& kv : m.named_parameters()) {
    EXPECT_EQ(kv.value().requires_grad(), is_lora_parameter(kv.key())) << kv.key();
  }
  EXPECT_TRUE(m.named_parameters().contains("layers.1.mlp.down_proj.lora_B"));
  EXPECT_EQ(m.named_parameters()["layers.0.self_attn.v_proj.lora_B"].sizes(), torch::IntArrayRef({16, 4}));
}

TEST(Lora, FreshAdaptersComputeTheBaseModelAndTrainOnlyThemselves) {
  const ModelConfig c = tiny_llama();
  torch::manual_seed(7);
  Llama base(c, token_spec(c.seq_len, 40));
  torch::manual_seed(7);
  Llama adapted(c, token_spec(c.seq_len, 40));
  apply_lora(adapted, lora({"all"}));
  auto ids = torch::randint(0, 40, {3, c.seq_len});
  auto target = torch::randint(0, 40, {3, c.seq_len});
  EXPECT_TRUE(torch::equal(base.forward(ids), adapted.forward(ids)));
  auto loss = adapted.loss_sum(adapted.forward(ids), target);
  loss.backward();
  int64_t with_grad = 0;
  for (const auto& kv : adapted.named_parameters()) {
    if (kv.value().grad().defined()) {
      ++with_grad;
      EXPECT_TRUE(is_lora_parameter(kv.key())) << kv.key();
    }
  }
  EXPECT_EQ(with_grad, 2 * 7 * 2);  // A and B of 7 projections in 2 layers
}

// parallel.recompute: the frozen embedding's output needs no gradient, yet every block's adapters
// get the gradients they get without recompute (the run failed at its first backward before).
TEST(Lora, RecomputeGivesTheAdaptersTheirGradients) {
  const ModelConfig c = tiny_llama();
  auto ids = torch::randint(0, 40, {3, c.seq_len});
  auto target = torch::randint(0, 40, {3, c.seq_len});
  std::map<std::string, torch::Tensor> grads[2];
  for (int recompute : {0, 1}) {
    torch::manual_seed(9);
    Llama m(c, token_spec(c.seq_len, 40));
    apply_lora(m, lora({"all"}));
    for (auto& kv : m.named_parameters()) {
      torch::NoGradGuard ng;
      if (kv.key().find("lora_B") != std::string::npos) kv.value().normal_(0.0, 0.1);  // A's gradient too
    }
    m.set_recompute(recompute == 1);
    m.loss_sum(m.forward(ids), target).backward();
    for (const auto& kv : m.named_parameters()) {
      if (kv.value().grad().defined()) grads[recompute][kv.key()] = kv.value().grad();
    }
  }
  ASSERT_EQ(grads[1].size(), 2u * 7u * 2u);  // A and B of 7 projections in 2 layers
  for (const auto& [name, g] : grads[0]) {
    ASSERT_TRUE(grads[1].count(name)) << name;
    EXPECT_GT(g.abs().max().item<double>(), 0.0) << name;
    EXPECT_TRUE(torch::allclose(grads[1][name], g, 1e-5, 1e-7)) << name;
  }
}

TEST(Lora, Bf16BaseComputesWithFp32Activations) {
  const ModelConfig c = tiny_llama();
  torch::manual_seed(5);
  Llama m(c, token_spec(c.seq_len, 40));
  apply_lora(m, lora({"q", "v"}));
  auto ids = torch::randint(0, 40, {2, c.seq_len});
  auto fp32 = m.forward(ids);
  hold_frozen_base(m, "bf16");
  for (const auto& kv : m.named_parameters()) {
    const bool low = kv.value().scalar_type() == torch::kBFloat16;
    EXPECT_EQ(low, !is_lora_parameter(kv.key()) && kv.value().dim() >= 2) << kv.key();
  }
  auto bf16 = m.forward(ids);
  EXPECT_EQ(bf16.scalar_type(), torch::kFloat);
  // bf16 weights (8 bits of mantissa) move the logits by about 1%, not more.
  const double rel = (bf16 - fp32).abs().max().item<double>() / fp32.abs().max().item<double>();
  EXPECT_LT(rel, 0.03);
  EXPECT_GT(rel, 0.0);
}

TEST(Lora, GptTargetsSitOnItsProjections) {
  ModelConfig c;
  c.name = "gpt";
  c.n_layer = 1;
  c.n_head = 2;
  c.n_embd = 16;
  c.seq_len = 8;
  torch::manual_seed(2);
  Gpt m(c, token_spec(8, 30));
  const LoraSummary s = apply_lora(m, lora({"qkv", "o", "up", "down"}, 2));
  EXPECT_EQ(s.trainable, 2 * (16 + 48) + 2 * (16 + 16) + 2 * (16 + 64) + 2 * (64 + 16));
  EXPECT_TRUE(m.named_parameters().contains("h.0.attn.qkv.lora_A"));
}

TEST(Lora, BadSettingsAreOneLineErrors) {
  const ModelConfig c = tiny_llama();
  Llama m(c, token_spec(c.seq_len, 40));
  try {
    apply_lora(m, lora({"qkv"}));
    FAIL() << "a llama has no qkv projection";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("adapter.targets: 'qkv' is not a projection of this model"), std::string::npos)
        << e.what();
  }
  Llama m2(c, token_spec(c.seq_len, 40));
  try {
    apply_lora(m2, lora({"v"}, 20));  // v: 32 -> 16
    FAIL() << "rank 20 is above v_proj's 16 outputs";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("adapter.rank = 20 is above layers.0.self_attn.v_proj's smaller side"),
              std::string::npos)
        << e.what();
  }
  // Caught with the config: a target the family has not, a rank above the width, LoRA on an mlp.
  auto problem = [](const std::string& toml) {
    try {
      parse_job_config(toml + "[train]\nsteps = 1\n", "job.toml", {}, {});
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(problem("[model]\nname = \"gpt\"\n[adapter]\nkind = \"lora\"\ntargets = [\"gate\"]\n")
                .find("adapter.targets: 'gate' is not a projection of a gpt model; expected qkv, o, up, down"),
            std::string::npos);
  EXPECT_NE(problem("[model]\nname = \"gpt\"\nn_embd = 64\n[adapter]\nkind = \"lora\"\nrank = 65\n")
                .find("adapter.rank = 65 is above the model width model.n_embd = 64"),
            std::string::npos);
  EXPECT_NE(problem("[model]\nname = \"mlp\"\n[adapter]\nkind = \"lora\"\n").find("needs a gpt or llama model"),
            std::string::npos);
  EXPECT_NE(problem("[adapter]\nkind = \"lora\"\nrank = 0\n").find("adapter.rank"), std::string::npos);
}

}  // namespace
}  // namespace gtrain
