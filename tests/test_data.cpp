// test_data.cpp: dataset readers on files the tests write, the sample order, and the prefetcher.
#include <gtest/gtest.h>

#include <torch/torch.h>
#include <zlib.h>
#include <filesystem>
#include <fstream>
#include <functional>

#include <algorithm>
#include <cstring>
#include <set>

#include "runtime/core/errors.h"
#include "runtime/core/rank_output.h"
#include "runtime/data/dataset.h"
#include "runtime/data/mapped_file.h"
#include "runtime/data/prefetcher.h"
#include "runtime/data/sampler.h"
#include "tests/support/test_util.h"

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
    EXPECT_EQ(std::string(e.what()), "/dev/zero: not a regular file (a device, FIFO or socket)");
    EXPECT_EQ(e.hint(), "make data.path name a file");
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

// llm.c's token shard: a 256-int32 header (magic 20240520, version 1 = uint16 / 2 = uint32, count).
std::string llmc_shard(const std::vector<uint32_t>& tokens, int32_t version = 1, int32_t count = -1) {
  std::vector<int32_t> head(256, 0);
  head[0] = 20240520;
  head[1] = version;
  head[2] = count >= 0 ? count : static_cast<int32_t>(tokens.size());
  std::string out(reinterpret_cast<const char*>(head.data()), head.size() * 4);
  for (uint32_t t : tokens) out.append(reinterpret_cast<const char*>(&t), version == 2 ? 4 : 2);
  return out;
}

std::vector<uint32_t> iota_tokens(uint32_t first, uint32_t n) {
  std::vector<uint32_t> v(n);
  for (uint32_t i = 0; i < n; ++i) v[i] = first + i;
  return v;
}

TEST(Tokens, ShardsByGlobWithLlmcHeadersAndNoWindowAcrossFiles) {
  test::TempDir dir;
  test::write_file(dir.file("train_001.bin"), llmc_shard(iota_tokens(100, 12)));  // sorted second
  test::write_file(dir.file("train_000.bin"), llmc_shard(iota_tokens(0, 10)));
  const auto files = expand_data_path(dir.file("train_*.bin"), "data.path");
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0], dir.file("train_000.bin"));
  auto ds = open_token_files(files, "uint16", 4, 0.0, 1.0, false, 0, "data.path");
  EXPECT_EQ(ds->size(), (10 - 4) + (12 - 4));  // windows start where seq_len + 1 tokens remain in the file
  EXPECT_EQ(ds->spec().vocab, 112);            // the header's 1024 bytes are not tokens
  auto b = ds->collate({0, 5, 6, 13});
  EXPECT_EQ(b.input[0][0].item<int64_t>(), 0);
  EXPECT_EQ(b.target[1][3].item<int64_t>(), 9);   // the last window of the first shard ends at its end
  EXPECT_EQ(b.input[2][0].item<int64_t>(), 100);  // the next starts at the second shard
  EXPECT_EQ(b.target[3][3].item<int64_t>(), 111);
  // Eval walks non-overlapping windows per file: (10 - 1) / 4 + (12 - 1) / 4.
  auto ev = open_token_files(files, "uint16", 4, 0.0, 1.0, true, 0, "data.eval_path");
  EXPECT_EQ(ev->size(), 2 + 2);
  EXPECT_EQ(ev->collate({2}).input[0][0].item<int64_t>(), 100);
  // A split over shards takes the token range of the files end to end: the last 30% of 22 tokens
  // is the second shard's last 7 (token 15 of 22 onwards), one training window of 4 + 1 and more.
  auto tail = open_token_files(files, "uint16", 4, 0.7, 1.0, false, 0, "data.path");
  EXPECT_EQ(tail->size(), 7 - 4);
  EXPECT_EQ(tail->collate({0}).input[0][0].item<int64_t>(), 105);
  // uint32 shards (version 2) read at their width.
  test::write_file(dir.file("wide.bin"), llmc_shard({70000, 1, 2, 3, 4, 5}, 2));
  auto wide = open_token_file(dir.file("wide.bin"), "uint32", 4, 0.0, 1.0, false, 0);
  EXPECT_EQ(wide->collate({0}).input[0][0].item<int64_t>(), 70000);
}

