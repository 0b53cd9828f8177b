// test_text_data.cpp: data.kind = "jsonl" / "text" in gtrain run: the launcher tokenizes the
// sources into a cache before the ranks start, and the run equals one on what gtrain prepare wrote
// (same shards, same losses); the cache is found again and its shards checked (one flipped byte
// refused by name); a bad source line and a tokenizer larger than model.vocab are one line, exit 2,
// with nothing cached.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/support/multiproc_util.h"
#include "tests/support/test_util.h"

namespace gtrain {
namespace {

namespace fs = std::filesystem;

// A 1-block GPT on 16-token windows; data from `data` (a [data] section's lines).
std::string text_job(const std::string& data) {
  return R"(
[model]
name = "gpt"
n_layer = 1
n_head = 2
n_embd = 16
seq_len = 16
vocab = 258
[data]
)" + data +
         R"(
[train]
global_batch = 4
steps = 4
eval_interval = 2
eval_batches = 2
threads = 1
[log]
progress = "none"
)";
}

test::CommandResult run(const test::TempDir& dir, const std::string& name, const std::string& data, int ranks) {
  test::write_file(dir.file(name + ".toml"), text_job(data));
  return test::run_command(GTRAIN_BINARY + " run " + dir.file(name + ".toml") + " --run-dir " + dir.file(name) +
                           " --ranks " + std::to_string(ranks));
}

// The only folder under `root` (the cache's key folder), "" when none.
std::string only_folder(const std::string& root) {
  std::string out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(root, ec)) {
    EXPECT_TRUE(out.empty()) << "more than one folder in " << root;
    out = e.path().string();
  }
  return out;
}

