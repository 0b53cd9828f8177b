// test_data.cpp: dataset readers on files the tests write, the sample order, and the prefetcher.
#include <gtest/gtest.h>

#include <torch/torch.h>
#include <zlib.h>
#include <functional>

#include <algorithm>
#include <set>

#include "runtime/common/errors.h"
#include "runtime/data/dataset.h"
#include "runtime/data/prefetcher.h"
#include "runtime/data/sampler.h"
#include "tests/test_util.h"

namespace gtrain {
namespace {

std::string be32(uint32_t v) {
  std::string s(4, '\0');
  s[0] = char(v >> 24), s[1] = char(v >> 16), s[2] = char(v >> 8), s[3] = char(v);
  return s;
}

// n images of rows x cols where pixel p of image i is (i * 7 + p) % 256, labels i % 10.
void write_idx(const std::string& dir, const std::string& prefix, int n, int rows, int cols, bool gz) {
  std::string img = be32(0x803) + be32(n) + be32(rows) + be32(cols);
  for (int i = 0; i < n; ++i)
    for (int p = 0; p < rows * cols; ++p) img += char((i * 7 + p) % 256);
  std::string lab = be32(0x801) + be32(n);
  for (int i = 0; i < n; ++i) lab += char(i % 10);
  auto put = [&](const std::string& name, const std::string& data) {
    if (gz) {
      gzFile f = gzopen((dir + "/" + name + ".gz").c_str(), "wb");
      gzwrite(f, data.data(), static_cast<unsigned>(data.size()));
      gzclose(f);
    } else {
      test::write_file(dir + "/" + name, data);
    }
  };
  put(prefix + "-images-idx3-ubyte", img);
  put(prefix + "-labels-idx1-ubyte", lab);
}

class IdxTest : public ::testing::TestWithParam<bool> {};

TEST_P(IdxTest, ReadsImagesAndLabels) {
  test::TempDir dir;
  write_idx(dir.path(), "train", 12, 4, 3, GetParam());
  write_idx(dir.path(), "t10k", 5, 4, 3, GetParam());
  DataConfig d;
  d.path = dir.path();
  ModelConfig m;
  auto splits = open_datasets(d, m, 1);
  ASSERT_EQ(splits.train->size(), 12);
  ASSERT_EQ(splits.eval->size(), 5);
  EXPECT_EQ(splits.train->spec().input_shape, (std::vector<int64_t>{1, 4, 3}));
  auto b = splits.train->collate({3, 11});
  EXPECT_EQ(b.input.sizes(), (std::vector<int64_t>{2, 1, 4, 3}));
  EXPECT_EQ(b.target[0].item<int64_t>(), 3);
  EXPECT_EQ(b.target[1].item<int64_t>(), 1);
  // Pixel 5 of image 11 = (77 + 5) % 256 = 82, standardised.
  const float expect = (82 / 255.0f - 0.2860f) / 0.3530f;
  EXPECT_NEAR(b.input[1][0][1][2].item<float>(), expect, 1e-5);
}
INSTANTIATE_TEST_SUITE_P(GzAndRaw, IdxTest, ::testing::Values(false, true));

TEST(Idx, MissingAndMalformedFilesNameThePath) {
  test::TempDir dir;
  DataConfig d;
  d.path = dir.path();
  try {
    open_datasets(d, ModelConfig{}, 1);
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find(dir.path() + "/train-images-idx3-ubyte[.gz]"), std::string::npos) << e.what();
  }
  test::write_file(dir.file("bad-images-idx3-ubyte"), be32(0x801) + be32(1));
  test::write_file(dir.file("bad-labels-idx1-ubyte"), be32(0x801) + be32(1) + "x");
  try {
    open_idx(dir.file("bad-images-idx3-ubyte"), dir.file("bad-labels-idx1-ubyte"));
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("bad-images-idx3-ubyte: not an IDX image file"), std::string::npos);
  }
  write_idx(dir.path(), "trunc", 3, 2, 2, false);
  std::string img = test::read_file(dir.file("trunc-images-idx3-ubyte"));
  test::write_file(dir.file("trunc-images-idx3-ubyte"), img.substr(0, img.size() - 1));
  EXPECT_THROW(open_idx(dir.file("trunc-images-idx3-ubyte"), dir.file("trunc-labels-idx1-ubyte")), DataError);
  // Dimensions whose product passes 2^64 are a truncated file too, not a huge allocation.
  test::write_file(dir.file("ovf-images-idx3-ubyte"), be32(0x803) + be32(1u << 20) + be32(1u << 22) + be32(1u << 22));
  test::write_file(dir.file("ovf-labels-idx1-ubyte"), be32(0x801) + be32(1u << 20) + std::string(1u << 20, '\0'));
  try {
    open_idx(dir.file("ovf-images-idx3-ubyte"), dir.file("ovf-labels-idx1-ubyte"));
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("truncated IDX file"), std::string::npos) << e.what();
  }
  // A corrupt gzip stream: zlib's reason, the same every time (it was read after zlib freed it).
  write_idx(dir.path(), "gz", 3, 2, 2, true);
  std::string gz = test::read_file(dir.file("gz-images-idx3-ubyte.gz"));
  for (size_t i = 12; i < gz.size() - 8; ++i) gz[i] = '\xff';
  test::write_file(dir.file("gz-images-idx3-ubyte.gz"), gz);
  std::string first;
  for (int k = 0; k < 2; ++k) {
    try {
      open_idx(dir.file("gz-images-idx3-ubyte.gz"), dir.file("gz-labels-idx1-ubyte.gz"));
      FAIL();
    } catch (const DataError& e) {
      const std::string what = e.what();
      EXPECT_EQ(what.rfind(dir.file("gz-images-idx3-ubyte.gz") + ": cannot read data file (", 0), 0u) << what;
      EXPECT_NE(what.find("a corrupt or truncated gzip file?)"), std::string::npos) << what;
      if (k == 0) first = what;
      EXPECT_EQ(what, first);
    }
  }
  // data.path must be the directory, and data files must be regular files.
  d.path = dir.file("ovf-images-idx3-ubyte");
  try {
    open_datasets(d, ModelConfig{}, 1);
    FAIL();
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("is a file; data.kind = \"idx\" needs the directory"), std::string::npos)
        << e.what();
  }
  try {
    open_idx("/dev/zero", dir.file("ovf-labels-idx1-ubyte"));
    FAIL();
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()),
              "/dev/zero: not a regular file (a device, FIFO or socket); data.path must name a file");
  }
}

