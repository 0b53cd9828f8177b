// test_kd_loss.cpp: the distillation loss (runtime/models/kd_loss.h) against PyTorch's reference
// (tests/python/kd_reference.py: forward KL, reverse KL and JSD, temperatures 1 and 2, masked rows,
// dense and top-k teachers), its gradients against finite differences, the top-k teacher through
// the cache (runtime/core/distill_cache.h) bitwise equal to the one from dense logits, and k = V
// equal to the dense divergence.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "runtime/core/distill_cache.h"
#include "runtime/core/errors.h"
#include "runtime/models/kd_loss.h"
#include "tests/support/test_paths.h"
#include "tests/support/test_util.h"

namespace gtrain {
namespace {

const KdDivergence kKinds[] = {KdDivergence::forward_kl, KdDivergence::reverse_kl, KdDivergence::jsd};

const char* kind_name(KdDivergence k) {
  return k == KdDivergence::forward_kl ? "forward_kl" : k == KdDivergence::reverse_kl ? "reverse_kl" : "jsd";
}

// The reference file: GTRAIN_KD_REFERENCE when set (kd_reference.py check), else the committed one.
nlohmann::json reference() {
  const char* env = std::getenv("GTRAIN_KD_REFERENCE");
  const std::string path =
      env && *env ? env : test::test_path("GTRAIN_SOURCE_DIR") + "/tests/python/kd_loss_reference.json";
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  return nlohmann::json::parse(f);
}

torch::Tensor matrix(const nlohmann::json& values, int64_t n, int64_t v, torch::ScalarType dtype) {
  auto flat = values.get<std::vector<double>>();
  return torch::tensor(flat, torch::kDouble).reshape({n, v}).to(torch::kFloat).to(dtype);
}

// PyTorch's values for every case; the largest differences are printed (the report's numbers).
void check_reference(torch::ScalarType dtype, double mean_tol, double sum_rel_tol) {
  const auto ref = reference();
  const int64_t n = ref["n"], v = ref["vocab"], k = ref["k"];
  const auto student = matrix(ref["student"], n, v, dtype), teacher = matrix(ref["teacher"], n, v, dtype);
  const auto labels = torch::tensor(ref["labels"].get<std::vector<int64_t>>(), torch::kLong);
  const auto mask = kd_mask_from_labels(labels);
  const double trained = mask.sum().item<double>();
  double worst_abs = 0, worst_rel = 0;
  for (const auto& c : ref["cases"]) {
    const auto kind = parse_kd_divergence(c["kind"]);
    const double T = c["temperature"];
    const auto got = c["sparse"].get<bool>()
                         ? kd_loss_sum(student, sparse_teacher_from_logits(teacher, k, T), mask, kind, T)
                         : kd_loss_sum(student, teacher, mask, kind, T);
    const double sum = got.item<double>(), want = c["sum"];
    const std::string what = c.dump();
    EXPECT_EQ(got.scalar_type(), dtype) << what;
    EXPECT_NEAR(sum / trained, c["mean"].get<double>(), mean_tol) << what;
    EXPECT_NEAR(sum, want, sum_rel_tol * std::abs(want)) << what;
    worst_abs = std::max(worst_abs, std::abs(sum / trained - c["mean"].get<double>()));
    worst_rel = std::max(worst_rel, std::abs(sum - want) / std::abs(want));
  }
  std::printf("kd_loss %s vs PyTorch: token-weighted mean max abs diff %.3g, sum max rel diff %.3g\n",
              dtype == torch::kFloat ? "fp32" : "fp64", worst_abs, worst_rel);
}

TEST(KdLoss, Fp32MatchesPytorchReference) {
  check_reference(torch::kFloat, 1e-6, 1e-6);
}

TEST(KdLoss, Fp64MatchesPytorchReference) {
  check_reference(torch::kDouble, 1e-12, 1e-12);
}

// Central differences of the summed loss against autograd's gradient, every student logit, fp64.
void check_gradient(const std::function<torch::Tensor(const torch::Tensor&)>& loss, const torch::Tensor& x0,
                    const std::string& what) {
  auto x = x0.clone().requires_grad_(true);
  loss(x).backward();
  const auto grad = x.grad();
  const double h = 1e-6;
  double worst = 0;
  auto xs = x0.clone();
  for (int64_t i = 0; i < xs.numel(); ++i) {
    auto flat = xs.view({-1});
    const double keep = flat[i].item<double>();
    flat[i] = keep + h;
    const double up = loss(xs).item<double>();
    flat[i] = keep - h;
    const double down = loss(xs).item<double>();
    flat[i] = keep;
    worst = std::max(worst, std::abs((up - down) / (2 * h) - grad.view({-1})[i].item<double>()));
  }
  EXPECT_LT(worst, 1e-7) << what;
  EXPECT_GT(grad.abs().sum().item<double>(), 1e-3) << what;  // a real gradient, not zeros
}

TEST(KdLoss, GradientsMatchFiniteDifferences) {
  torch::manual_seed(7);
  const auto opts = torch::TensorOptions().dtype(torch::kDouble);
  const auto student = torch::randn({4, 9}, opts) * 2, teacher = torch::randn({4, 9}, opts) * 2;
  const auto mask = torch::tensor({1, 0, 1, 1}, torch::kLong);
  const double T = 1.5;
  const auto sparse = sparse_teacher_from_logits(teacher, 3, T);
  for (const auto kind : kKinds) {
    check_gradient([&](const torch::Tensor& s) { return kd_loss_sum(s, teacher, mask, kind, T); }, student,
                   std::string("dense ") + kind_name(kind));
    check_gradient([&](const torch::Tensor& s) { return kd_loss_sum(s, sparse, mask, kind, T); }, student,
                   std::string("top-3 ") + kind_name(kind));
    // The masked row gets no gradient.
    auto s = student.clone().requires_grad_(true);
    kd_loss_sum(s, sparse, mask, kind, T).backward();
    EXPECT_EQ(s.grad()[1].abs().sum().item<double>(), 0.0) << kind_name(kind);
  }
}

// The cache's path (top-k raw logits and lse_T written, read back, formed into a sparse teacher)
// gives bitwise the loss of the top-k taken from the dense logits.
TEST(KdLoss, CachedTopKEqualsTopKOfDenseLogitsBitwise) {
  torch::manual_seed(3);
  const int64_t n = 10, v = 50, k = 8;
  const double T = 2.0;
  const auto student = torch::randn({n, v}) * 2, teacher = torch::randn({n, v}) * 3;
  const auto top = teacher_top_k(teacher, k, T);
  test::TempDir dir;
  DistillCacheManifest header;
  header.key = {"teacher-hash", "data-key", v, k, T};
  header.shard_tokens = 4;  // three shards, the last one short
  DistillCacheWriter writer(dir.path(), header);
  DistillEntries e;
  e.k = k;
  const auto ids = top.ids.to(torch::kInt).contiguous(), logits = top.logits.contiguous(), lse = top.lse.contiguous();
  e.ids.assign(ids.data_ptr<int32_t>(), ids.data_ptr<int32_t>() + n * k);
  e.logits.assign(logits.data_ptr<float>(), logits.data_ptr<float>() + n * k);
  e.lse.assign(lse.data_ptr<double>(), lse.data_ptr<double>() + n);
  writer.append(e);
  writer.finish();
  DistillCacheReader reader(dir.path());
  reader.check_key(header.key);
  auto back = reader.read(0, n);
  const auto cached = sparse_teacher(torch::from_blob(back.ids.data(), {n, k}, torch::kInt).clone(),
                                     torch::from_blob(back.logits.data(), {n, k}, torch::kFloat).clone(),
                                     torch::from_blob(back.lse.data(), {n}, torch::kDouble).clone(), T);
  const auto dense = sparse_teacher_from_logits(teacher, k, T);
  const auto mask = torch::tensor({1, 1, 0, 1, 1, 1, 1, 0, 1, 1}, torch::kBool);
  for (const auto kind : kKinds) {
    const float a = kd_loss_sum(student, cached, mask, kind, T).item<float>();
    const float b = kd_loss_sum(student, dense, mask, kind, T).item<float>();
    EXPECT_EQ(a, b) << kind_name(kind);
    EXPECT_GT(a, 0.0f) << kind_name(kind);
  }
}

// With every id kept there is no tail: the sparse teacher's divergence is the dense one; with fewer,
// the bucketed one is a lower bound of it (merging outcomes never increases the divergence).
TEST(KdLoss, FullTopKEqualsDenseAndFewerIsALowerBound) {
  torch::manual_seed(5);
  const int64_t n = 6, v = 40;
  const auto student = torch::randn({n, v}) * 2, teacher = torch::randn({n, v}) * 3;
  for (const auto kind : kKinds) {
    for (const double T : {1.0, 3.0}) {
      const double dense = kd_loss_sum(student, teacher, {}, kind, T).item<double>();
      const double full = kd_loss_sum(student, sparse_teacher_from_logits(teacher, v, T), {}, kind, T).item<double>();
      EXPECT_NEAR(full, dense, 1e-6 * std::max(1.0, std::abs(dense))) << kind_name(kind) << " T " << T;
      const double few = kd_loss_sum(student, sparse_teacher_from_logits(teacher, 4, T), {}, kind, T).item<double>();
      EXPECT_LT(few, dense) << kind_name(kind) << " T " << T;
      EXPECT_GT(few, 0.0) << kind_name(kind) << " T " << T;
    }
  }
}

// A student equal to its teacher costs 0; rows masked out count for nothing, even when they hold NaN.
TEST(KdLoss, ZeroForTheTeacherItselfAndMaskedRowsIgnored) {
  torch::manual_seed(9);
  auto student = torch::randn({5, 16}), teacher = torch::randn({5, 16});
  const auto mask = torch::tensor({true, false, true, true, false});
  for (const auto kind : kKinds) {
    EXPECT_NEAR(kd_loss_sum(teacher, teacher, {}, kind, 2.0).item<double>(), 0.0, 1e-6) << kind_name(kind);
    const double clean = kd_loss_sum(student, teacher, mask, kind, 2.0).item<double>();
    auto poisoned = student.clone();
    poisoned[1].fill_(std::numeric_limits<float>::quiet_NaN());
    poisoned[4][3] = std::numeric_limits<float>::infinity();
    EXPECT_EQ(kd_loss_sum(poisoned, teacher, mask, kind, 2.0).item<double>(), clean) << kind_name(kind);
    const auto rows = torch::tensor({0, 2, 3}, torch::kLong);
    EXPECT_NEAR(kd_loss_sum(student.index_select(0, rows), teacher.index_select(0, rows), {}, kind, 2.0).item<double>(),
                clean, 1e-5)
        << kind_name(kind);
  }
}

// A teacher so sure that its top-1 holds all the mass (tail 0 even in fp64): reverse KL and JSD stay
// finite and still pull the student's tail mass down.
TEST(KdLoss, TeacherWithoutTailMassGivesFiniteLoss) {
  auto teacher = torch::zeros({2, 6});
  teacher.index_put_({torch::indexing::Slice(), 0}, 400.0);
  const auto sparse = sparse_teacher_from_logits(teacher, 1, 1.0);
  EXPECT_EQ(sparse.tail.sum().item<double>(), 0.0);
  for (const auto kind : kKinds) {
    auto student = torch::zeros({2, 6}).requires_grad_(true);
    const auto loss = kd_loss_sum(student, sparse, {}, kind, 1.0);
    loss.backward();
    EXPECT_TRUE(std::isfinite(loss.item<double>())) << kind_name(kind);
    EXPECT_TRUE(torch::isfinite(student.grad()).all().item<bool>()) << kind_name(kind);
    EXPECT_GT(student.grad()[0][5].item<double>(), 0.0) << kind_name(kind);  // a tail logit is pushed down
  }
}

TEST(KdLoss, UnknownDivergenceIsAConfigError) {
  EXPECT_EQ(parse_kd_divergence("jsd"), KdDivergence::jsd);
  EXPECT_EQ(test::error_of<ConfigError>([] { parse_kd_divergence("kl"); }),
            "distill.loss = \"kl\": expected \"forward_kl\", \"reverse_kl\" or \"jsd\"");
}

}  // namespace
}  // namespace gtrain