TEST(Tokens, BadShardsAndGlobsAreNamed) {
  test::TempDir dir;
  auto error_of = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const DataError& e) {
      return e.hint().empty() ? std::string(e.what()) : std::string(e.what()) + " | hint: " + e.hint();
    }
    return "no error";
  };
  test::write_file(dir.file("short.bin"), llmc_shard(iota_tokens(0, 10), 1, 11));  // says 11, holds 10
  EXPECT_EQ(error_of([&] { open_token_file(dir.file("short.bin"), "uint16", 4, 0, 1, false, 0); }),
            dir.file("short.bin") +
                ": llm.c header says 11 tokens, but the file holds 10 after its header (a truncated or damaged "
                "shard?)");
  test::write_file(dir.file("wide.bin"), llmc_shard(iota_tokens(0, 10), 2));
  EXPECT_EQ(
      error_of([&] { open_token_file(dir.file("wide.bin"), "uint16", 4, 0, 1, false, 0); }),
      dir.file("wide.bin") + ": llm.c header says uint32 tokens (version 2) | hint: set data.token_dtype = \"uint32\"");
  test::write_file(dir.file("v7.bin"), llmc_shard(iota_tokens(0, 10), 7));
  EXPECT_NE(
      error_of([&] { open_token_file(dir.file("v7.bin"), "uint16", 4, 0, 1, false, 0); }).find("unknown version 7"),
      std::string::npos);
  EXPECT_EQ(
      error_of([&] { expand_data_path(dir.file("none_*.bin"), "data.eval_path"); }),
      "data.eval_path: no file matches \"" + dir.file("none_*.bin") + "\" | hint: check the pattern in data.eval_path");
  std::filesystem::create_directory(dir.file("sub.bin"));
  EXPECT_NE(error_of([&] { expand_data_path(dir.file("*.bin"), "data.path"); }).find("sub.bin: is a directory"),
            std::string::npos);
  // A shard cut inside its header is not read as raw tokens (the magic would become ids).
  test::write_file(dir.file("cut.bin"), llmc_shard(iota_tokens(0, 10)).substr(0, 600));
  EXPECT_EQ(error_of([&] { open_token_file(dir.file("cut.bin"), "uint16", 4, 0, 1, false, 0); }),
            dir.file("cut.bin") +
                ": starts with llm.c's shard magic (20240520) but holds 600 bytes, less than the 1024-byte header (a "
                "truncated shard?)");
  // Files too short: empty, shorter than a window in every file, or a split too short.
  test::write_file(dir.file("empty.bin"), "");
  EXPECT_EQ(error_of([&] { open_token_file(dir.file("empty.bin"), "uint16", 4, 0, 0.9, false, 0); }),
            dir.file("empty.bin") + ": holds no tokens (an empty file?)");
  test::TempDir shards;
  for (int i = 0; i < 3; ++i)
    test::write_file(shards.file("s" + std::to_string(i) + ".bin"), llmc_shard(iota_tokens(0, 4)));
  EXPECT_EQ(
      error_of([&] {
        open_token_files(expand_data_path(shards.file("s*.bin"), "data.path"), "uint16", 4, 0, 0.9, false, 0,
                         "data.path");
      }),
      "data.path (3 files): too short for one window of model.seq_len + 1 = 5 tokens in any one file (4 tokens in "
      "the longest) | hint: lower model.seq_len or give longer files");
  test::write_file(dir.file("ten.bin"), llmc_shard(iota_tokens(0, 10)));
  EXPECT_EQ(error_of([&] { open_token_file(dir.file("ten.bin"), "uint16", 4, 0, 0.3, false, 0); }),
            dir.file("ten.bin") +
                ": its training split is too short for one window of model.seq_len + 1 = 5 tokens | hint: lower "
                "data.eval_fraction or model.seq_len");
  // A path naming an existing file is taken literally, glob characters and all; "data[1].bin" as a
  // pattern would match data1.bin.
  test::write_file(dir.file("data[1].bin"), llmc_shard(iota_tokens(0, 10)));
  test::write_file(dir.file("data1.bin"), llmc_shard(iota_tokens(0, 10)));
  EXPECT_EQ(expand_data_path(dir.file("data[1].bin"), "data.path"), std::vector<std::string>{dir.file("data[1].bin")});
  EXPECT_EQ(expand_data_path(dir.file("data[0-9].bin"), "data.path"), std::vector<std::string>{dir.file("data1.bin")});
  // model.vocab = 0 with an id no tokenizer has (a file of another element type): named, not an
  // allocation failure of a 2^31-row embedding.
  std::string huge(4 * 8, '\0');
  const uint32_t big_id = 0x7fffffff;
  std::memcpy(&huge[4], &big_id, 4);
  test::write_file(dir.file("huge.bin"), huge);
  EXPECT_EQ(error_of([&] { open_token_file(dir.file("huge.bin"), "uint32", 4, 0, 1, false, 0); }),
            dir.file("huge.bin") +
                ": token id 2147483647 with model.vocab = 0 would make a 2147483648-id vocabulary (data.token_dtype = "
                "\"uint32\"; a file of another element type?) | hint: set model.vocab if the ids are right");
}

