// test_packed_rows.cpp: rows that hold several documents (packed conversations): attention that stays
// inside each document, positions that restart, the loss over the trained targets only, for gpt and
// llama (grouped-query, rotary), fused and plain output layers; and the conversation rows' batches.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "runtime/core/config/model_presets.h"
#include "runtime/core/text/sft_data.h"
#include "runtime/data/dataset.h"
#include "runtime/models/gpt.h"
#include "runtime/models/llama.h"
#include "runtime/models/token_layout.h"
#include "tests/support/test_util.h"

namespace gtrain {
namespace {

using test::token_spec;

constexpr int64_t kVocab = 40;

// Documents of these slot counts, with random ids and targets, some targets masked (-100).
struct Doc {
  torch::Tensor ids, targets;  // [L] each
};

std::vector<Doc> make_docs(const std::vector<int64_t>& lengths, uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<Doc> docs;
  for (int64_t L : lengths) {
    Doc d{torch::randint(0, kVocab, {L}, torch::kLong), torch::randint(0, kVocab, {L}, torch::kLong)};
    auto masked = torch::rand({L}) < 0.4;
    masked[L - 1] = false;  // at least one trained target per document
    d.targets.masked_fill_(masked, text::kIgnoreTarget);
    docs.push_back(d);
  }
  return docs;
}

std::vector<int64_t> flat_trained(const torch::Tensor& target) {
  std::vector<int64_t> out;
  auto t = target.reshape({-1});
  for (int64_t i = 0; i < t.numel(); ++i)
    if (t[i].item<int64_t>() >= 0) out.push_back(i);
  return out;
}

// Rows of `width` slots from the documents, in order, each row's tail padding (its own document).
struct Packed {
  torch::Tensor input, target, positions;
};
Packed pack(const std::vector<std::vector<Doc>>& rows, int64_t width) {
  const int64_t B = static_cast<int64_t>(rows.size());
  Packed p{torch::zeros({B, width}, torch::kLong), torch::full({B, width}, text::kIgnoreTarget, torch::kLong),
           torch::zeros({B, width}, torch::kLong)};
  for (int64_t r = 0; r < B; ++r) {
    int64_t at = 0;
    for (const Doc& d : rows[static_cast<size_t>(r)]) {
      const int64_t L = d.ids.size(0);
      p.input[r].narrow(0, at, L).copy_(d.ids);
      p.target[r].narrow(0, at, L).copy_(d.targets);
      p.positions[r].narrow(0, at, L).copy_(torch::arange(L));
      at += L;
    }
    if (at < width) p.positions[r].narrow(0, at, width - at).copy_(torch::arange(width - at));
  }
  return p;
}

std::map<std::string, torch::Tensor> grads(torch::nn::Module& m) {
  std::map<std::string, torch::Tensor> g;
  for (auto& kv : m.named_parameters()) g[kv.key()] = kv.value().grad().clone();
  return g;
}

// The packed rows' loss and gradients equal the documents' own, one at a time, within 1e-6.
void expect_packed_equals_one_by_one(const std::function<std::shared_ptr<DecoderLm>()>& make, int64_t width,
                                     bool fused) {
  const auto docs = make_docs({5, 7, 3, 9, 6, 1}, 3);
  const std::vector<std::vector<Doc>> rows = {{docs[0], docs[1], docs[2]}, {docs[3], docs[4], docs[5]}};
  const Packed p = pack(rows, width);

  auto packed = make();
  packed->set_fused_loss(fused);
  torch::Tensor loss;
  {
    TokenLayoutScope layout(TokenLayout(p.positions, torch::tensor(flat_trained(p.target), torch::kLong)));
    loss = packed->train_loss_sum(p.input, p.target);
  }
  loss.backward();

  auto single = make();  // the same weights (same seed)
  double ref = 0;
  for (const auto& row : rows) {
    for (const Doc& d : row) {
      auto t = d.targets.unsqueeze(0);
      TokenLayoutScope layout(TokenLayout(torch::Tensor(), torch::tensor(flat_trained(t), torch::kLong)));
      auto l = single->train_loss_sum(d.ids.unsqueeze(0), t);
      l.backward();
      ref += l.item<double>();
    }
  }
  EXPECT_NEAR(loss.item<double>(), ref, 1e-6 * std::abs(ref));
  const auto a = grads(*packed), b = grads(*single);
  for (const auto& kv : a) {
    const double scale = std::max(1e-3, b.at(kv.first).abs().max().item<double>());
    EXPECT_LT((kv.second - b.at(kv.first)).abs().max().item<double>(), 1e-6 * scale) << kv.first;
  }
}

ModelConfig gpt_config(int64_t width) {
  ModelConfig c;
  c.name = "gpt";
  c.n_layer = 2, c.n_head = 2, c.n_embd = 16, c.seq_len = width;
  return c;
}

ModelConfig llama_config(int64_t width) {
  ModelConfig c = apply_model_preset(ModelConfig{}, "llama-tiny");
  c.n_layer = 2, c.n_embd = 32, c.n_head = 4, c.n_kv_head = 2, c.intermediate_size = 48, c.seq_len = width;
  c.vocab = kVocab;
  return c;
}

TEST(PackedRows, GptLossAndGradientsEqualTheDocumentsOneByOne) {
  for (bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "fused output layer" : "plain output layer");
    expect_packed_equals_one_by_one(
        [] {
          torch::manual_seed(7);
          return std::make_shared<Gpt>(gpt_config(24), token_spec(24, kVocab));
        },
        24, fused);
  }
}

TEST(PackedRows, LlamaLossAndGradientsEqualTheDocumentsOneByOne) {
  for (bool fused : {false, true}) {
    SCOPED_TRACE(fused ? "fused output layer" : "plain output layer");
    expect_packed_equals_one_by_one(
        [] {
          torch::manual_seed(7);
          return std::make_shared<Llama>(llama_config(24), token_spec(24, kVocab));
        },
        24, fused);
  }
}

// Without a layout's trained indices the targets the mask leaves out still do not count (the plain
// output layer's ignore index), and a packed row without the mask would see the other documents.
TEST(PackedRows, WithoutTheLayoutAttentionCrossesDocuments) {
  const auto docs = make_docs({6, 6}, 5);
  const Packed p = pack({{docs[0], docs[1]}}, 12);
  torch::manual_seed(7);
  Gpt m(gpt_config(12), token_spec(12, kVocab));
  torch::NoGradGuard ng;
  double with = 0, without = 0;
  {
    TokenLayoutScope layout(TokenLayout(p.positions, torch::Tensor()));
    with = m.train_loss_sum(p.input, p.target).item<double>();
  }
  without = m.train_loss_sum(p.input, p.target).item<double>();
  double ref = 0;
  for (const Doc& d : docs) ref += m.train_loss_sum(d.ids.unsqueeze(0), d.targets.unsqueeze(0)).item<double>();
  EXPECT_NEAR(with, ref, 1e-6 * ref);
  EXPECT_GT(std::abs(without - ref), 1e-4 * ref);  // the second document attended to the first
}

TEST(PackedRows, DocumentCausalMaskKeepsEachDocumentApart) {
  auto positions = torch::tensor({{0, 1, 2, 0, 1, 0}}, torch::kLong);
  auto mask = document_causal_mask(positions).squeeze();
  auto expect = torch::tensor({{1, 0, 0, 0, 0, 0},
                               {1, 1, 0, 0, 0, 0},
                               {1, 1, 1, 0, 0, 0},
                               {0, 0, 0, 1, 0, 0},
                               {0, 0, 0, 1, 1, 0},
                               {0, 0, 0, 0, 0, 1}},
                              torch::kBool);
  EXPECT_TRUE(mask.equal(expect)) << mask;
}

// A fixed set of rows as text::SftData gives them: row r holds documents of `docs[r]` slots.
class FakeRows : public text::SftData {
 public:
  FakeRows(std::vector<std::vector<int64_t>> docs, int64_t seq_len, bool packed)
      : docs_(std::move(docs)), seq_len_(seq_len), packed_(packed) {}
  int64_t size() const override { return static_cast<int64_t>(docs_.size()); }
  int64_t length(int64_t row) const override {
    if (packed_) return seq_len_;
    int64_t n = 0;
    for (int64_t d : docs_[static_cast<size_t>(row)]) n += d;
    return n;
  }
  int64_t trained(int64_t row) const override {
    int64_t n = 0;  // every odd slot trains
    for (int64_t d : docs_[static_cast<size_t>(row)]) n += d / 2;
    return n;
  }
  void fill(int64_t row, int64_t width, int32_t* ids, int32_t* targets, int32_t* positions) const override {
    int64_t at = 0;
    for (int64_t d : docs_[static_cast<size_t>(row)]) {
      for (int64_t t = 0; t < d; ++t, ++at) {
        ids[at] = static_cast<int32_t>(1 + (row + t) % 7);
        targets[at] = t % 2 == 1 ? static_cast<int32_t>(2 + t % 5) : text::kIgnoreTarget;
        positions[at] = static_cast<int32_t>(t);
      }
    }
    for (int64_t t = 0; at < width; ++t, ++at) ids[at] = 0, targets[at] = text::kIgnoreTarget, positions[at] = t;
  }
  int32_t pad_id() const override { return 0; }
  int64_t vocab() const override { return 10; }
  const text::SftCounts& counts() const override { return counts_; }

