// test_tokenizer.cpp: the C++ tokenizer's rules on small tokenizer.json files written here (BPE
// merges by rank, byte fallback, added tokens, the refused components, UTF-8), the Unicode
// differences it bridges, and, when ../shared/tokenizers is there, ids of the genuine files.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "runtime/core/errors.h"
#include "runtime/core/text/regex.h"
#include "runtime/core/text/tokenizer.h"
#include "runtime/core/text/unicode.h"
#include "tests/support/test_paths.h"
#include "tests/support/test_util.h"

namespace gtrain::text {
namespace {

using nlohmann::json;

// A byte-level BPE over the letters of "hello" and "low": merges l+o (rank 0), h+e, lo+w, he+l.
json byte_level_tokenizer() {
  json vocab = json::object();
  for (const char* t : {"h", "e", "l", "o", "w", "Ġ", "lo", "he", "low", "hel", "Ġl", "<|end|>"}) {
    vocab[t] = static_cast<int>(vocab.size());
  }
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", json::array({{{"id", 11},
                                         {"content", "<|end|>"},
                                         {"special", true},
                                         {"normalized", false},
                                         {"lstrip", false},
                                         {"rstrip", false},
                                         {"single_word", false}}})},
          {"normalizer", nullptr},
          {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
          {"post_processor", {{"type", "ByteLevel"}}},
          {"decoder", {{"type", "ByteLevel"}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"vocab", vocab},
            {"merges", json::array({"l o", "h e", "lo w", "he l", "Ġ l"})}}}};
}