TEST(Tokens, EvalPathIsTheHeldOutSplitAndTheVocabularyCoversIt) {
  test::TempDir dir;
  test::write_file(dir.file("train_000.bin"), llmc_shard(iota_tokens(0, 40)));
  test::write_file(dir.file("val_000.bin"), llmc_shard(iota_tokens(200, 9)));
  DataConfig d;
  d.kind = DataKind::tokens;
  d.path = dir.file("train_*.bin");
  d.eval_path = dir.file("val_*.bin");
  d.eval_fraction = 0.25;  // ignored: data.eval_path holds the eval split
  ModelConfig m;
  m.seq_len = 4;
  m.vocab = 0;
  auto s = open_datasets(d, m, 1);
  EXPECT_EQ(s.train->size(), 40 - 4);  // all of data.path trains
  EXPECT_EQ(s.eval->size(), 2);
  EXPECT_EQ(s.train->spec().vocab, 209);  // the eval files' largest id + 1
  EXPECT_EQ(s.eval->spec().vocab, 209);
  EXPECT_EQ(s.eval->collate({1}).input[0][0].item<int64_t>(), 204);
  EXPECT_TRUE(s.notes.empty());
  // Bad held-out files are named by data.eval_path while the vocabulary is read too.
  d.eval_path = dir.path();
  try {
    open_datasets(d, m, 1);
    ADD_FAILURE() << "a directory opened as data.eval_path";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()), dir.path() + ": is a directory");
    EXPECT_EQ(e.hint(), "make data.eval_path name a file");
  }
  // Held-out files that also train are named.
  d.eval_path = dir.file("train_*.bin");
  auto same = open_datasets(d, m, 1);
  ASSERT_EQ(same.notes.size(), 1u);
  EXPECT_EQ(same.notes[0], "data.eval_path: " + dir.file("train_000.bin") +
                               " is also a training file (data.path): evaluation measures data the model trains on");
}

TEST(Tokens, IdsPastTheCheckedPrefixFailWhenTheirWindowIsRead) {
  test::TempDir dir;
  const int64_t n = (int64_t{1} << 20) + 64;  // the first 2^20 ids of a file are checked at open
  std::string bytes(static_cast<size_t>(n) * 2, '\0');
  bytes[static_cast<size_t>(n - 10) * 2] = '\xff';
  bytes[static_cast<size_t>(n - 10) * 2 + 1] = '\xff';  // token 65535 near the end
  test::write_file(dir.file("tok.bin"), bytes);
  auto ds = open_token_file(dir.file("tok.bin"), "uint16", 8, 0.0, 1.0, false, 100);
  EXPECT_EQ(ds->collate({0, n - 30}).input.sum().item<int64_t>(), 0);
  // An eval split is read in order, possibly hours in: all its ids are checked at open.
  EXPECT_THROW(open_token_file(dir.file("tok.bin"), "uint16", 8, 0.0, 1.0, true, 100), DataError);
  try {
    ds->collate({n - 15});
    ADD_FAILURE() << "a window holding token 65535 was read with model.vocab = 100";
  } catch (const DataError& e) {
    EXPECT_EQ(std::string(e.what()), dir.file("tok.bin") + ": token id 65535 at token " + std::to_string(n - 10) +
                                         " is not below model.vocab = 100 (a file from another tokenizer, or "
                                         "model.vocab too small?)");
  }
}

