// test_prepare.cpp: gtrain prepare's pipeline (runtime/core/text/) with the byte encoder: the ids
// of JSONL and text documents in llm.c shards, the eval split, compressed inputs, the same bytes
// for any thread count, a rerun that does nothing, and bad input named by file and line with
// nothing left behind.
#include <gtest/gtest.h>
#include <zlib.h>
#include <zstd.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "runtime/core/errors.h"
#include "runtime/core/text/documents.h"
#include "runtime/core/text/encoder.h"
#include "runtime/core/text/prepare.h"
#include "runtime/core/text/text_data.h"
#include "runtime/core/text/tokenizer.h"
#include "tests/support/test_util.h"

namespace gtrain::text {
namespace {

namespace fs = std::filesystem;

// The ids of an llm.c shard, its header checked.
std::vector<uint32_t> shard_ids(const std::string& path) {
  const std::string b = test::read_file(path);
  EXPECT_GE(b.size(), 1024u);
  int32_t head[3];
  std::memcpy(head, b.data(), sizeof(head));
  const int width = head[0] == 20240520 ? 2 : 4;
  EXPECT_EQ(head[1], width == 2 ? 1 : 7);
  EXPECT_EQ(b.size(), 1024u + static_cast<size_t>(head[2]) * width);
  std::vector<uint32_t> ids(static_cast<size_t>(head[2]));
  for (size_t i = 0; i < ids.size(); ++i) {
    uint32_t v = 0;
    std::memcpy(&v, b.data() + 1024 + i * width, width);
    ids[i] = v;
  }
  return ids;
}

std::vector<uint32_t> bytes_of(const std::string& s, bool eos) {
  std::vector<uint32_t> v;
  for (unsigned char c : s) v.push_back(c);
  if (eos) v.push_back(256);
  return v;
}

PrepareResult run(const std::vector<std::string>& inputs, const std::string& out, int jobs = 1,
                  const std::function<void(PrepareOptions&)>& tweak = {}) {
  PrepareOptions o;
  o.inputs = inputs;
  o.out = out;
  o.jobs = jobs;
  o.progress = false;
  if (tweak) tweak(o);
  return prepare(o, byte_encoder());
}

// What `parent` holds, by name: a failed prepare leaves nothing there.
std::vector<std::string> entries(const std::string& parent) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(parent)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(Prepare, JsonlAndTextDocumentsBecomeShardIds) {
  test::TempDir dir;
  test::write_file(dir.file("a.jsonl"), "{\"text\": \"héllo\", \"id\": 1}\n\n{\"id\": 2, \"text\": \"wörld\\n2\"}\r\n");
  test::write_file(dir.file("b.txt"), "one file\nis one document\n");
  const auto r = run({dir.file("a.jsonl"), dir.file("b.txt")}, dir.file("out"), 1,
                     [](PrepareOptions& o) { o.recipe.append_eos = true; });
  EXPECT_FALSE(r.up_to_date);
  std::vector<uint32_t> want = bytes_of("héllo", true);
  for (const auto& d : {std::string("wörld\n2"), std::string("one file\nis one document\n")}) {
    const auto ids = bytes_of(d, true);
    want.insert(want.end(), ids.begin(), ids.end());
  }
  EXPECT_EQ(shard_ids(dir.file("out/train_000000.bin")), want);
  const PrepareManifest m = read_prepare_manifest(dir.file("out"));
  EXPECT_EQ(m.documents, 3);
  EXPECT_EQ(m.tokens, static_cast<int64_t>(want.size()));
  EXPECT_EQ(m.dtype, "uint16");
  ASSERT_EQ(m.inputs.size(), 2u);
  EXPECT_EQ(m.inputs[0].format, "jsonl");
  EXPECT_EQ(m.inputs[1].format, "text");
  EXPECT_EQ(m.inputs[1].bytes, 25u);
  EXPECT_EQ(PrepareManifest::from_json(m.to_json(), "m").to_json(), m.to_json());
  verify_shards(dir.file("out"), m);
  // --split-lines: one document a line, blank lines none.
  run({dir.file("b.txt")}, dir.file("lines"), 1, [](PrepareOptions& o) { o.recipe.split_lines = true; });
  EXPECT_EQ(read_prepare_manifest(dir.file("lines")).documents, 2);
  EXPECT_EQ(shard_ids(dir.file("lines/train_000000.bin")), bytes_of("one fileis one document", false));
}

TEST(Prepare, EvalShardsShardSizesAndThreadsGiveTheSameBytes) {
  test::TempDir dir;
  std::string jsonl;
  for (int i = 0; i < 5000; ++i)
    jsonl += "{\"text\": \"document " + std::to_string(i) + " " + std::string(i % 97, 'x') + "\"}\n";
  test::write_file(dir.file("d.jsonl"), jsonl);
  auto tweak = [](PrepareOptions& o) {
    o.recipe.eval_fraction = 0.25;
    o.recipe.shard_tokens = 50000;
    o.recipe.append_eos = true;
  };
  const auto one = run({dir.file("d.jsonl")}, dir.file("j1"), 1, tweak);
  const auto three = run({dir.file("d.jsonl")}, dir.file("j3"), 3, tweak);
  EXPECT_EQ(one.manifest.eval_documents, 1250);  // documents 3, 7, 11, ...
  EXPECT_GT(one.manifest.shards.size(), 4u);
  auto j1 = one.manifest.to_json(), j3 = three.manifest.to_json();
  j1.erase("seconds"), j3.erase("seconds");
  EXPECT_EQ(j1, j3);
  for (const auto& s : one.manifest.shards)
    EXPECT_EQ(test::read_file(dir.file("j1/" + s.file)), test::read_file(dir.file("j3/" + s.file))) << s.file;
  const auto eval = shard_ids(dir.file("j1/eval_000000.bin"));
  const auto first = bytes_of("document 3 xxx", true);
  EXPECT_TRUE(std::equal(first.begin(), first.end(), eval.begin()));
  EXPECT_TRUE(eval_document(3, 0.25) && !eval_document(4, 0.25) && eval_document(7, 0.25));
}

TEST(Prepare, GzipAndZstdInputsGiveThePlainShards) {
  test::TempDir dir;
  std::string text;
  for (int i = 0; i < 20000; ++i) text += "{\"text\": \"line " + std::to_string(i * 7919 % 10007) + "\"}\n";
  test::write_file(dir.file("d.jsonl"), text);
  gzFile gz = gzopen(dir.file("d.jsonl.gz").c_str(), "wb");
  gzwrite(gz, text.data(), static_cast<unsigned>(text.size()));
  gzclose(gz);
  std::string z(ZSTD_compressBound(text.size()), '\0');
  z.resize(ZSTD_compress(z.data(), z.size(), text.data(), text.size(), 3));
  test::write_file(dir.file("d.jsonl.zst"), z);
  run({dir.file("d.jsonl")}, dir.file("plain"));
  run({dir.file("d.jsonl.gz")}, dir.file("gz"), 2);
  run({dir.file("d.jsonl.zst")}, dir.file("zst"), 2);
  const std::string plain = test::read_file(dir.file("plain/train_000000.bin"));
  EXPECT_GT(plain.size(), 200000u);
  EXPECT_EQ(test::read_file(dir.file("gz/train_000000.bin")), plain);
  EXPECT_EQ(test::read_file(dir.file("zst/train_000000.bin")), plain);
  // A damaged compressed file is named.
  z[z.size() / 2] ^= 0x55;
  z.resize(z.size() - 8);
  test::write_file(dir.file("bad.jsonl.zst"), z);
  EXPECT_NE(test::error_of<DataError>([&] {
              run({dir.file("bad.jsonl.zst")}, dir.file("bad"));
            }).find(dir.file("bad.jsonl.zst") + ": "),
            std::string::npos);
  EXPECT_FALSE(fs::exists(dir.file("bad")));
}

TEST(Prepare, RerunDoesNothingAndChangedInputPreparesAgain) {
  test::TempDir dir;
  test::write_file(dir.file("a.txt"), "abc");
  EXPECT_FALSE(run({dir.file("a.txt")}, dir.file("out")).up_to_date);
  const auto again = run({dir.file("a.txt")}, dir.file("out"), 2);
  EXPECT_TRUE(again.up_to_date);
  test::write_file(dir.file("a.txt"), "abd");
  EXPECT_FALSE(run({dir.file("a.txt")}, dir.file("out")).up_to_date);
  EXPECT_EQ(shard_ids(dir.file("out/train_000000.bin")), bytes_of("abd", false));
  EXPECT_EQ(entries(dir.path()), (std::vector<std::string>{"a.txt", "out"}));
  // Another folder than prepare's is not replaced.
  fs::create_directory(dir.file("mine"));
  test::write_file(dir.file("mine/notes.txt"), "keep");
  EXPECT_THROW(run({dir.file("a.txt")}, dir.file("mine")), ConfigError);
  EXPECT_EQ(test::read_file(dir.file("mine/notes.txt")), "keep");
}

TEST(Prepare, BadInputIsOneLineAndLeavesNothing) {
  test::TempDir dir;
  const std::string out = dir.file("out");
  auto bad = [&](const std::string& name, const std::string& content) {
    test::write_file(dir.file(name), content);
    const std::string e = test::error_of<DataError>([&] { run({dir.file("ok.txt"), dir.file(name)}, out, 2); });
    for (const auto& name : entries(dir.path())) EXPECT_EQ(name.find("out"), std::string::npos) << name << ": " << e;
    return e;
  };
  test::write_file(dir.file("ok.txt"), "fine\n");
  EXPECT_EQ(bad("u.txt", "good line\nbad \xff byte\n"), dir.file("u.txt") + ":2: invalid UTF-8 at byte 4");
  EXPECT_EQ(bad("k.jsonl", "{\"text\": \"a\"}\n{\"body\": \"b\"}\n"),
            dir.file("k.jsonl") + ":2: no key \"text\" in this line's object");
  EXPECT_EQ(
      bad("j.jsonl", "{\"text\": \"a\"}\n\n{\"text\": \"b\"\n").rfind(dir.file("j.jsonl") + ":3: not a JSON line (", 0),
      0u);
  EXPECT_EQ(bad("n.jsonl", "{\"text\": 5}\n"), dir.file("n.jsonl") + ":1: \"text\" is a number, expected a string");
  EXPECT_EQ(bad("v.jsonl", "{\"text\": \"caf\xc3\"}\n"), dir.file("v.jsonl") + ":1: invalid UTF-8 at byte 13");
  EXPECT_EQ(test::error_of<DataError>([&] {
              run({dir.file("ok.txt"), dir.file("missing.txt")}, out);
            }),
            dir.file("missing.txt") + ": cannot read (No such file or directory)");
  EXPECT_FALSE(fs::exists(out));
}

// GPT-2's tokenizer.json (GTRAIN_TEST_TOKENIZERS/gpt2): "Hello world" is 15496 995 as in Hugging
// Face, EOS <|endoftext|> 50256, uint16 shards; every document's ids are the tokenizer's, in order,
// with 2 threads.
TEST(Prepare, Gpt2TokenizerShards) {
  const std::string gpt2 = test::test_path("GTRAIN_TEST_TOKENIZERS") + "/gpt2";
  if (!fs::exists(gpt2 + "/tokenizer.json")) GTEST_SKIP() << "no GPT-2 tokenizer at " << gpt2;
  test::TempDir dir;
  std::vector<std::string> docs = {"Hello world", " caf\\u00e9 au lait, 12345 \\ud83d\\ude00", "line one\\nline two"};
  std::string jsonl;
  for (int i = 0; i < 300; ++i) jsonl += "{\"text\": \"" + docs[i % 3] + " " + std::to_string(i) + "\"}\n";
  test::write_file(dir.file("d.jsonl"), "{\"text\": \"Hello world\"}\n" + jsonl);
  PrepareOptions o;
  o.inputs = {dir.file("d.jsonl")};
  o.out = dir.file("out");
  o.jobs = 2;
  o.progress = false;
  o.recipe.append_eos = true;
  const PrepareResult r = prepare(o, load_encoder(gpt2));
  EXPECT_EQ(r.manifest.dtype, "uint16");
  EXPECT_EQ(r.manifest.vocab_size, 50257);
  const auto ids = shard_ids(dir.file("out/train_000000.bin"));
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(std::vector<uint32_t>(ids.begin(), ids.begin() + 3), (std::vector<uint32_t>{15496, 995, 50256}));
  const Tokenizer tok = Tokenizer::load(gpt2);
  std::vector<uint32_t> want = {15496, 995, 50256};
  for (const auto& line : test::lines(jsonl)) {
    const auto one = tok.encode(nlohmann::json::parse(line).at("text").get<std::string>());
    want.insert(want.end(), one.begin(), one.end());
    want.push_back(50256);
  }
  EXPECT_EQ(ids, want);
}

// data.tokenizer, else checkpoint.init_from's folder (named, or holding the file named) when it has
// a tokenizer.json; else one line saying what to set. The cache root: data.cache_dir or the run's.
TEST(TextData, TokenizerDefaultsToInitFromsFolderAndTheCacheToTheRun) {
  test::TempDir dir;
  JobConfig c;
  c.data.kind = DataKind::jsonl;
  c.data.tokenizer = "bytes";
  EXPECT_EQ(text_tokenizer(c), "bytes");
  c.data.tokenizer = "";
  test::write_file(dir.file("tokenizer.json"), "{}");
  c.checkpoint.init_from = dir.path();
  EXPECT_EQ(text_tokenizer(c), dir.path());
  c.checkpoint.init_from = dir.file("model.safetensors");
  EXPECT_EQ(text_tokenizer(c), dir.path());
  c.checkpoint.init_from = "";
  try {
    text_tokenizer(c);
    ADD_FAILURE() << "no tokenizer accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "data.tokenizer: not set, and checkpoint.init_from is not set either: data.kind = \"jsonl\" needs a "
              "tokenizer");
  }
  EXPECT_EQ(text_cache_root(c, "runs/a"), "runs/a/data_cache");
  c.data.cache_dir = "/shared/cache";
  EXPECT_EQ(text_cache_root(c, "runs/a"), "/shared/cache");
}

// A rank takes the folder the launcher handed over; one its host does not see is prepared there.
TEST(TextData, ARankPreparesWhatItsHostDoesNotSee) {
  test::TempDir dir;
  test::write_file(dir.file("a.jsonl"), "{\"text\": \"one\"}\n{\"text\": \"two\"}\n");
  JobConfig c;
  c.data.kind = DataKind::jsonl;
  c.data.path = dir.file("a.jsonl");
  c.data.tokenizer = "bytes";
  c.data.cache_dir = dir.file("cache");
  const TextData here = text_data_for_rank(c, dir.path(), {{kEnvTextData, dir.file("other-host/cache/0123")}});
  EXPECT_TRUE(here.prepared);
  EXPECT_EQ(fs::path(here.dir).parent_path().string(), dir.file("cache"));
  EXPECT_EQ(here.manifest.documents, 2);
  const TextData handed = text_data_for_rank(c, dir.path(), {{kEnvTextData, here.dir}});
  EXPECT_FALSE(handed.prepared);
  EXPECT_EQ(handed.dir, here.dir);
  EXPECT_EQ(handed.manifest.key, here.manifest.key);
}

}  // namespace
}  // namespace gtrain::text