TEST(Tokens, Uint16AndUint32WindowsShiftByOne) {
  test::TempDir dir;
  for (std::string dtype : {"uint16", "uint32"}) {
    std::string bytes;
    for (uint32_t t = 0; t < 100; ++t) {
      uint32_t v = (t * 3) % 1000;
      bytes.append(reinterpret_cast<const char*>(&v), dtype == "uint16" ? 2 : 4);
    }
    test::write_file(dir.file("tok.bin"), bytes);
    auto train = open_token_file(dir.file("tok.bin"), dtype, 5, 0.0, 0.8, false, 0);
    EXPECT_EQ(train->size(), 80 - 5);
    EXPECT_TRUE(train->random_windows());
    EXPECT_EQ(train->spec().vocab, 298);  // max token (99*3) + 1 over the whole file
    auto b = train->collate({10});
    for (int t = 0; t < 5; ++t) {
      EXPECT_EQ(b.input[0][t].item<int64_t>(), (10 + t) * 3);
      EXPECT_EQ(b.target[0][t].item<int64_t>(), (11 + t) * 3);
    }
    auto eval = open_token_file(dir.file("tok.bin"), dtype, 5, 0.8, 1.0, true, 0);
    EXPECT_FALSE(eval->random_windows());
    EXPECT_EQ(eval->size(), (20 - 1) / 5);
    EXPECT_EQ(eval->collate({1}).input[0][0].item<int64_t>(), (80 + 5) * 3);  // non-overlapping windows
  }
}

