// test_models.cpp: model registry, plugin loading, and the built-in models' shapes and behaviour.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "runtime/common/elf_needed.h"
#include "runtime/common/torch_compat.h"
#include "runtime/core/errors.h"
#include "runtime/models/activations.h"
#include "runtime/models/fused_loss.h"
#include "runtime/models/gpt.h"
#include "runtime/models/keyed_dropout.h"
#include "runtime/models/model_registry.h"
#include "tests/support/test_util.h"

namespace gtrain {
namespace {

DataSpec image_spec() {
  DataSpec s;
  s.input_shape = {1, 28, 28};
  s.num_classes = 10;
  return s;
}

using test::token_spec;

// A small gpt: `n_layer` blocks of 2 heads, 16 wide, `seq_len` tokens.
ModelConfig small_gpt(int64_t n_layer, int64_t seq_len) {
  ModelConfig c;
  c.name = "gpt";
  c.n_layer = n_layer;
  c.n_head = 2;
  c.n_embd = 16;
  c.seq_len = seq_len;
  return c;
}

TEST(Registry, HasBuiltinsAndRejectsUnknownWithSuggestion) {
  auto& reg = ModelRegistry::global();
  for (const char* n : {"mlp", "cnn", "gpt"}) EXPECT_TRUE(reg.has(n)) << n;
  ModelConfig c;
  c.name = "gtp";
  try {
    reg.create(c, image_spec());
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("unknown model 'gtp'; did you mean 'gpt'?"), std::string::npos) << msg;
    EXPECT_NE(msg.find("registered: cnn, gpt, llama, mlp"), std::string::npos) << msg;
  }
}

// gtrain lists the built-in models without LibTorch (builtin_model_names): the registry's own.
TEST(Registry, BuiltinNamesAreTheTorchFreeList) {
  ModelRegistry reg;
  register_builtin_models(reg);
  EXPECT_EQ(reg.names(), builtin_model_names());
}

TEST(Registry, UserFactoryCanBeAdded) {
  ModelRegistry reg;
  register_builtin_models(reg);
  int calls = 0;
  reg.add("my_mlp", [&](const ModelConfig& c, const DataSpec& s) {
    ++calls;
    ModelConfig inner = c;
    inner.name = "mlp";
    return ModelRegistry::global().create(inner, s);
  });
  ModelConfig c;
  c.name = "my_mlp";
  auto m = reg.create(c, image_spec());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(m->forward(torch::zeros({2, 1, 28, 28})).sizes(), (std::vector<int64_t>{2, 10}));
}

// A factory that throws a foreign exception (a plugin's, LibTorch's): one line naming the model and
// its plugin; gtrain's own errors pass unchanged.
TEST(Registry, FactoryFailureNamesTheModel) {
  ModelRegistry reg;
  reg.add("broken", [](const ModelConfig&, const DataSpec&) -> std::shared_ptr<Model> {
    throw std::runtime_error("ctor boom\nstack trace line");
  });
  reg.add("picky", [](const ModelConfig&, const DataSpec&) -> std::shared_ptr<Model> {
    throw ConfigError("model.hidden: picky wants 3 layers");
  });
  ModelConfig c;
  c.name = "broken";
  c.plugin = "libbroken.so";
  try {
    reg.create(c, image_spec());
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "model.name = 'broken' (model.plugin 'libbroken.so'): building the model failed: ctor boom");
  }
  c.name = "picky";
  try {
    reg.create(c, image_spec());
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "model.hidden: picky wants 3 layers");
  }
}

TEST(Registry, PluginRegistersAModelThatTrains) {
  ModelRegistry reg;
  reg.load_plugin(GTRAIN_PLUGIN);
  ASSERT_TRUE(reg.has("tiny_resnet"));
  ModelConfig c;
  c.name = "tiny_resnet";
  c.channels = {8};
  auto m = reg.create(c, image_spec());
  auto x = torch::randn({4, 1, 28, 28});
  auto y = torch::tensor({1, 2, 3, 4}, torch::kLong);
  auto out = m->forward(x);
  EXPECT_EQ(out.sizes(), (std::vector<int64_t>{4, 10}));
  auto loss = m->loss_sum(out, y);
  loss.backward();
  int with_grad = 0;
  for (auto& p : m->parameters()) with_grad += p.grad().defined() && p.grad().abs().sum().item<double>() > 0;
  EXPECT_EQ(with_grad, static_cast<int>(m->parameters().size()));
}