TEST(TextData, JsonlRunEqualsTheRunOnPreparedShards) {
  test::TempDir dir;
  std::string jsonl;
  for (int i = 0; i < 120; ++i)
    jsonl += "{\"id\": " + std::to_string(i) + ", \"text\": \"document " + std::to_string(i * 37 % 101) +
             ": the quick brown fox\"}\n";
  test::write_file(dir.file("c.jsonl"), jsonl);
  const auto prep = test::run_command(GTRAIN_BINARY + " prepare " + dir.file("c.jsonl") + " --tokenizer bytes --out " +
                                      dir.file("p") + " --append-eos --eval-fraction 0.1 --quiet");
  ASSERT_EQ(prep.exit_code, 0) << prep.output;
  const std::string jsonl_data = "kind = \"jsonl\"\npath = \"" + dir.file("c.jsonl") +
                                 "\"\ntokenizer = \"bytes\"\neval_fraction = 0.1\ncache_dir = \"" + dir.file("cache") +
                                 "\"";
  const auto a = run(dir, "a", jsonl_data, 2);
  ASSERT_EQ(a.exit_code, 0) << a.output;
  EXPECT_NE(a.output.find("gtrain: data: 1 source, 120 documents"), std::string::npos) << a.output;
  EXPECT_NE(a.output.find("prepared into " + dir.file("cache") + "/"), std::string::npos) << a.output;
  const auto b = run(dir, "b",
                     "kind = \"tokens\"\npath = \"" + dir.file("p/train_*.bin") + "\"\neval_path = \"" +
                         dir.file("p/eval_*.bin") + "\"",
                     2);
  ASSERT_EQ(b.exit_code, 0) << b.output;
  const auto la = train_losses(dir.file("a/metrics.jsonl")), lb = train_losses(dir.file("b/metrics.jsonl"));
  ASSERT_EQ(la.size(), 4u);
  EXPECT_EQ(la, lb);  // the same tokens in the same windows: the same losses, bit for bit
  const std::string cache = only_folder(dir.file("cache"));
  for (const char* shard : {"train_000000.bin", "eval_000000.bin"})
    EXPECT_EQ(test::read_file(cache + "/" + shard), test::read_file(dir.file("p/") + shard)) << shard;
  const auto stages = test::read_jsonl(dir.file("a/stages.jsonl"));
  ASSERT_EQ(stages.size(), 1u);
  EXPECT_GT(stages[0].value("prepare_s", 0.0), 0.0);  // the ledger records the preparation
  // Another run with the same cache finds it; a flipped byte in a shard is then refused by name.
  const auto c = run(dir, "c", jsonl_data, 1);
  ASSERT_EQ(c.exit_code, 0) << c.output;
  EXPECT_NE(c.output.find("prepared before, shards checked, in " + cache), std::string::npos) << c.output;
  {
    std::fstream f(cache + "/train_000000.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1500);
    f.put('\x7f');
  }
  const auto d = run(dir, "d", jsonl_data, 1);
  EXPECT_EQ(d.exit_code, 2) << d.output;
  EXPECT_NE(d.output.find(cache + "/train_000000.bin: CRC-32C "), std::string::npos) << d.output;
  EXPECT_FALSE(fs::exists(dir.file("d/metrics.jsonl")));
}

TEST(TextData, TextRunEqualsPreparedShardsAndBadSourcesAreOneLine) {
  test::TempDir dir;
  std::string a, b;
  for (int i = 0; i < 40; ++i) a += "Line " + std::to_string(i) + " of the first file.\n";
  for (int i = 0; i < 30; ++i) b += "The second file's line " + std::to_string(i * 3) + ".\n";
  fs::create_directories(dir.file("s"));
  test::write_file(dir.file("s/a.txt"), a);
  test::write_file(dir.file("s/b.txt"), b);
  const auto prep = test::run_command(GTRAIN_BINARY + " prepare " + dir.file("s/a.txt") + " " + dir.file("s/b.txt") +
                                      " --tokenizer bytes --out " + dir.file("p") + " --append-eos --quiet");
  ASSERT_EQ(prep.exit_code, 0) << prep.output;
  const auto t = run(
      dir, "t", "kind = \"text\"\npath = \"" + dir.file("s/*.txt") + "\"\ntokenizer = \"bytes\"\neval_fraction = 0", 1);
  ASSERT_EQ(t.exit_code, 0) << t.output;
  const auto k = run(dir, "k", "kind = \"tokens\"\npath = \"" + dir.file("p/train_*.bin") + "\"\neval_fraction = 0", 1);
  ASSERT_EQ(k.exit_code, 0) << k.output;
  EXPECT_EQ(train_losses(dir.file("t/metrics.jsonl")), train_losses(dir.file("k/metrics.jsonl")));
  EXPECT_TRUE(fs::exists(dir.file("t/data_cache")));  // data.cache_dir = "": in the run directory
  // A JSONL line without the key: one line naming file and line, exit 2, nothing cached.
  test::write_file(dir.file("bad.jsonl"), "{\"text\": \"fine\"}\n{\"text\": \"fine\"}\n{\"body\": \"no text\"}\n");
  const std::string bad_data = "kind = \"jsonl\"\npath = \"" + dir.file("bad.jsonl") +
                               "\"\ntokenizer = \"bytes\"\ncache_dir = \"" + dir.file("cache") + "\"";
  const auto bad = run(dir, "bad", bad_data, 1);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_EQ(test::lines(bad.output).size(), 1u) << bad.output;
  EXPECT_NE(bad.output.find(dir.file("bad.jsonl") + ":3: no key \"text\" in this line's object"), std::string::npos)
      << bad.output;
  EXPECT_EQ(only_folder(dir.file("cache")), "");
  // A tokenizer with more ids than the model has: both named, before anything is prepared.
  test::write_file(dir.file("v.toml"),
                   text_job("kind = \"text\"\npath = \"" + dir.file("s/a.txt") +
                            "\"\ntokenizer = \"bytes\"\ncache_dir = \"" + dir.file("cache3") + "\""));
  const auto v = test::run_command(GTRAIN_BINARY + " run " + dir.file("v.toml") + " --run-dir " + dir.file("v") +
                                   " --set model.vocab=100");
  EXPECT_EQ(v.exit_code, 2) << v.output;
  EXPECT_NE(v.output.find("data.tokenizer: bytes has 257 ids, more than model.vocab = 100"), std::string::npos)
      << v.output;
  EXPECT_FALSE(fs::exists(dir.file("cache3")));
}

}  // namespace
}  // namespace gtrain