// A Metaspace BPE with byte fallback and a BOS template, as Mistral's and TinyLlama's files.
json metaspace_tokenizer() {
  json vocab = {{"<unk>", 0}, {"<s>", 1}, {"</s>", 2}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab[name] = 3 + b;
  }
  for (const char* t : {"▁", "a", "b", "▁a", "▁ab"}) vocab[t] = static_cast<int>(vocab.size());
  return {
      {"added_tokens", json::array({{{"id", 1}, {"content", "<s>"}, {"special", true}, {"normalized", false}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "first"}, {"split", false}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders", json::array({{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
                                  {{"type", "ByteFallback"}},
                                  {{"type", "Fuse"}},
                                  {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}}},
      {"model",
       {{"type", "BPE"},
        {"unk_token", "<unk>"},
        {"fuse_unk", true},
        {"byte_fallback", true},
        {"vocab", vocab},
        {"merges", json::array({"▁ a", "▁a b"})}}}};
}

Tokenizer load_json(test::TempDir& dir, const json& j, const std::string& name = "tokenizer.json") {
  test::write_file(dir.file(name), j.dump());
  return Tokenizer::load(dir.file(name));
}

std::string load_error(const json& j) {
  test::TempDir dir;
  test::write_file(dir.file("tokenizer.json"), j.dump());
  try {
    Tokenizer::load(dir.file("tokenizer.json"));
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(dir.file("tokenizer.json")), std::string::npos) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "loaded: " << j.dump().substr(0, 200);
  return "";
}

TEST(Tokenizer, MergesByRankLeftmostFirstAndDecodesBack) {
  test::TempDir dir;
  const Tokenizer tok = load_json(dir, byte_level_tokenizer());
  // "hello": l+o (rank 0) first, then h+e, then he+l: hel lo. " low" is its own word: Ġ l o w ->
  // Ġ lo w -> Ġ low (Ġ+l, rank 4, lost its l to the better l+o merge).
  EXPECT_EQ(tok.encode("hello low"), (std::vector<uint32_t>{9, 6, 5, 8}));
  EXPECT_EQ(tok.decode({9, 6, 5, 8}), "hello low");
  // The special token written in the text is one id; decoding may leave it out.
  EXPECT_EQ(tok.encode("hello<|end|>"), (std::vector<uint32_t>{9, 6, 11}));
  EXPECT_EQ(tok.decode({9, 11}), "hel<|end|>");
  EXPECT_EQ(tok.decode({9, 11}, true), "hel");
  EXPECT_EQ(tok.vocab_size(), 12u);
  EXPECT_EQ(tok.token(8), "low");
  EXPECT_THROW(tok.decode({12}), ConfigError);
}

TEST(Tokenizer, MetaspaceByteFallbackAndTemplate) {
  test::TempDir dir;
  const Tokenizer tok = load_json(dir, metaspace_tokenizer());
  const uint32_t space = 259, a = 260, b = 261, space_a = 262, space_ab = 263;
  // "▁ab▁a": both ▁+a (rank 0) merge before ▁a+b (rank 1).
  EXPECT_EQ(tok.encode("ab a"), (std::vector<uint32_t>{1, space_ab, space_a}));
  EXPECT_EQ(tok.encode("ab a", false), (std::vector<uint32_t>{space_ab, space_a}));
  // é is not in the vocabulary: its bytes are.
  EXPECT_EQ(tok.encode("é", false), (std::vector<uint32_t>{space, 3 + 0xC3, 3 + 0xA9}));
  EXPECT_EQ(tok.decode({space, 3 + 0xC3, 3 + 0xA9}), "é");
  EXPECT_EQ(tok.decode({a, 3 + 0xC3}), "a\xEF\xBF\xBD");  // half a character: U+FFFD
  // prepend_scheme "first": the piece after <s> does not start the input, so it gets no ▁.
  EXPECT_EQ(tok.encode("a<s>b", false), (std::vector<uint32_t>{space_a, 1, b}));
  EXPECT_EQ(tok.bos_id(), std::optional<uint32_t>(1));
  EXPECT_EQ(tok.eos_id(), std::optional<uint32_t>(2));
}

TEST(Tokenizer, TokenizerConfigNamesBosAndEos) {
  test::TempDir dir;
  test::write_file(dir.file("tokenizer_config.json"), R"({"bos_token": {"content": "he"}, "eos_token": "<|end|>"})");
  const Tokenizer tok = load_json(dir, byte_level_tokenizer());
  EXPECT_EQ(tok.bos_id(), std::optional<uint32_t>(7));
  EXPECT_EQ(tok.eos_id(), std::optional<uint32_t>(11));
  // The directory is taken too; editing the config changes the hash.
  const std::string hash = tok.hash();
  test::write_file(dir.file("tokenizer_config.json"), R"({"eos_token": "low"})");
  const Tokenizer again = Tokenizer::load(dir.path());
  EXPECT_EQ(again.eos_id(), std::optional<uint32_t>(8));
  EXPECT_NE(again.hash(), hash);
}

TEST(Tokenizer, RefusesWhatItCannotComputeExactly) {
  auto with = [](const char* key, json value) {
    json j = byte_level_tokenizer();
    j[key] = std::move(value);
    return j;
  };
  json word_piece = byte_level_tokenizer();
  word_piece["model"]["type"] = "WordPiece";
  EXPECT_NE(load_error(word_piece).find("model type \"WordPiece\" is not supported"), std::string::npos);
  json unigram = byte_level_tokenizer();
  unigram["model"]["type"] = "Unigram";
  EXPECT_NE(load_error(unigram).find("Unigram"), std::string::npos);
  EXPECT_NE(
      load_error(with("normalizer", {{"type", "Precompiled"}})).find("normalizer \"Precompiled\" is not supported"),
      std::string::npos);
  EXPECT_NE(load_error(with("pre_tokenizer", {{"type", "Whitespace"}})).find("pre_tokenizer \"Whitespace\""),
            std::string::npos);
  EXPECT_NE(load_error(with("decoder", {{"type", "WordPiece"}})).find("decoder \"WordPiece\""), std::string::npos);
  EXPECT_NE(load_error(with("post_processor", {{"type", "RobertaProcessing"}})).find("RobertaProcessing"),
            std::string::npos);
  json dropout = byte_level_tokenizer();
  dropout["model"]["dropout"] = 0.1;
  EXPECT_NE(load_error(dropout).find("dropout"), std::string::npos);
  json bad_merge = byte_level_tokenizer();
  bad_merge["model"]["merges"].push_back("x y");
  EXPECT_NE(load_error(bad_merge).find("merge \"x y\""), std::string::npos);
  test::TempDir dir;
  EXPECT_THROW(Tokenizer::load(dir.path()), ConfigError);  // no tokenizer.json in it
}

TEST(Tokenizer, AddedTokenStripAndSingleWord) {
  json j = byte_level_tokenizer();
  j["added_tokens"].push_back({{"id", 12},
                               {"content", "ow"},
                               {"special", false},
                               {"normalized", false},
                               {"lstrip", true},
                               {"rstrip", true},
                               {"single_word", true}});
  test::TempDir dir;
  const Tokenizer tok = load_json(dir, j);
  // Alone between spaces it is one token and takes the spaces; inside a word it is not matched.
  EXPECT_EQ(tok.encode("he ow  lo"), (std::vector<uint32_t>{7, 12, 6}));
  EXPECT_EQ(tok.encode("low"), (std::vector<uint32_t>{8}));
}

TEST(Utf8, ErrorsAtTheFirstBadByteAndLossyAsRust) {
  EXPECT_EQ(utf8_error("é😀 ok"), std::nullopt);
  EXPECT_EQ(utf8_error("ab\xC3"), std::optional<size_t>(2));            // truncated
  EXPECT_EQ(utf8_error("a\xED\xA0\x80"), std::optional<size_t>(1));     // a surrogate
  EXPECT_EQ(utf8_error("\xF4\x90\x80\x80"), std::optional<size_t>(0));  // past U+10FFFF
  EXPECT_EQ(utf8_error("\xC0\xAF"), std::optional<size_t>(0));          // overlong
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_lossy("\xF0\x90\x80"
                       "A"),
            fffd + "A");  // one maximal subpart
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), fffd + fffd);
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), fffd + fffd + fffd);
  EXPECT_EQ(utf8_lossy("x\xE2\x82"), "x" + fffd);
}