// A factory that returns no model or throws a non-exception, and a second model of a registered
// name (a plugin's "mlp"), are one-line ConfigErrors, not a crash or a silent replacement.
TEST(Registry, BadFactoriesAndNameClashesAreConfigErrors) {
  ModelRegistry reg;
  register_builtin_models(reg);
  auto error_of = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const ConfigError& e) {
      return e.hint().empty() ? std::string(e.what()) : std::string(e.what()) + " | hint: " + e.hint();
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of([&] { reg.add("mlp", [](const ModelConfig&, const DataSpec&) { return nullptr; }); }),
            "model registry: 'mlp' is already a registered model | hint: give the new one a name of its own");
  reg.add("null", [](const ModelConfig&, const DataSpec&) -> std::shared_ptr<Model> { return nullptr; });
  reg.add("int", [](const ModelConfig&, const DataSpec&) -> std::shared_ptr<Model> { throw 7; });
  ModelConfig c;
  c.name = "null";
  c.plugin = "libp.so";
  EXPECT_EQ(error_of([&] { reg.create(c, image_spec()); }),
            "model.name = 'null' (model.plugin 'libp.so'): building the model failed: its factory returned no model "
            "(nullptr)");
  c.name = "int";
  EXPECT_EQ(error_of([&] { reg.create(c, image_spec()); }),
            "model.name = 'int' (model.plugin 'libp.so'): building the model failed: its factory threw something "
            "other than an exception");
  // One library under two spellings of its path registers its models once.
  const std::string path = GTRAIN_PLUGIN;
  const auto slash = path.rfind('/');
  ASSERT_NE(slash, std::string::npos);
  reg.load_plugin(path);
  EXPECT_EQ(error_of([&] { reg.load_plugin(path.substr(0, slash) + "/./" + path.substr(slash + 1)); }), "no error");
  EXPECT_TRUE(reg.has("tiny_resnet"));
}

TEST(Registry, BadPluginPathIsAConfigError) {
  ModelRegistry reg;
  try {
    reg.load_plugin("/no/such/plugin.so");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("model.plugin: cannot load '/no/such/plugin.so'"), std::string::npos);
  }
}

// A plugin linked against another LibTorch would crash inside dlopen (its LibTorch's static
// initialisers register operators with ours): it is refused from its NEEDED entries, before loading.
// The stand-in is a library that needs "libtorch_cpu.so.0.1", built here with the C compiler.
TEST(Registry, PluginOfAnotherLibTorchIsRefusedBeforeLoading) {
  test::TempDir dir;
  test::write_file(dir.file("stub.c"), "int gtrain_stub_torch(void) { return 1; }\n");
  test::write_file(
      dir.file("plugin.c"),
      "int gtrain_stub_torch(void);\nvoid gtrain_register_models(void* r) { (void)r; gtrain_stub_torch(); }\n");
  const std::string build = "cd " + dir.path() +
                            " && cc -shared -fPIC -o libtorch_cpu.so.0.1 -Wl,-soname,libtorch_cpu.so.0.1 stub.c"
                            " && cc -shared -fPIC -o plugin.so plugin.c -Wl,--no-as-needed ./libtorch_cpu.so.0.1 2>&1";
  ASSERT_EQ(std::system(build.c_str()), 0) << build;
  ASSERT_EQ(elf_needed_libraries(dir.file("plugin.so")).front(), "libtorch_cpu.so.0.1");
  ModelRegistry reg;
  std::string what = "no error";
  try {
    reg.load_plugin(dir.file("plugin.so"));
  } catch (const ConfigError& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("model.plugin: '" + dir.file("plugin.so") +
                      "' links libtorch_cpu.so.0.1, a LibTorch this gtrain does not run (it runs libtorch_cpu.so"),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("LibTorch " TORCH_VERSION ")"), std::string::npos) << what;
  // Not loaded: dlopen would have found the stub beside it only through $ORIGIN, so a load would
  // have failed with dlopen's error instead.
  EXPECT_EQ(what.find("cannot load"), std::string::npos) << what;
  // This process's own LibTorch is among the loaded libraries the check compares with.
  const auto loaded = loaded_library_names();
  EXPECT_TRUE(std::any_of(loaded.begin(), loaded.end(),
                          [](const std::string& l) { return l.rfind("libtorch_cpu.so", 0) == 0; }));
}