// A data file truncated under a running job: the read of a page it no longer holds names the file
// and exits 2 instead of dying of SIGBUS.
TEST(Tokens, FileTruncatedWhileMappedIsNamed) {
  test::TempDir dir;
  const std::string path = dir.file("shrinks.bin");
  test::write_file(path, std::string(1 << 20, '\1'));
  EXPECT_EXIT(
      {
        auto ds = open_token_file(path, "uint16", 8, 0.0, 1.0, false, 0);
        std::filesystem::resize_file(path, 0);
        ds->collate({(1 << 19) - 20});
      },
      ::testing::ExitedWithCode(2),
      "gtrain: data error: " + path + ": the data file shrank or vanished while the run read it \\(bus error\\)");
  // In a multi-rank run stderr goes through the prefixing thread, which never runs again after the
  // fault: the message must take the original stderr, prefixed.
  test::write_file(path, std::string(1 << 20, '\1'));
  EXPECT_EXIT(
      {
        start_rank_output_prefix(3);
        auto ds = open_token_file(path, "uint16", 8, 0.0, 1.0, false, 0);
        std::filesystem::resize_file(path, 0);
        ds->collate({(1 << 19) - 20});
      },
      ::testing::ExitedWithCode(2), "\\[rank 3\\] gtrain: data error: " + path + ": the data file shrank");
}

// Private (anonymous) resident memory of this process, from /proc/self/status.
int64_t rss_anon_bytes() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("RssAnon:", 0) == 0) return std::stoll(line.substr(8)) * 1024;
  }
  return -1;
}

TEST(Tokens, FilesAreMappedNotCopied) {
  test::TempDir dir;
  const int64_t n = int64_t{32} << 20;  // 64 MiB of uint16 tokens
  {
    std::string bytes(static_cast<size_t>(n) * 2, '\0');
    for (int64_t i = 0; i < n; i += 4096) bytes[static_cast<size_t>(i) * 2] = static_cast<char>((i / 4096) % 200);
    test::write_file(dir.file("big.bin"), bytes);
  }
  const int64_t before = rss_anon_bytes();
  ASSERT_GT(before, 0);
  // model.vocab = 0 reads every id to find the vocabulary; the mapped pages are the page cache's.
  auto ds = open_token_file(dir.file("big.bin"), "uint16", 64, 0.0, 0.9, false, 0);
  auto eval = open_token_file(dir.file("big.bin"), "uint16", 64, 0.9, 1.0, true, 0);
  EXPECT_EQ(ds->spec().vocab, 200);
  EXPECT_EQ(ds->collate({0, 4096, n / 2}).samples, 3);
  const int64_t grown = rss_anon_bytes() - before;
  EXPECT_LT(grown, 16 << 20) << "opening a 64 MiB token file twice grew private memory by " << grown << " bytes";
}