TEST(Unicode, BridgesTheVersionsTokenizersUses) {
  // tokenizers' normalizers know Unicode 9: a Nag Mundari mark (15.0) is not reordered.
  EXPECT_EQ(normalize("\U0001E4EC\u0301", NormalForm::nfc), "\U0001E4EC\u0301");
  EXPECT_EQ(normalize("e\u0301", NormalForm::nfc), "\u00E9");
  EXPECT_EQ(normalize("\uFB01", NormalForm::nfkc), "fi");
  // Rust's lower-casing (Unicode 17) and its one multi-character mapping.
  EXPECT_EQ(lowercase("\uA7CB"), "\u0264");
  EXPECT_EQ(lowercase("\u0130X"), "i\u0307x");
  EXPECT_TRUE(is_numeric(0x10D40));  // a Garay digit (16.0)
  EXPECT_TRUE(is_numeric(0xBD));     // ½
  EXPECT_FALSE(is_numeric('a'));
  // Oniguruma's \s is White_Space (PCRE2's misses U+0085); Unicode 16 letters count as \p{L}.
  std::vector<std::pair<size_t, size_t>> m;
  Regex(R"(\s+)", "test").find_all("a\u0085b", m);
  EXPECT_EQ(m, (std::vector<std::pair<size_t, size_t>>{{1, 3}}));
  Regex(R"(\p{L}+)", "test").find_all("\U00010D4A\U00010D4B", m);
  EXPECT_EQ(m, (std::vector<std::pair<size_t, size_t>>{{0, 8}}));
  Regex(R"(\p{N}{1,3})", "test").find_all("12345", m);
  EXPECT_EQ(m, (std::vector<std::pair<size_t, size_t>>{{0, 3}, {3, 5}}));
  EXPECT_EQ(onig_to_pcre2(R"(\s+(?!\S))", "t"), R"(\p{White_Space}+(?!\P{White_Space}))");
  EXPECT_THROW(onig_to_pcre2(R"([\W])", "t"), ConfigError);
}

// The genuine files, when ../shared/tokenizers is beside the clone (the Python suite compares whole
// corpora against Hugging Face's library; these ids are the ones its documentation shows).
TEST(Tokenizer, GenuineFilesGiveTheirKnownIds) {
  const std::string root = GTRAIN_SOURCE_DIR + "/../shared/tokenizers";
  if (!std::filesystem::exists(root + "/gpt2/tokenizer.json")) GTEST_SKIP() << root << " is not here";
  const struct {
    const char* name;
    std::vector<uint32_t> ids;
    std::optional<uint32_t> eos;
  } cases[] = {{"gpt2", {15496, 995}, 50256},
               {"llama3", {128000, 9906, 1917}, 128009},
               {"qwen3", {9707, 1879}, 151645},
               {"tinyllama", {1, 15043, 3186}, 2}};
  for (const auto& c : cases) {
    const Tokenizer tok = Tokenizer::load(root + "/" + c.name);
    EXPECT_EQ(tok.encode("Hello world"), c.ids) << c.name;
    EXPECT_EQ(tok.decode(tok.encode("Hello world"), true), "Hello world") << c.name;
    EXPECT_EQ(tok.eos_id(), c.eos) << c.name;
  }
}

}  // namespace
}  // namespace gtrain::text
