// test_adapter_shapes.cpp: LoRA parameter counts from the model's shape, against PEFT's published
// counts for Llama-3.1-8B and hand arithmetic for gpt.
#include <gtest/gtest.h>

#include "runtime/core/adapter_shapes.h"
#include "runtime/core/config/model_presets.h"

namespace gtrain {
namespace {

ModelConfig llama_8b() {
  return apply_model_preset(ModelConfig{}, "llama-3.1-8b");
}

AdapterConfig lora(int64_t rank, std::vector<std::string> targets) {
  AdapterConfig a;
  a.kind = "lora";
  a.rank = rank;
  a.targets = std::move(targets);
  return a;
}

// Llama-3.1-8B: C = 4096, 32 heads of 128, 8 key/value heads (KV D = 1024), I = 14336, 32 layers.
// r = 8 on q and v: 32 x 8 x ((4096 + 4096) + (4096 + 1024)) = 32 x 8 x 13312 = 3,407,872, what
// PEFT's print_trainable_parameters() reports ("trainable params: 3,407,872").
TEST(AdapterShapes, Llama8bQvRank8MatchesPeft) {
  const ModelConfig m = llama_8b();
  EXPECT_EQ(lora_parameters_per_block(m, lora(8, {"q", "v"})), 8 * (8192 + 5120));
  EXPECT_EQ(lora_parameter_count(m, lora(8, {"q", "v"})), 3407872);
}

// All seven projections at r = 16: per layer q 8192, k 5120, v 5120, o 8192, gate 18432, up 18432,
// down 18432 = 81920 wide; 32 x 16 x 81920 = 41,943,040 (PEFT's count for target_modules="all-linear").
TEST(AdapterShapes, Llama8bAllTargetsRank16) {
  const ModelConfig m = llama_8b();
  EXPECT_EQ(lora_parameter_count(m, lora(16, {"all"})), 41943040);
  EXPECT_EQ(lora_parameter_count(m, lora(16, {"q", "k", "v", "o", "gate", "up", "down"})), 41943040);
  const auto p = lora_target_projections(m, lora(16, {"down", "q"}));
  ASSERT_EQ(p.size(), 2u);  // in the model's order, whatever the targets' order
  EXPECT_EQ(p[0].name, "q");
  EXPECT_EQ(p[1].name, "down");
  EXPECT_EQ(p[1].in, 14336);
  EXPECT_EQ(p[1].out, 4096);
}

// gpt (C = 768, 12 layers) at r = 4: qkv 4 x (768 + 2304), o 4 x 1536, up and down 4 x 3840 each:
// 4 x (3072 + 1536 + 3840 + 3840) = 49152 a block, 589,824 in all.
TEST(AdapterShapes, GptProjectionsAndNoneWithoutLora) {
  ModelConfig m;
  m.name = "gpt";
  m.n_layer = 12, m.n_head = 12, m.n_embd = 768;
  EXPECT_EQ(lora_parameters_per_block(m, lora(4, {"all"})), 49152);
  EXPECT_EQ(lora_parameter_count(m, lora(4, {"all"})), 589824);
  EXPECT_EQ(lora_parameter_count(m, lora(4, {"qkv"})), 12 * 4 * 3072);
  AdapterConfig none;
  EXPECT_EQ(lora_parameter_count(m, none), 0);
  m.name = "mlp";
  EXPECT_EQ(lora_parameter_count(m, lora(4, {"all"})), 0);
}

}  // namespace
}  // namespace gtrain