TEST(Models, MlpAndCnnShapes) {
  auto& reg = ModelRegistry::global();
  ModelConfig c;
  c.name = "mlp";
  c.hidden = {32, 16};
  auto mlp = reg.create(c, image_spec());
  EXPECT_EQ(mlp->forward(torch::zeros({3, 1, 28, 28})).sizes(), (std::vector<int64_t>{3, 10}));
  EXPECT_EQ(mlp->num_parameters(), 784 * 32 + 32 + 32 * 16 + 16 + 16 * 10 + 10);
  EXPECT_FALSE(mlp->stats(image_spec()).supports_tp);  // classifiers are data parallel only
  EXPECT_FALSE(mlp->stats(image_spec()).supports_pp);
  c.name = "cnn";
  c.channels = {4, 8};
  auto cnn = reg.create(c, image_spec());
  EXPECT_EQ(cnn->forward(torch::zeros({2, 1, 28, 28})).sizes(), (std::vector<int64_t>{2, 10}));
  // Classifiers refuse token data.
  EXPECT_THROW(reg.create(c, token_spec(8, 16)), ConfigError);
}

TEST(Models, GptShapesTyingAndBlocks) {
  ModelConfig c = small_gpt(3, 8);
  torch::manual_seed(0);
  auto m = ModelRegistry::global().create(c, token_spec(8, 50));
  auto idx = torch::randint(0, 50, {2, 8}, torch::kLong);
  EXPECT_EQ(m->forward(idx).sizes(), (std::vector<int64_t>{2, 8, 50}));
  EXPECT_EQ(m->blocks().size(), 3u);
  EXPECT_EQ(m->stats(token_spec(8, 50)).blocks, 3);
  // What the planner needs, equal to the shape formula it uses for models it does not build.
  const ModelStats st = m->stats(token_spec(8, 50));
  EXPECT_EQ(st.params, m->num_parameters());
  EXPECT_EQ(st.params, gpt_stats(3, 2, 16, 8, 50, true).params);
  EXPECT_EQ(st.heads, 2);
  EXPECT_EQ(st.hidden, 16);
  EXPECT_EQ(st.seq_len, 8);
  EXPECT_EQ(st.vocab, 50);
  EXPECT_EQ(st.params_per_block, 12 * 16 * 16 + 13 * 16);
  EXPECT_TRUE(st.supports_tp && st.supports_pp);
  // Tied: no output matrix. Per block: 2 LN (4C), qkv (3C^2+3C), proj (C^2+C), fc (4C^2+4C), proj (4C^2+C).
  const int64_t C = 16, V = 50, T = 8;
  const int64_t block = 12 * C * C + 13 * C;
  EXPECT_EQ(m->num_parameters(), V * C + T * C + 3 * block + 2 * C);
  c.tied_embeddings = false;
  auto untied = ModelRegistry::global().create(c, token_spec(8, 50));
  EXPECT_EQ(untied->num_parameters(), m->num_parameters() + V * C);
  // Inputs longer than seq_len are refused clearly.
  EXPECT_THROW(m->forward(torch::zeros({1, 9}, torch::kLong)), ConfigError);
}

TEST(Models, GptIsCausal) {
  ModelConfig c = small_gpt(2, 10);
  torch::manual_seed(1);
  auto m = ModelRegistry::global().create(c, token_spec(10, 20));
  m->eval();
  auto a = torch::randint(0, 20, {1, 10}, torch::kLong);
  auto b = a.clone();
  b[0][6] = (a[0][6].item<int64_t>() + 1) % 20;
  auto la = m->forward(a), lb = m->forward(b);
  EXPECT_TRUE(torch::allclose(la.slice(1, 0, 6), lb.slice(1, 0, 6), 1e-6, 1e-6));
  EXPECT_FALSE(torch::allclose(la.slice(1, 6, 10), lb.slice(1, 6, 10), 1e-6, 1e-6));
}

