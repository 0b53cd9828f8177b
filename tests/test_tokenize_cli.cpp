// test_tokenize_cli.cpp: gtrain tokenize as a user and the differential tests call it: texts per
// line or per JSON line, the same output on any --jobs, decoding, and its errors (one line, exit 2).
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "runtime/core/text/pipeline.h"
#include "tests/support/test_util.h"

namespace gtrain {
namespace {

// A byte-level BPE whose id of each byte is the byte, plus the merge "h e" -> 256 and an end token.
std::string identity_tokenizer() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[text::byte_char(static_cast<unsigned char>(b))] = b;
  vocab["he"] = 256;
  vocab["<|end|>"] = 257;
  return nlohmann::json{{"added_tokens", {{{"id", 257}, {"content", "<|end|>"}, {"special", true}}}},
                        {"normalizer", nullptr},
                        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
                        {"post_processor", nullptr},
                        {"decoder", {{"type", "ByteLevel"}}},
                        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", {"h e"}}}}}
      .dump();
}

TEST(TokenizeCli, LinesJsonLinesJobsAndDecode) {
  test::TempDir dir;
  test::write_file(dir.file("tokenizer.json"), identity_tokenizer());
  const std::string tok = GTRAIN_BINARY + " tokenize " + dir.path();
  const auto one = test::run_command(tok + " --text 'hey<|end|>' --json");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_EQ(one.output, "[256,121,257]\n");
  // 200 texts, some with newlines inside (JSON lines): the same ids on 1 and 3 threads, in order.
  std::string lines;
  for (int i = 0; i < 200; ++i) lines += nlohmann::json("he said\n" + std::to_string(i)).dump() + "\n";
  test::write_file(dir.file("texts.jsonl"), lines);
  const auto serial = test::run_command(tok + " --file " + dir.file("texts.jsonl") + " --each-json-line --jobs 1");
  const auto threaded = test::run_command(tok + " --file " + dir.file("texts.jsonl") + " --each-json-line --jobs 3");
  ASSERT_EQ(serial.exit_code, 0) << serial.output;
  EXPECT_EQ(threaded.output, serial.output);
  const auto ids = test::lines(serial.output);
  ASSERT_EQ(ids.size(), 200u);
  EXPECT_EQ(ids[7], "256 32 115 97 105 100 10 55");
  // Back to text: every line decodes to its JSON line's text.
  test::write_file(dir.file("ids.txt"), serial.output);
  const auto back = test::run_command(tok + " --decode-file " + dir.file("ids.txt") + " --json");
  ASSERT_EQ(back.exit_code, 0) << back.output;
  EXPECT_EQ(back.output, lines);
  EXPECT_EQ(test::run_command(tok + " --decode '[256, 257]' --skip-special").output, "he\n");
}

TEST(TokenizeCli, BadInputIsOneLineAndExit2) {
  test::TempDir dir;
  test::write_file(dir.file("tokenizer.json"), identity_tokenizer());
  test::write_file(dir.file("bad.txt"), "fine\nab\xC3(\n");
  std::filesystem::create_directories(dir.file("wordpiece"));
  test::write_file(dir.file("wordpiece/tokenizer.json"), R"({"model": {"type": "WordPiece"}})");
  const std::string tok = GTRAIN_BINARY + " tokenize ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {dir.path() + " --file " + dir.file("bad.txt") + " --each-line",
       dir.file("bad.txt") + ":2: invalid UTF-8 at byte 2"},
      {dir.path() + " --file " + dir.file("bad.txt"), dir.file("bad.txt") + ": invalid UTF-8 at byte 7"},
      {dir.path() + " --file " + dir.file("nope.txt"), dir.file("nope.txt") + ": cannot read"},
      {dir.path() + " --decode '1 x'", "--decode: 'x' is not a token id"},
      {dir.path() + " --decode 999", "token id 999 is not in the tokenizer's vocabulary"},
      {dir.file("nothing"), dir.file("nothing") + ": no such tokenizer file or directory"},
      {dir.file("wordpiece"), "no \"normalizer\""},
  };
  for (const auto& [args, expect] : cases) {
    const auto r = test::run_command(tok + args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
    EXPECT_NE(r.output.find(expect), std::string::npos) << args << "\n" << r.output;
    EXPECT_EQ(test::lines(r.output).size(), 1u) << r.output;
  }
}

}  // namespace
}  // namespace gtrain