 private:
  std::vector<std::vector<int64_t>> docs_;
  int64_t seq_len_;
  bool packed_;
  text::SftCounts counts_;
};

TEST(ConversationRows, PackedBatchesCarryPositionsTrainedTargetsAndWeights) {
  auto data = open_sft_rows(std::make_shared<FakeRows>(std::vector<std::vector<int64_t>>{{4, 3}, {6}}, 8, true), 8, 10,
                            /*packed=*/true, nullptr);
  EXPECT_TRUE(data->weighted());
  EXPECT_EQ(data->weight(0), 3);  // 2 + 1
  EXPECT_EQ(data->weight(1), 3);
  const Batch b = data->collate({1, 0});
  EXPECT_EQ(b.input.sizes(), (std::vector<int64_t>{2, 8}));
  EXPECT_TRUE(b.positions.equal(torch::tensor({{0, 1, 2, 3, 4, 5, 0, 1}, {0, 1, 2, 3, 0, 1, 2, 0}}, torch::kLong)));
  EXPECT_TRUE(b.trained.equal(torch::tensor({1, 3, 5, 9, 11, 13}, torch::kLong))) << b.trained;
  EXPECT_EQ(b.weight, 6);
  EXPECT_EQ(b.target[1][1].item<int64_t>(), 3);
  EXPECT_EQ(b.target[1][2].item<int64_t>(), text::kIgnoreTarget);
}

TEST(ConversationRows, UnpackedBatchesArePaddedToTheirLongestRow) {
  auto data = open_sft_rows(std::make_shared<FakeRows>(std::vector<std::vector<int64_t>>{{3}, {5}, {2}}, 8, false), 8,
                            10, /*packed=*/false, nullptr);
  const Batch b = data->collate({0, 2});
  EXPECT_EQ(b.input.sizes(), (std::vector<int64_t>{2, 3}));
  EXPECT_FALSE(b.positions.defined());                             // one document a row: plain causal attention
  EXPECT_EQ(b.target[1][2].item<int64_t>(), text::kIgnoreTarget);  // padding
  EXPECT_EQ(b.weight, 2);
  EXPECT_EQ(data->collate({1}).input.size(1), 5);
}

}  // namespace
}  // namespace gtrain