// Keyed dropout: a row's mask is a function of (seed, global sample, site[, global head]), so
// splitting a batch into micro-batches, replicas or head shards draws the same masks.
TEST(KeyedDropout, MaskDependsOnGlobalSampleNotOnTheSplit) {
  const torch::Device cpu(torch::kCPU);
  torch::Tensor whole, part, other_seed, other_site;
  {
    DropoutRowsScope rows(7, 10);
    whole = keyed_drop_mask({6, 5, 8}, 0.5, 3, cpu);
    other_site = keyed_drop_mask({6, 5, 8}, 0.5, 4, cpu);
  }
  {
    DropoutRowsScope rows(7, 12);  // samples 12 and 13: rows 2 and 3 of the whole batch
    part = keyed_drop_mask({2, 5, 8}, 0.5, 3, cpu);
  }
  {
    DropoutRowsScope rows(8, 10);
    other_seed = keyed_drop_mask({6, 5, 8}, 0.5, 3, cpu);
  }
  EXPECT_TRUE(torch::equal(part, whole.slice(0, 2, 4)));
  EXPECT_FALSE(torch::equal(whole, other_seed));
  EXPECT_FALSE(torch::equal(whole, other_site));
  EXPECT_FALSE(torch::equal(whole[0], whole[1]));  // rows differ
  EXPECT_FALSE(current_dropout_rows().active);     // the scopes restored the outer state
}

TEST(KeyedDropout, HeadOffsetDrawsThoseHeadsMasks) {
  const torch::Device cpu(torch::kCPU);
  DropoutRowsScope rows(1, 0);
  auto all = keyed_drop_mask({3, 4, 6, 6}, 0.3, 1, cpu, /*head_offset=*/0);
  auto upper = keyed_drop_mask({3, 2, 6, 6}, 0.3, 1, cpu, /*head_offset=*/2);  // tp rank 1 of 2
  EXPECT_TRUE(torch::equal(upper, all.slice(1, 2, 4)));
  EXPECT_FALSE(torch::equal(all.select(1, 0), all.select(1, 1)));
}

TEST(KeyedDropout, RateScaleAndGradient) {
  auto x = torch::ones({64, 1000}, torch::requires_grad());
  torch::Tensor y;
  {
    DropoutRowsScope rows(5, 100);
    y = keyed_dropout(x, 0.3, 2, /*train=*/true);
    EXPECT_TRUE(torch::equal(keyed_dropout(x, 0.3, 2, /*train=*/false), x));
  }
  const double dropped = (y == 0).to(torch::kDouble).mean().item<double>();
  EXPECT_NEAR(dropped, 0.3, 0.01);  // 64000 draws: 5 standard deviations
  auto kept = y.masked_select(y != 0);
  EXPECT_NEAR(kept.min().item<double>(), 1.0 / 0.7, 1e-6);
  EXPECT_NEAR(kept.max().item<double>(), 1.0 / 0.7, 1e-6);
  y.sum().backward();
  EXPECT_TRUE(torch::allclose(x.grad(), y.detach()));  // d(sum)/dx = mask / (1 - p)
  // Outside a scope (a model called directly) it is plain dropout.
  auto plain = keyed_dropout(torch::ones({64, 1000}), 0.3, 2, /*train=*/true);
  EXPECT_NEAR((plain == 0).to(torch::kDouble).mean().item<double>(), 0.3, 0.01);
}

// The whole GPT with dropout in training: rows 2..3 computed alone (as a micro-batch holding
// global samples 2 and 3) give the same output as in the batch of 4.
TEST(KeyedDropout, GptOutputOfARowDoesNotDependOnItsBatch) {
  ModelConfig c = small_gpt(2, 8);
  c.dropout = 0.3;
  torch::manual_seed(1);
  auto m = ModelRegistry::global().create(c, token_spec(8, 20));
  m->train();
  auto idx = torch::randint(0, 20, {4, 8}, torch::kLong);
  torch::Tensor whole, part, no_dropout;
  {
    DropoutRowsScope rows(3, 0);
    whole = m->forward(idx);
  }
  {
    DropoutRowsScope rows(3, 2);
    part = m->forward(idx.slice(0, 2, 4));
  }
  m->eval();
  no_dropout = m->forward(idx);
  EXPECT_TRUE(torch::allclose(part, whole.slice(0, 2, 4), 1e-5, 1e-5));
  EXPECT_FALSE(torch::allclose(whole, no_dropout, 1e-3, 1e-3));  // dropout did act
}