TEST(Tokens, TextFileReadAsTokensIsNamedWithTextBytes) {
  test::TempDir dir;
  // The GPL read as uint16 ids: a "vocabulary" of byte pairs (issue 47: 61k ids), no NUL anywhere.
  std::string text;
  for (int i = 0; i < 400; ++i)
    text += "This program is free software: you redistribute it, line " + std::to_string(i) + ".\n";
  text += "Unicode too: caf\xc3\xa9, \xe2\x80\x94 dashes\n";
  // An odd size cannot be uint16 ids at all: the error says it looks like text.
  test::write_file(dir.file("odd.txt"), text.size() % 2 ? text : text + "!");
  try {
    open_token_file(dir.file("odd.txt"), "uint16", 8, 0.0, 1.0, false, 0);
    ADD_FAILURE() << "an odd-sized uint16 file was accepted";
  } catch (const DataError& e) {
    EXPECT_EQ(e.hint(), "it looks like text: for raw text set data.kind = \"text_bytes\"");
  }
  if (text.size() % 2) text += "\n";
  test::write_file(dir.file("notes.txt"), text);
  const std::string note = text_file_note(dir.file("notes.txt"), "data.path");
  EXPECT_NE(note.find("data.path: " + dir.file("notes.txt") + " looks like text"), std::string::npos) << note;
  EXPECT_NE(note.find("data.kind = \"text_bytes\""), std::string::npos) << note;
  // Real token files are not text: uint16 ids below 256 have a zero high byte; ids above have bytes
  // of every value, control bytes included.
  std::string small, large;
  for (int i = 0; i < 4000; ++i) {
    const uint16_t a = static_cast<uint16_t>(i % 200), b = static_cast<uint16_t>(1000 + (i * 7919) % 50000);
    small.append(reinterpret_cast<const char*>(&a), 2);
    large.append(reinterpret_cast<const char*>(&b), 2);
  }
  test::write_file(dir.file("small.bin"), small);
  test::write_file(dir.file("large.bin"), large);
  EXPECT_EQ(text_file_note(dir.file("small.bin"), "data.path"), "");
  EXPECT_EQ(text_file_note(dir.file("large.bin"), "data.path"), "");
  // open_datasets puts the note among the console's warnings.
  DataConfig d;
  d.kind = DataKind::tokens;
  d.path = dir.file("notes.txt");
  ModelConfig m;
  m.name = "gpt";
  m.seq_len = 8;
  const DataSplits splits = open_datasets(d, m, 1);
  ASSERT_EQ(splits.notes.size(), 1u);
  EXPECT_EQ(splits.notes[0], note);
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
  // A glob of text files: one byte a token, windows within each file, held-out files by data.eval_path.
  test::write_file(dir.file("a.txt"), "0123456789");
  test::write_file(dir.file("b.txt"), "abcdefgh");
  DataConfig d;
  d.kind = DataKind::text_bytes;
  d.path = dir.file("[ab].txt");
  d.eval_path = dir.file("t.txt");
  ModelConfig m;
  m.seq_len = 4;
  auto s = open_datasets(d, m, 1);
  EXPECT_EQ(s.train->size(), (10 - 4) + (8 - 4));
  EXPECT_EQ(s.train->spec().vocab, 256);
  EXPECT_EQ(s.train->collate({6}).input[0][0].item<int64_t>(), 'a');
  EXPECT_EQ(s.eval->size(), (25 - 1) / 4);
  // An eval split too short for one window names data.eval_fraction.
  try {
    open_text_bytes(dir.file("t.txt"), 4, 0.95, 1.0, true);
    ADD_FAILURE() << "a 1-byte eval split opened";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("its eval split is too short for one window of model.seq_len + 1 = 5 tokens"),
              std::string::npos)
        << e.what();
    EXPECT_EQ(e.hint().rfind("raise data.eval_fraction", 0), 0u) << e.hint();
  }
  // A directory as data.path: a data error naming it, not the stream library's "Is a directory".
  for (auto open : {std::function<void()>([&] { open_text_bytes(dir.path(), 4, 0.0, 1.0, false); }),
                    std::function<void()>([&] { open_token_file(dir.path(), "uint16", 4, 0, 1, false, 0); })}) {
    try {
      open();
      ADD_FAILURE() << "a directory opened as data";
    } catch (const DataError& e) {
      EXPECT_EQ(std::string(e.what()), dir.path() + ": is a directory");
      EXPECT_EQ(e.hint(), "make data.path name a file");
    }
  }
}