TEST(Tokens, BadFilesAreDataErrors) {
  test::TempDir dir;
  test::write_file(dir.file("odd.bin"), "abc");
  EXPECT_THROW(open_token_file(dir.file("odd.bin"), "uint16", 4, 0, 1, false, 0), DataError);
  test::write_file(dir.file("short.bin"), std::string(6, '\1'));
  EXPECT_THROW(open_token_file(dir.file("short.bin"), "uint16", 4, 0, 1, false, 0), DataError);
  std::string big(4, '\xff');  // token 65535 with model.vocab = 100
  test::write_file(dir.file("big.bin"), big + std::string(20, '\0'));
  EXPECT_THROW(open_token_file(dir.file("big.bin"), "uint16", 4, 0, 1, false, 100), DataError);
  EXPECT_THROW(open_token_file(dir.file("none.bin"), "uint16", 4, 0, 1, false, 0), DataError);
}

TEST(TextBytes, ByteLevelWindows) {
  test::TempDir dir;
  test::write_file(dir.file("t.txt"), "hello world, hello gtrain");
  auto ds = open_text_bytes(dir.file("t.txt"), 4, 0.0, 1.0, false);
  EXPECT_EQ(ds->spec().vocab, 256);
  auto b = ds->collate({0, 6});
  EXPECT_EQ(b.input[0][0].item<int64_t>(), 'h');
  EXPECT_EQ(b.target[0][0].item<int64_t>(), 'e');
  EXPECT_EQ(b.input[1][0].item<int64_t>(), 'w');
  // A split reads only its own bytes: the eval half of "hello world, hello gtrain" (25 bytes) starts at
  // byte 12, ' hello gtrain', in windows of 4 + 1.
  auto half = open_text_bytes(dir.file("t.txt"), 4, 0.5, 1.0, true);
  EXPECT_EQ(half->size(), 3);  // 13 bytes: windows at 0, 4 and 8
  auto h = half->collate({0, 2});
  EXPECT_EQ(h.input[0][0].item<int64_t>(), ' ');
  EXPECT_EQ(h.input[0][1].item<int64_t>(), 'h');
  EXPECT_EQ(h.input[1][0].item<int64_t>(), 't');  // "trai" -> "rain"
  EXPECT_EQ(h.target[1][3].item<int64_t>(), 'n');
  // An eval split too short for one window names data.eval_fraction.
  try {
    open_text_bytes(dir.file("t.txt"), 4, 0.95, 1.0, true);
    ADD_FAILURE() << "a 1-byte eval split opened";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("too short for one eval window of model.seq_len + 1 = 5 tokens in its "
                                         "data.eval_fraction"),
              std::string::npos)
        << e.what();
  }
  // A directory as data.path: a data error naming it, not the stream library's "Is a directory".
  for (auto open : {std::function<void()>([&] { open_text_bytes(dir.path(), 4, 0.0, 1.0, false); }),
                    std::function<void()>([&] { open_token_file(dir.path(), "uint16", 4, 0, 1, false, 0); })}) {
    try {
      open();
      ADD_FAILURE() << "a directory opened as data";
    } catch (const DataError& e) {
      EXPECT_EQ(std::string(e.what()), dir.path() + ": is a directory; data.path must name a file");
    }
  }
}

TEST(Synthetic, DeterministicAndSplitsDiffer) {
  DataConfig d;
  d.kind = "synthetic";
  ModelConfig m;
  auto a = open_datasets(d, m, 9), b = open_datasets(d, m, 9);
  auto x = a.train->collate({5, 6}), y = b.train->collate({5, 6});
  EXPECT_TRUE(torch::equal(x.input, y.input));
  EXPECT_TRUE(torch::equal(x.target, y.target));
  EXPECT_FALSE(torch::equal(a.eval->collate({5}).input, x.input.slice(0, 0, 1)));
  m.name = "gpt";
  m.seq_len = 6;
  m.vocab = 11;
  auto t = open_datasets(d, m, 9).train->collate({0});
  for (int i = 0; i < 5; ++i) EXPECT_EQ(t.target[0][i].item<int64_t>(), t.input[0][i + 1].item<int64_t>());
}

