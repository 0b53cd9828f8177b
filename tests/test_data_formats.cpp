// test_data_formats.cpp: token files other tools wrote, read as they are: llm.c's Llama 3 shards
// (magic 20240801, version 7, uint32) and Megatron-LM's indexed dataset (.bin + .idx), each written
// here by its format's spec.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "runtime/core/errors.h"
#include "runtime/data/dataset.h"
#include "tests/support/test_util.h"

namespace gtrain {
namespace {

template <class T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

// llm.c's Llama 3 shard (dev/data/data_common.py, write_datafile with model_desc "llama-3"):
// 256 int32 (magic 20240801, version 7, token count), then the tokens as uint32.
std::string llama3_shard(const std::vector<uint32_t>& tokens, int32_t version = 7) {
  std::vector<int32_t> head(256, 0);
  head[0] = 20240801;
  head[1] = version;
  head[2] = static_cast<int32_t>(tokens.size());
  std::string out(reinterpret_cast<const char*>(head.data()), head.size() * 4);
  for (uint32_t t : tokens) put(out, t);
  return out;
}

// Megatron-LM's .idx (megatron/core/datasets/indexed_dataset.py, _IndexWriter): magic, version
// u64 1, dtype code u8, sequence count u64, document count u64, int32 lengths, int64 byte
// pointers, int64 document indices.
std::string megatron_idx(uint8_t code, int width, const std::vector<int32_t>& lengths,
                         const std::vector<int64_t>& documents) {
  std::string out("MMIDIDX\0\0", 9);
  put<uint64_t>(out, 1);
  put<uint8_t>(out, code);
  put<uint64_t>(out, lengths.size());
  put<uint64_t>(out, documents.size());
  for (int32_t l : lengths) put(out, l);
  int64_t at = 0;
  for (int32_t l : lengths) {
    put(out, at);
    at += int64_t{l} * width;
  }
  for (int64_t d : documents) put(out, d);
  return out;
}

template <class T>
std::string megatron_bin(const std::vector<uint32_t>& tokens) {
  std::string out;
  for (uint32_t t : tokens) put(out, static_cast<T>(t));
  return out;
}

std::vector<uint32_t> iota(uint32_t first, uint32_t n) {
  std::vector<uint32_t> v(n);
  for (uint32_t i = 0; i < n; ++i) v[i] = first + i;
  return v;
}

TEST(DataFormats, LlmcLlama3ShardsReadAsUint32) {
  test::TempDir dir;
  test::write_file(dir.file("llama3_000.bin"), llama3_shard({128000, 1, 2, 3, 4, 5, 6, 128001}));
  auto ds = open_token_file(dir.file("llama3_000.bin"), "uint32", 4, 0.0, 1.0, false, 0);
  EXPECT_EQ(ds->size(), 8 - 4);
  EXPECT_EQ(ds->spec().vocab, 128002);
  auto b = ds->collate({0, 3});
  EXPECT_EQ(b.input[0][0].item<int64_t>(), 128000);
  EXPECT_EQ(b.target[1][3].item<int64_t>(), 128001);
  // Its header says uint32: a config reading uint16 is told which to set.
  EXPECT_EQ(
      test::error_of<DataError>([&] { open_token_file(dir.file("llama3_000.bin"), "uint16", 4, 0, 1, false, 0); }),
      dir.file("llama3_000.bin") + ": llm.c header says uint32 tokens (version 7)");
  test::write_file(dir.file("v1.bin"), llama3_shard(iota(0, 8), 1));
  EXPECT_EQ(test::error_of<DataError>([&] { open_token_file(dir.file("v1.bin"), "uint32", 4, 0, 1, false, 0); }),
            dir.file("v1.bin") +
                ": llm.c token shard of unknown version 1 for magic 20240801 (20240520: 1 = uint16 tokens, 2 = "
                "uint32; 20240801: 7 = uint32)");
  test::write_file(dir.file("cut.bin"), llama3_shard(iota(0, 8)).substr(0, 100));
  EXPECT_EQ(test::error_of<DataError>([&] { open_token_file(dir.file("cut.bin"), "uint32", 4, 0, 1, false, 0); }),
            dir.file("cut.bin") +
                ": starts with llm.c's shard magic (20240801) but holds 100 bytes, less than the 1024-byte header (a "
                "truncated shard?)");
}

TEST(DataFormats, MegatronIndexedDatasetByPrefixOrBin) {
  test::TempDir dir;
  // Three documents of 5, 7 and 6 uint16 tokens (dtype code 8): one stream of 18 tokens.
  test::write_file(dir.file("corpus_text_document.bin"), megatron_bin<uint16_t>(iota(10, 18)));
  test::write_file(dir.file("corpus_text_document.idx"), megatron_idx(8, 2, {5, 7, 6}, {0, 1, 2, 3}));
  for (const std::string& path : {dir.file("corpus_text_document"), dir.file("corpus_text_document.bin")}) {
    const auto files = expand_data_path(path, "data.path");
    ASSERT_EQ(files, std::vector<std::string>{dir.file("corpus_text_document.bin")});
    // data.token_dtype is the .idx's, whatever the config says.
    auto ds = open_token_files(files, "uint32", 4, 0.0, 1.0, false, 0, "data.path");
    EXPECT_EQ(ds->size(), 18 - 4);
    EXPECT_EQ(ds->spec().vocab, 28);
    EXPECT_EQ(ds->collate({13}).target[0][3].item<int64_t>(), 27);
  }
  // int32 tokens (dtype code 4), Llama 3's vocabulary.
  test::write_file(dir.file("wide.bin"), megatron_bin<int32_t>({128000, 5, 6, 7, 8, 9}));
  test::write_file(dir.file("wide.idx"), megatron_idx(4, 4, {6}, {0, 1}));
  auto wide = open_token_file(dir.file("wide.bin"), "uint16", 4, 0.0, 1.0, false, 0);
  EXPECT_EQ(wide->collate({0}).input[0][0].item<int64_t>(), 128000);
}

TEST(DataFormats, BadMegatronIndexIsNamed) {
  test::TempDir dir;
  const std::string bin = dir.file("d.bin"), idx = dir.file("d.idx");
  test::write_file(bin, megatron_bin<uint16_t>(iota(0, 12)));
  auto open = [&] { open_token_file(bin, "uint16", 4, 0, 1, false, 0); };
  test::write_file(idx, "MMIDIDX");
  EXPECT_EQ(test::error_of<DataError>(open),
            idx + ": not a Megatron-LM index (expected the magic \"MMIDIDX\\0\\0\" and a 34-byte header)");
  std::string v2 = megatron_idx(8, 2, {12}, {0, 1});
  v2[9] = 2;
  test::write_file(idx, v2);
  EXPECT_EQ(test::error_of<DataError>(open), idx + ": index version 2, expected 1");
  test::write_file(idx, megatron_idx(6, 8, {12}, {0, 1}));
  EXPECT_EQ(test::error_of<DataError>(open),
            idx + ": dtype code 6 (float64): gtrain reads token ids of uint8, int16, uint16 or int32");
  test::write_file(idx, megatron_idx(8, 2, {12}, {0, 1}).substr(0, 50));
  EXPECT_EQ(test::error_of<DataError>(open),
            idx +
                ": holds 50 bytes, but its header says 1 sequences and 2 document indices (62 "
                "bytes): truncated or damaged");
  test::write_file(idx, megatron_idx(8, 2, {5, 8}, {0, 2}));  // 13 tokens for a 12-token .bin
  EXPECT_EQ(test::error_of<DataError>(open),
            idx +
                ": describes 13 uint16 tokens (26 bytes), but its .bin holds 24 bytes (another "
                "dataset's .bin, or a truncated one?)");
  std::string moved = megatron_idx(8, 2, {5, 7}, {0, 2});
  const int64_t wrong = 12;
  std::memcpy(&moved[34 + 8 + 8], &wrong, 8);  // the second sequence's pointer
  test::write_file(idx, moved);
  EXPECT_EQ(test::error_of<DataError>(open),
            idx +
                ": sequence 1 has length 7 at byte 12, expected byte 10 (the sequences follow each "
                "other in the .bin)");
  test::write_file(idx, megatron_idx(8, 2, {5, 7}, {0, 3}));
  EXPECT_EQ(test::error_of<DataError>(open),
            idx + ": document index 1 is 3 (expected 0 first, then non-decreasing up to 2)");
}

}  // namespace
}  // namespace gtrain