TEST(Models, GptRejectsBadShapes) {
  ModelConfig c;
  c.name = "gpt";
  c.n_embd = 30;
  c.n_head = 4;
  EXPECT_THROW(ModelRegistry::global().create(c, token_spec(8, 10)), ConfigError);
  c.n_embd = 32;
  c.vocab = 5;  // smaller than the data's
  EXPECT_THROW(ModelRegistry::global().create(c, token_spec(8, 10)), ConfigError);
  c.vocab = 0;
  EXPECT_THROW(ModelRegistry::global().create(c, image_spec()), ConfigError);
}

TEST(Models, LossSumIsPerSampleMeanOverTokens) {
  auto logits = torch::zeros({2, 4, 8});  // uniform: every token loss is ln 8
  auto target = torch::zeros({2, 4}, torch::kLong);
  ModelConfig c;
  c.name = "mlp";
  auto m = ModelRegistry::global().create(c, image_spec());
  EXPECT_NEAR(m->loss_sum(logits, target).item<double>(), 2 * std::log(8.0), 1e-5);
}

}  // namespace
}  // namespace gtrain

// The CPU GELU (tanh form through sigmoid, own backward) is the same function as at::gelu(x, "tanh"):
// values and gradients agree to fp32 rounding, across saturation, and gradcheck passes in double.
TEST(Activations, GeluTanhMatchesATen) {
  torch::manual_seed(3);
  auto x = torch::cat({torch::randn({4096}) * 3.0, torch::linspace(-30, 30, 601)}).requires_grad_(true);
  auto x_ref = x.detach().clone().requires_grad_(true);
  auto g = torch::randn_like(x);
  auto y = gtrain::gelu_tanh(x);
  auto y_ref = torch::gelu(x_ref, "tanh");
  EXPECT_LT((y - y_ref).abs().max().item<double>(), 2e-6);
  y.backward(g);
  y_ref.backward(g);
  EXPECT_LT((x.grad() - x_ref.grad()).abs().max().item<double>(), 2e-6 * g.abs().max().item<double>());
  // Central differences in double: the derivative is right, not only close to ATen's.
  auto xd = (torch::randn({256}, torch::kDouble) * 3.0).requires_grad_(true);
  gtrain::gelu_tanh(xd).sum().backward();
  const double h = 1e-6;
  auto fd = (gtrain::gelu_tanh(xd.detach() + h) - gtrain::gelu_tanh(xd.detach() - h)) / (2 * h);
  EXPECT_LT((xd.grad() - fd).abs().max().item<double>(), 1e-8);
}