// The samples of global batch k are the same for every dp / micro-batch / accumulation split.
TEST(Sampler, GlobalBatchIndependentOfLayout) {
  SampleOrder order(1000, 42, false);
  const int64_t B = 24;
  std::vector<BatchLayout> layouts = {{B, 1, 24, 1}, {B, 1, 6, 4}, {B, 2, 12, 1},
                                      {B, 2, 3, 4},  {B, 4, 6, 1}, {B, 3, 4, 2}};
  for (int64_t step : {0, 7, 41, 42}) {  // step 41/42 straddle the epoch boundary (1000 / 24)
    std::multiset<int64_t> ref;
    for (int64_t g = step * B; g < (step + 1) * B; ++g) ref.insert(order.dataset_index(g));
    for (const auto& l : layouts) {
      std::multiset<int64_t> got;
      for (int64_t r = 0; r < l.dp; ++r)
        for (int64_t i = 0; i < l.accum; ++i)
          for (auto idx : micro_batch_indices(order, l, step, r, i)) got.insert(idx);
      EXPECT_EQ(got, ref) << "dp=" << l.dp << " m=" << l.micro_batch << " a=" << l.accum << " step " << step;
    }
  }
}

TEST(Sampler, EpochIsAPermutationAndSeedMatters) {
  SampleOrder a(500, 1, false), b(500, 1, false), c(500, 2, false);
  std::set<int64_t> seen;
  int same_as_c = 0;
  for (int64_t g = 0; g < 500; ++g) {
    seen.insert(a.dataset_index(g));
    EXPECT_EQ(a.dataset_index(g), b.dataset_index(g));
    same_as_c += a.dataset_index(g) == c.dataset_index(g);
  }
  EXPECT_EQ(seen.size(), 500u);
  EXPECT_LT(same_as_c, 20);
  // The next epoch is a different permutation.
  int same_next = 0;
  for (int64_t g = 0; g < 500; ++g) same_next += a.dataset_index(g) == a.dataset_index(g + 500);
  EXPECT_LT(same_next, 20);
  SampleOrder w(1 << 20, 1, true);
  EXPECT_LT(w.dataset_index(123456789), 1 << 20);
}

class CountingDataset : public Dataset {
 public:
  int64_t size() const override { return 1000; }
  Batch collate(const std::vector<int64_t>& idx) const override {
    if (!idx.empty() && idx[0] == 666) throw DataError("bad sample 666");
    auto t = torch::tensor(std::vector<int64_t>(idx.begin(), idx.end()));
    return {t, t, static_cast<int64_t>(idx.size())};
  }
  DataSpec spec() const override { return {}; }
};

TEST(Prefetcher, DeliversInOrderWithSeveralWorkers) {
  auto ds = std::make_shared<CountingDataset>();
  Prefetcher p(
      ds,
      [](int64_t seq) {
        return std::vector<int64_t>{seq * 2, seq * 2 + 1};
      },
      5, 50, 3, 4);
  for (int64_t seq = 5; seq < 55; ++seq) {
    auto b = p.next();
    ASSERT_EQ(b.input[0].item<int64_t>(), seq * 2);
  }
  EXPECT_GE(p.take_wait_seconds(), 0.0);
  EXPECT_THROW(p.next(), Error);  // past the end
}

TEST(Prefetcher, WorkerErrorReachesTheTrainer) {
  auto ds = std::make_shared<CountingDataset>();
  Prefetcher p(
      ds, [](int64_t seq) { return std::vector<int64_t>{seq == 3 ? 666 : seq}; }, 0, 10, 2, 2);
  for (int i = 0; i < 3; ++i) p.next();
  EXPECT_THROW(p.next(), DataError);
}

}  // namespace
}  // namespace gtrain
