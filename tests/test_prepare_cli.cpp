// test_prepare_cli.cpp: `gtrain prepare` as a user runs it: one line and exit 2 for bad input with
// nothing written, a SIGKILL at any moment never leaving a folder a run accepts, peak memory that
// does not grow with the input, and a rerun that says it did nothing.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <filesystem>
#include <sstream>
#include <string>
#include <thread>

#include "runtime/core/errors.h"
#include "runtime/core/text/prepare_manifest.h"
#include "tests/support/test_util.h"

namespace gtrain {
namespace {

namespace fs = std::filesystem;

// A JSONL file of about `mb` MB: varied lines, so the ids are not one repeated pattern.
void write_jsonl(const std::string& path, int mb) {
  std::string out;
  for (int i = 0; out.size() < static_cast<size_t>(mb) << 20; ++i)
    out += "{\"text\": \"line " + std::to_string(i) + " " + std::string(static_cast<size_t>(i % 200), 'a' + i % 26) +
           "\"}\n";
  test::write_file(path, out);
}

std::string prepare(const std::string& args) {
  return GTRAIN_BINARY + " prepare " + args;
}

// The peak memory line's value in MiB.
double peak_mib(const std::string& output) {
  const auto at = output.find("peak memory ");
  if (at == std::string::npos) return -1;
  std::istringstream in(output.substr(at + 12));
  double v = 0;
  std::string unit;
  in >> v >> unit;
  return unit == "GiB" ? v * 1024 : unit == "KiB" ? v / 1024 : v;
}

TEST(PrepareCli, BadInputIsOneLineExit2AndNothingWritten) {
  test::TempDir dir;
  test::write_file(dir.file("a.jsonl"), "{\"text\": \"ok\"}\n{\"text\": \"caf\xc3\"}\n");
  auto r = test::run_command(prepare(dir.file("a.jsonl") + " --tokenizer bytes --out " + dir.file("out")));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(test::lines(r.output).size(), 1u) << r.output;
  EXPECT_NE(r.output.find(dir.file("a.jsonl") + ":2: invalid UTF-8 at byte 13"), std::string::npos) << r.output;
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator()), 1);
  r = test::run_command(prepare(dir.file("none.txt") + " --tokenizer bytes --out " + dir.file("out")));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find(dir.file("none.txt") + ": cannot read (No such file or directory)"), std::string::npos);
}

TEST(PrepareCli, KilledAtAnyMomentLeavesNothingARunAccepts) {
  test::TempDir dir;
  write_jsonl(dir.file("d.jsonl"), 12);
  const std::string out = dir.file("out");
  const std::string args = "prepare " + dir.file("d.jsonl") +
                           " --tokenizer bytes --jobs 1 --shard-tokens 1000000 --eval-fraction 0.1 --out " + out;
  int killed = 0;
  std::vector<int64_t> complete;  // the token counts of folders left complete
  for (int ms : {1, 5, 15, 30, 60, 100, 150, 250}) {
    fs::remove_all(out);
    const pid_t pid = test::spawn_gtrain(args, dir.file("log"));
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    ::kill(pid, SIGKILL);
    killed += test::wait_exit(pid) == 128 + SIGKILL;
    // Either no folder, or a complete one: its manifest and every shard it lists, CRCs right.
    if (!fs::exists(out)) continue;
    const text::PrepareManifest m = text::read_prepare_manifest(out);
    EXPECT_NO_THROW(text::verify_shards(out, m)) << "killed after " << ms << " ms";
    complete.push_back(m.tokens);
  }
  EXPECT_GE(killed, 3);  // most kills landed while it worked
  // What a killed one left beside the output (its staging folder) is cleared by the next.
  fs::remove_all(out);
  const auto r = test::run_command(GTRAIN_BINARY + " " + args);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const auto& e : fs::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename().string().find(".out.tmp-"), std::string::npos) << e.path();
  for (int64_t tokens : complete) EXPECT_EQ(tokens, text::read_prepare_manifest(out).tokens);
  const auto again = test::run_command(GTRAIN_BINARY + " " + args);
  EXPECT_NE(again.output.find("is up to date (same tokenizer, options and input bytes"), std::string::npos)
      << again.output;
}

TEST(PrepareCli, PeakMemoryDoesNotGrowWithTheInput) {
  GTRAIN_SKIP_MEMORY_MEASURE_IF_SANITIZED();
  test::TempDir dir;
  write_jsonl(dir.file("small.jsonl"), 8);
  write_jsonl(dir.file("large.jsonl"), 32);
  const auto small =
      test::run_command(prepare(dir.file("small.jsonl") + " --tokenizer bytes --jobs 1 --out " + dir.file("s")));
  const auto large =
      test::run_command(prepare(dir.file("large.jsonl") + " --tokenizer bytes --jobs 1 --out " + dir.file("l")));
  ASSERT_EQ(small.exit_code, 0) << small.output;
  ASSERT_EQ(large.exit_code, 0) << large.output;
  const double s = peak_mib(small.output), l = peak_mib(large.output);
  EXPECT_GT(s, 1) << small.output;
  // 4x the input (both fill the chunks in flight), the same memory: the large input's 24 MiB more would show.
  EXPECT_LT(l, s + 6) << small.output << large.output;
}

// --format chat: the conversations' line; a bad line is one line with its file:line and exit 2, or
// with --on-bad-line skip a warning and a count; gtrain status shows a ledger's conversation counts.
TEST(PrepareCli, ChatFormatAndItsCountsInStatus) {
  test::TempDir dir;
  const std::string tok = GTRAIN_SOURCE_DIR + "/examples/tokenizer-bpe512";
  test::write_file(dir.file("c.jsonl"),
                   "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", "
                   "\"content\": \"Yo\"}]}\n{\"messages\": [{\"role\": \"user\", \"content\": 3}]}\n");
  const std::string args = dir.file("c.jsonl") + " --tokenizer " + tok + " --format chat --chat-template plain --quiet";
  auto r = test::run_command(prepare(args + " --out " + dir.file("out")));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_EQ(r.output, "gtrain: data error: " + dir.file("c.jsonl") +
                          ":2: messages[0]'s content is a number, expected a string\n");
  r = test::run_command(prepare(args + " --out " + dir.file("out") + " --on-bad-line skip --train-on all"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("gtrain prepare: chat with the plain template, training on all: 6 trained tokens, 1 bad "
                          "line skipped, 0 with tools ignored"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("c.jsonl:2: messages[0]'s content is a number, expected a string; line skipped"),
            std::string::npos)
      << r.output;
  fs::create_directories(dir.file("run"));
  test::write_file(dir.file("run/stages.jsonl"),
                   R"({"start": 1.0, "end": 2.0, "allocation": {}, "world": 1, "step_from": 0, "step_to": 3, )"
                   R"("total_steps": 3, "exit": "completed", "data": {"documents": 4, "kept": 3, "truncated": 1, )"
                   R"("dropped_overlong": 0, "dropped_untrainable": 1, "bad_lines_skipped": 1, "tools_ignored": 2, )"
                   R"("rows": 2, "trained_tokens": 18, "padding_fraction": 0.15625}})"
                   "\n");
  r = test::run_command(GTRAIN_BINARY + " status " + dir.file("run"));
  EXPECT_NE(r.output.find("  data       4 conversations: 3 kept (1 truncated), 0 dropped as overlong, 1 dropped as "
                          "untrainable, 1 bad line skipped, 2 with tools ignored; 2 rows, 18 trained tokens, 15.6% "
                          "padding\n"),
            std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace gtrain