namespace gtrain {
namespace {

// The fused output layer + cross-entropy equals the plain one: loss and both gradients, in fp32
// to rounding (blocks of 7 rows, so several blocks and a ragged last one), and under CPU bf16
// autocast to bf16 accuracy.
TEST(FusedLoss, MatchesLinearThenCrossEntropy) {
  torch::manual_seed(5);
  const int64_t N = 45, C = 24, V = 37;
  auto x = torch::randn({N, C}).requires_grad_(true);
  auto w = (torch::randn({V, C}) * 0.3).requires_grad_(true);
  auto t = torch::randint(0, V, {N}, torch::kLong);
  auto xr = x.detach().clone().requires_grad_(true), wr = w.detach().clone().requires_grad_(true);
  auto loss = gtrain::linear_cross_entropy_sum(x, w, t, 7);
  auto ref = torch::nn::functional::cross_entropy(
      torch::mm(xr, wr.t()), t, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
  EXPECT_NEAR(loss.item<double>(), ref.item<double>(), 1e-5 * std::abs(ref.item<double>()));
  (loss * 0.5).backward();
  (ref * 0.5).backward();
  EXPECT_LT((x.grad() - xr.grad()).abs().max().item<double>(), 1e-5);
  EXPECT_LT((w.grad() - wr.grad()).abs().max().item<double>(), 1e-5);

  gtrain::compat::set_autocast(c10::DeviceType::CPU, true, torch::kBFloat16);
  auto lb = gtrain::linear_cross_entropy_sum(x.detach(), w.detach(), t);
  auto rb =
      torch::nn::functional::cross_entropy(torch::mm(x.detach(), w.detach().t()).to(torch::kFloat), t,
                                           torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
  gtrain::compat::set_autocast(c10::DeviceType::CPU, false, torch::kBFloat16);
  EXPECT_NEAR(lb.item<double>(), rb.item<double>(), 1e-2 * std::abs(rb.item<double>()));
  EXPECT_GT(std::abs(lb.item<double>() - loss.item<double>()), 0.0);  // the products really ran in bf16
}

// Under bf16 autocast both gradients equal autocast's unfused layer: products in bf16, softmax -
// onehot in fp32 from the bf16 logits, cast to bf16 for the backward products. Rows are confident
// (p(target) above 0.95 on average), where the target's entry p - 1 is all the gradient there is: subtracting the 1
// after the cast to bf16 would lose it (bf16(0.99) - 1 is -0.0078, not -0.01).
TEST(FusedLoss, Bf16GradientsMatchAutocastForConfidentRows) {
  torch::manual_seed(11);
  const int64_t N = 40, C = 16, V = 37;
  auto w = torch::randn({V, C});
  auto t = torch::randint(0, V, {N}, torch::kLong);
  auto x = (torch::randn({N, C}) * 0.1 + 1.2 * w.index_select(0, t)).requires_grad_(true);
  auto wf = w.clone().requires_grad_(true);
  const auto bf = torch::kBFloat16;
  auto logits = torch::mm(x.detach().to(bf), w.to(bf).t()).to(torch::kFloat);
  auto g = torch::softmax(logits, 1);
  const double p_target = g.gather(1, t.unsqueeze(1)).mean().item<double>();
  ASSERT_GT(p_target, 0.95);  // the confident rows this test is about
  g.scatter_add_(1, t.unsqueeze(1), torch::full({N, 1}, -1.0));
  const auto gb = g.to(bf);
  const auto ref_gx = torch::mm(gb, w.to(bf)).to(torch::kFloat);
  const auto ref_gw = torch::mm(gb.t(), x.detach().to(bf)).to(torch::kFloat);

  compat::set_autocast(c10::DeviceType::CPU, true, bf);
  auto loss = linear_cross_entropy_sum(x, wf, t, 7);
  compat::set_autocast(c10::DeviceType::CPU, false, bf);
  loss.backward();
  const auto row_err = (x.grad() - ref_gx).norm(2, {1}) / ref_gx.norm(2, {1});
  EXPECT_LT(row_err.max().item<double>(), 3e-2);  // one bf16 ulp of an entry; the cast-first mistake errs by ~100%
  EXPECT_LT(((wf.grad() - ref_gw).norm() / ref_gw.norm()).item<double>(), 1e-2);
  const double ref_loss = torch::nn::functional::cross_entropy(
                              logits, t, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                              .item<double>();
  EXPECT_NEAR(loss.item<double>(), ref_loss, 1e-4 * std::abs(ref_loss) + 1e-4);
}

// gpt's training loss with the fused layer (tied and untied) equals forward + loss_sum, and so do
// the gradients of every parameter.
TEST(FusedLoss, GptTrainLossAndGradientsMatch) {
  for (bool tied : {true, false}) {
    ModelConfig c = small_gpt(2, 8);
    c.tied_embeddings = tied;
    torch::manual_seed(1);
    auto plain = ModelRegistry::global().create(c, token_spec(8, 50));
    torch::manual_seed(1);
    auto fused = std::dynamic_pointer_cast<Gpt>(ModelRegistry::global().create(c, token_spec(8, 50)));
    ASSERT_TRUE(fused);
    fused->set_fused_loss(true);
    auto idx = torch::randint(0, 50, {3, 8}, torch::kLong), tgt = torch::randint(0, 50, {3, 8}, torch::kLong);
    auto a = plain->train_loss_sum(idx, tgt), b = fused->train_loss_sum(idx, tgt);
    EXPECT_NEAR(a.item<double>(), b.item<double>(), 1e-5 * std::abs(a.item<double>())) << "tied " << tied;
    a.backward();
    b.backward();
    auto pa = plain->named_parameters(), pb = fused->named_parameters();
    for (const auto& kv : pa) {
      const auto& gb = pb[kv.key()].grad();
      ASSERT_TRUE(gb.defined()) << kv.key();
      EXPECT_LT((kv.value().grad() - gb).abs().max().item<double>(), 1e-5) << kv.key() << " tied " << tied;
    }
  }
}

}  // namespace
}  // namespace gtrain