TEST(Synthetic, DeterministicAndSplitsDiffer) {
  DataConfig d;
  d.kind = DataKind::synthetic;
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
  auto layout = [](int64_t dp, int64_t micro_batch, int64_t grad_accum) {
    ParallelLayout l;
    l.dp = dp, l.micro_batch = micro_batch, l.grad_accum = grad_accum;
    return l;
  };
  auto uneven = [](int64_t dp, int64_t grad_accum) {  // issue 25: dp need not divide the batch
    ParallelLayout l;
    l.dp = dp;
    l.split_batch(24, grad_accum);
    return l;
  };
  const std::vector<ParallelLayout> layouts = {layout(1, 24, 1), layout(1, 6, 4), layout(2, 12, 1), layout(2, 3, 4),
                                               layout(4, 6, 1),  layout(3, 4, 2), uneven(5, 1),     uneven(5, 4),
                                               uneven(7, 3),     uneven(1, 5),    uneven(11, 2),    uneven(24, 1)};
  for (int64_t step : {0, 7, 41, 42}) {  // step 41/42 straddle the epoch boundary (1000 / 24)
    std::multiset<int64_t> ref;
    for (int64_t g = step * B; g < (step + 1) * B; ++g) ref.insert(order.dataset_index(g));
    for (const auto& l : layouts) {
      std::multiset<int64_t> got;
      for (int64_t r = 0; r < l.dp; ++r)
        for (int64_t i = 0; i < l.grad_accum; ++i)
          for (auto idx : micro_batch_indices(order, l, step, r, i)) got.insert(idx);
      EXPECT_EQ(got, ref) << "dp=" << l.dp << " m=" << l.micro_batch << " a=" << l.grad_accum << " step " << step;
    }
  }
}

// Uneven shards: replica r takes B/dp samples (+1 on the first B%dp), split into grad_accum
// micro-batches differing by at most one; micro-step i of every replica precedes micro-step i+1,
// so the micro-batches tile the global batch in order. Even layouts keep the old formula.
TEST(Sampler, UnevenSharesTileTheBatch) {
  for (int64_t B : {1, 7, 24, 32, 97}) {
    for (int64_t dp = 1; dp <= B && dp <= 12; ++dp) {
      for (int64_t a = 1; a <= B / dp; ++a) {
        ParallelLayout l;
        l.dp = dp;
        l.split_batch(B, a);
        ASSERT_NO_THROW(l.validate(dp, B)) << l.factors(dp, B);
        int64_t next = 0;
        for (int64_t i = 0; i < a; ++i) {
          for (int64_t r = 0; r < dp; ++r) {
            EXPECT_EQ(l.micro_batch_offset(r, i), next) << l.factors(dp, B) << " r=" << r << " i=" << i;
            const int64_t n = l.micro_batch_size(r, i);
            EXPECT_GE(n, 1);
            EXPECT_LE(n, l.micro_batch);
            next += n;
          }
        }
        EXPECT_EQ(next, B) << l.factors(dp, B);
        for (int64_t r = 0; r < dp; ++r) {
          int64_t share = 0;
          for (int64_t i = 0; i < a; ++i) share += l.micro_batch_size(r, i);
          EXPECT_EQ(share, l.replica_batch(r));
          EXPECT_EQ(share, B / dp + (r < B % dp ? 1 : 0));
        }
        if (B % dp == 0 && (B / dp) % a == 0) {  // even: today's formula, bit for bit
          EXPECT_TRUE(l.even());
          for (int64_t i = 0; i < a; ++i)
            for (int64_t r = 0; r < dp; ++r) EXPECT_EQ(l.micro_batch_offset(r, i), (i * dp + r) * l.micro_batch);
        }
      }
    }
  }
  ParallelLayout l;
  l.dp = 3;
  l.split_batch(32, 1);
  EXPECT_EQ(l.shares(), "11, 11, 10");
  EXPECT_EQ(l.micro_batch, 11);
  l.split_batch(32, 3);  // 11 as 4, 4, 3 and 10 as 4, 3, 3
  EXPECT_EQ(l.micro_batch, 4);
  EXPECT_EQ(l.micro_batch_size(2, 0), 4);
  EXPECT_EQ(l.micro_batch_size(2, 1), 3);
  EXPECT_EQ(first_sample(l, 2, 1, 1), 2 * 32 + 12 + 4);  // step 2, after micro-step 0 (12) and replica 0's 4
  l.dp = 7;
  l.split_batch(32, 1);
  EXPECT_EQ(l.shares(), "5, 5, 5, 5, 4, 4, 4");
  l.dp = 20;
  l.split_batch(32, 1);
  EXPECT_EQ(l.shares(), "2 x 12, 1 x 8");
  // A split that would leave a replica an empty micro-batch is no layout.
  l.dp = 3;
  l.split_batch(32, 11);  // the 10-sample replica cannot run 11 micro-batches
  EXPECT_THROW(l.validate(3, 32), ConfigError);
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
