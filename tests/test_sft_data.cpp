// test_sft_data.cpp: conversations prepared (data.format = "chat" / "prompt_completion") with a
// byte-level tokenizer whose special tokens are single ids, so every id and mask is checked by
// hand: the masks of each train_on, prompt/completion as TRL writes it, the document index, bad
// lines named by file and line (or skipped and counted), and the rows open_sft_data packs.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "runtime/core/config/job_config.h"
#include "runtime/core/errors.h"
#include "runtime/core/run_dir/stage_records.h"
#include "runtime/core/text/encoder.h"
#include "runtime/core/text/pipeline.h"
#include "runtime/core/text/prepare.h"
#include "runtime/core/text/sft_data.h"
#include "runtime/core/text/text_data.h"
#include "tests/support/test_util.h"

namespace gtrain::text {
namespace {

constexpr uint32_t kEnd = 256, kImStart = 257, kImEnd = 258;

// Bytes as ids 0-255, and <|end|> (EOS) 256, <|im_start|> 257, <|im_end|> 258 as special tokens.
std::string byte_tokenizer(const test::TempDir& dir) {
  nlohmann::json vocab = nlohmann::json::object(), added = nlohmann::json::array();
  for (int b = 0; b < 256; ++b) vocab[byte_char(static_cast<unsigned char>(b))] = b;
  const std::vector<std::string> specials = {"<|end|>", "<|im_start|>", "<|im_end|>"};
  for (size_t i = 0; i < specials.size(); ++i) {
    vocab[specials[i]] = 256 + i;
    added.push_back({{"id", 256 + i}, {"content", specials[i]}, {"special", true}});
  }
  const std::string tok = dir.file("tok");
  std::filesystem::create_directories(tok);
  test::write_file(tok + "/tokenizer.json",
                   nlohmann::json{{"added_tokens", added},
                                  {"normalizer", nullptr},
                                  {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
                                  {"post_processor", nullptr},
                                  {"decoder", {{"type", "ByteLevel"}}},
                                  {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}}
                       .dump());
  test::write_file(tok + "/tokenizer_config.json", nlohmann::json{{"eos_token", "<|end|>"}}.dump());
  return tok;
}

std::vector<uint32_t> bytes(const std::string& s) {
  return std::vector<uint32_t>(s.begin(), s.end());
}

// A document's ids and mask, built piece by piece: text (bytes) or a special id, trained or not.
struct Doc {
  std::vector<uint32_t> ids;
  std::vector<uint8_t> train;
  Doc& add(const std::string& s, bool t = false) { return add(bytes(s), t); }
  Doc& add(uint32_t special, bool t = false) { return add(std::vector<uint32_t>{special}, t); }
  Doc& add(std::vector<uint32_t> v, bool t = false) {
    ids.insert(ids.end(), v.begin(), v.end());
    train.insert(train.end(), v.size(), t ? 1 : 0);
    return *this;
  }
};

// A prepared folder read back: each document's ids and mask.
std::vector<Doc> read_back(const std::string& out, const std::string& split = "train") {
  const PrepareManifest m = read_prepare_manifest(out);
  verify_shards(out, m);
  std::vector<uint32_t> ids;
  std::vector<uint8_t> mask;
  for (const auto& f : m.shard_files(split)) {
    const std::string b = test::read_file(out + "/" + f), mb = test::read_file(out + "/" + mask_file(f));
    const int width = m.dtype == "uint32" ? 4 : 2;
    for (size_t i = 1024; i < b.size(); i += width) {
      uint32_t v = 0;
      std::memcpy(&v, b.data() + i, width);
      ids.push_back(v);
    }
    mask.insert(mask.end(), mb.begin(), mb.end());
  }
  EXPECT_EQ(ids.size(), mask.size());
  const auto index = std::find_if(m.doc_indexes.begin(), m.doc_indexes.end(),
                                  [&](const PreparedDocIndex& d) { return d.split == split; });
  EXPECT_NE(index, m.doc_indexes.end());
  const std::string raw = test::read_file(out + "/" + index->file);
  std::vector<uint64_t> off(raw.size() / 8);
  std::memcpy(off.data(), raw.data(), raw.size());
  EXPECT_EQ(static_cast<int64_t>(off.size()), index->documents + 1);
  std::vector<Doc> docs;
  for (size_t d = 0; d + 1 < off.size(); ++d) {
    Doc x;
    x.ids.assign(ids.begin() + off[d], ids.begin() + off[d + 1]);
    x.train.assign(mask.begin() + off[d], mask.begin() + off[d + 1]);
    docs.push_back(x);
  }
  return docs;
}

struct Fixture {
  test::TempDir dir;
  std::string tok = byte_tokenizer(dir);
  PrepareResult prepare_lines(const std::vector<std::string>& lines, const std::function<void(PrepareRecipe&)>& tweak,
                              const std::string& out = "out", const std::string& name = "c.jsonl") {
    std::string text;
    for (const auto& l : lines) text += l + "\n";
    test::write_file(dir.file(name), text);
    PrepareOptions o;
    o.inputs = {dir.file(name)};
    o.out = dir.file(out);
    o.jobs = 2;
    o.progress = false;
    o.warn = false;
    o.recipe.data_format = "chat";
    o.recipe.chat_template = "chatml";
    tweak(o.recipe);
    return prepare(o, load_encoder(tok));
  }
};

const std::string kTwoTurns =
    R"({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"},)"
    R"( {"role": "assistant", "content": "yo"}, {"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]})";

// ChatML turns: <|im_start|>ROLE\nCONTENT<|im_end|>\n, the assistant's content and <|im_end|> trained.
Doc chatml_two_turns(bool first, bool second, bool all = false) {
  Doc d;
  d.add(kImStart, all).add("system\nS", all).add(kImEnd, all).add("\n", all);
  d.add(kImStart, all).add("user\nhi", all).add(kImEnd, all).add("\n", all);
  d.add(kImStart, all).add("assistant\n", all).add("yo", first || all).add(kImEnd, first || all).add("\n", all);
  d.add(kImStart, all).add("user\nq", all).add(kImEnd, all).add("\n", all);
  d.add(kImStart, all).add("assistant\n", all).add("a", second || all).add(kImEnd, second || all).add("\n", all);
  return d;
}

TEST(SftPrepare, ChatMasksForEachTrainOn) {
  Fixture f;
  const std::map<std::string, Doc> want = {{"assistant", chatml_two_turns(true, true)},
                                           {"last_assistant", chatml_two_turns(false, true)},
                                           {"all", chatml_two_turns(true, true, true)}};
  for (const auto& [on, doc] : want) {
    const auto r = f.prepare_lines(
        {kTwoTurns, kTwoTurns}, [&](PrepareRecipe& p) { p.train_on = on; }, "out-" + on);
    const auto docs = read_back(f.dir.file("out-" + on));
    ASSERT_EQ(docs.size(), 2u) << on;
    EXPECT_EQ(docs[1].ids, doc.ids) << on;
    EXPECT_EQ(docs[1].train, doc.train) << on;
    int64_t trained = 0;
    for (uint8_t t : doc.train) trained += t;
    EXPECT_EQ(r.manifest.trained_tokens, 2 * trained) << on;
    EXPECT_EQ(r.manifest.recipe.chat_template, "chatml");
  }
}

TEST(SftPrepare, PlainTemplateAndTheTokenizersOwn) {
  Fixture f;
  const std::string line =
      R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})";
  f.prepare_lines({line}, [](PrepareRecipe& p) { p.chat_template = "plain"; });
  const auto docs = read_back(f.dir.file("out"));
  ASSERT_EQ(docs.size(), 1u);
  EXPECT_EQ(docs[0].ids, (std::vector<uint32_t>{'h', 'i', kEnd, 'y', 'o', kEnd}));
  EXPECT_EQ(docs[0].train, (std::vector<uint8_t>{0, 0, 0, 1, 1, 1}));
  // No template named and none in tokenizer_config.json: one line naming the key to set.
  EXPECT_EQ(test::error_of<ConfigError>([&] {
              f.prepare_lines(
                  {line}, [](PrepareRecipe& p) { p.chat_template = ""; }, "o2");
            }),
            f.tok +
                "/tokenizer.json: its tokenizer_config.json has no chat_template; set --chat-template = \"llama3\", "
                "\"chatml\", \"qwen3\" or \"plain\"");
}

TEST(SftPrepare, PromptCompletionAsTrlWritesIt) {
  Fixture f;
  const std::string strings = R"({"prompt": "2+2=", "completion": "4"})";
  const std::string lists =
      R"({"prompt": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}, {"role": "user", "content": "q"}],)"
      R"( "completion": [{"role": "assistant", "content": "a"}]})";
  f.prepare_lines({strings, lists}, [](PrepareRecipe& p) { p.data_format = "prompt_completion"; });
  const auto docs = read_back(f.dir.file("out"));
  ASSERT_EQ(docs.size(), 2u);
  Doc s;
  s.add("2+2=").add("4", true).add(kEnd, true);  // the completion and the EOS after it
  EXPECT_EQ(docs[0].ids, s.ids);
  EXPECT_EQ(docs[0].train, s.train);
  Doc c;  // the prompt's assistant turn is not trained on, the completion's is
  c.add(kImStart).add("user\nhi").add(kImEnd).add("\n");
  c.add(kImStart).add("assistant\nyo").add(kImEnd).add("\n");
  c.add(kImStart).add("user\nq").add(kImEnd).add("\n");
  c.add(kImStart).add("assistant\n").add("a", true).add(kImEnd, true).add("\n");
  EXPECT_EQ(docs[1].ids, c.ids);
  EXPECT_EQ(docs[1].train, c.train);
}

TEST(SftPrepare, BadLinesNamedByFileAndLine) {
  Fixture f;
  const std::string path = f.dir.file("c.jsonl");
  const auto bad = [&](const std::string& line, const std::string& format = "chat") {
    return test::error_of<DataError>([&] {
      const std::string good = format == "chat" ? kTwoTurns : R"({"prompt": "p", "completion": "c"})";
      f.prepare_lines({good, line}, [&](PrepareRecipe& p) { p.data_format = format; });
    });
  };
  EXPECT_EQ(bad("{nope"), path +
                              ":2: not a JSON line (parse error at line 1, column 3: syntax error while parsing "
                              "object key - invalid literal; last read: '{no'; expected string literal), expected a "
                              "JSON object");
  EXPECT_EQ(bad("[1]"), path + ":2: an array, expected a JSON object");
  EXPECT_EQ(bad(R"({"text": "x"})"), path + ":2: no key \"messages\", expected a list of messages");
  EXPECT_EQ(bad(R"({"messages": "x"})"), path + ":2: \"messages\" is a string, expected a list of messages");
  EXPECT_EQ(bad(R"({"messages": [{"role": "tool", "content": "x"}]})"),
            path + ":2: messages[0] has role \"tool\", expected system, user or assistant");
  EXPECT_EQ(bad(R"({"messages": [{"content": "x"}]})"),
            path + ":2: messages[0] has no \"role\", expected system, user or assistant");
  EXPECT_EQ(bad(R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": [1]}]})"),
            path + ":2: messages[1]'s content is an array, expected a string");
  EXPECT_EQ(bad(R"({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": " "}]})"),
            path + ":2: no assistant turn with text, expected an answer to train on");
  EXPECT_EQ(bad(R"({"prompt": "x"})", "prompt_completion"),
            path + ":2: no key \"completion\", expected a string or a list of messages");
  EXPECT_EQ(
      bad(R"({"prompt": "x", "completion": [{"role": "assistant", "content": "y"}]})", "prompt_completion"),
      path + ":2: \"prompt\" is a string and \"completion\" an array, expected two strings or two lists of messages");
  EXPECT_FALSE(std::filesystem::exists(f.dir.file("out")));  // nothing left behind

  // Skipped and counted with on_bad_line = "skip"; "tools" ignored and counted.
  const std::string tools =
      R"({"tools": [{"name": "f"}], "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}]})";
  const auto r = f.prepare_lines({"{nope", kTwoTurns, R"({"messages": []})", tools, "[2]", kTwoTurns},
                                 [](PrepareRecipe& p) { p.on_bad_line = "skip"; });
  EXPECT_EQ(r.manifest.documents, 3);
  EXPECT_EQ(r.manifest.bad_lines, 3);
  EXPECT_EQ(r.manifest.tools_ignored, 1);
  EXPECT_EQ(read_prepare_manifest(f.dir.file("out")).bad_lines, 3);
  EXPECT_EQ(read_back(f.dir.file("out")).size(), 3u);
}

TEST(SftPrepare, ARecipeChangePreparesAgain) {
  Fixture f;
  EXPECT_FALSE(f.prepare_lines({kTwoTurns}, [](PrepareRecipe&) {}).up_to_date);
  EXPECT_TRUE(f.prepare_lines({kTwoTurns}, [](PrepareRecipe&) {}).up_to_date);
  const auto r = f.prepare_lines({kTwoTurns}, [](PrepareRecipe& p) { p.train_on = "last_assistant"; });
  EXPECT_FALSE(r.up_to_date);
  EXPECT_EQ(read_back(f.dir.file("out"))[0].train, chatml_two_turns(false, true).train);
  EXPECT_FALSE(f.prepare_lines({kTwoTurns}, [](PrepareRecipe& p) {
                  p.train_on = "last_assistant";
                  p.chat_template = "plain";
                }).up_to_date);
}

// Conversations of the plain template with an answer of `a` bytes after a question of `q`: a
// document of q + a + 2 ids (each turn and its EOS), its targets from the answer on trained.
std::string plain_line(int q, int a) {
  return nlohmann::json{{"messages",
                         {{{"role", "user"}, {"content", std::string(q, 'q')}},
                          {{"role", "assistant"}, {"content", std::string(a, 'a')}}}}}
      .dump();
}

struct Packed {
  std::vector<std::vector<int32_t>> ids, targets, positions;
};

Packed fill_all(const SftData& s, int64_t width) {
  Packed p;
  for (int64_t r = 0; r < s.size(); ++r) {
    const int64_t w = width > 0 ? width : s.length(r);
    std::vector<int32_t> i(w), t(w), pos(w);
    s.fill(r, w, i.data(), t.data(), pos.data());
    p.ids.push_back(i), p.targets.push_back(t), p.positions.push_back(pos);
  }
  return p;
}

TEST(SftData, PackingPlacesEveryDocumentOnceByBestFit) {
  Fixture f;
  // Slots (ids - 1) of each: q + a + 1.
  const std::vector<std::pair<int, int>> qa = {{3, 4}, {1, 2}, {5, 9}, {2, 2}, {0, 5}, {7, 7}, {1, 1}, {4, 3}};
  std::vector<std::string> lines;
  for (auto [q, a] : qa) lines.push_back(plain_line(q, a));
  f.prepare_lines(lines, [](PrepareRecipe& p) { p.chat_template = "plain"; });
  SftOptions o;
  o.seq_len = 16;
  const auto s = open_sft_data(f.dir.file("out"), "train", o);
  // Slots 8, 4, 15, 5, 6, 15, 3, 8 -> best fit decreasing: [15], [15], [8 8], [6 5 4], [3].
  ASSERT_EQ(s->size(), 5);
  const SftCounts& c = s->counts();
  EXPECT_EQ(c.documents, 8);
  EXPECT_EQ(c.kept, 8);
  EXPECT_EQ(c.rows, 5);
  EXPECT_EQ(c.slots, 80);
  EXPECT_EQ(c.padding, 80 - 64);
  EXPECT_EQ(s->pad_id(), static_cast<int32_t>(kEnd));
  const Packed p = fill_all(*s, 0);
  const std::vector<std::vector<int32_t>> row_docs = {{15}, {15}, {8, 8}, {6, 5, 4}, {3}};
  std::map<std::string, int> seen;  // each document's ids, as its slots show them
  int64_t trained = 0;
  for (int64_t r = 0; r < s->size(); ++r) {
    EXPECT_EQ(s->length(r), 16);
    int64_t row_trained = 0, at = 0;
    for (int32_t slots : row_docs[r]) {
      std::string doc;
      for (int32_t t = 0; t < slots; ++t, ++at) {
        EXPECT_EQ(p.positions[r][at], t);
        doc += static_cast<char>(p.ids[r][at] == static_cast<int32_t>(kEnd) ? '|' : p.ids[r][at]);
        // The target is the next id when it is an answer's (or its EOS), else ignored.
        const bool answer = doc.find('|') != std::string::npos;
        const int32_t next = t + 1 < slots ? p.ids[r][at + 1] : static_cast<int32_t>(kEnd);
        EXPECT_EQ(p.targets[r][at], answer ? next : kIgnoreTarget) << "row " << r << " slot " << at;
        row_trained += p.targets[r][at] != kIgnoreTarget;
      }
      ++seen[doc];
    }
    for (; at < 16; ++at) {  // padding
      EXPECT_EQ(p.ids[r][at], static_cast<int32_t>(kEnd));
      EXPECT_EQ(p.targets[r][at], kIgnoreTarget);
    }
    EXPECT_EQ(s->trained(r), row_trained);
    trained += row_trained;
  }
  EXPECT_EQ(c.trained, trained);
  EXPECT_EQ(trained, 4 + 2 + 9 + 2 + 5 + 7 + 1 + 3 + 8);  // each answer and its EOS
  for (auto [q, a] : qa) EXPECT_EQ(seen[std::string(q, 'q') + "|" + std::string(a, 'a')], 1) << q << " " << a;
  // The same rows on a second opening, and a padded fill past the row.
  const auto again = open_sft_data(f.dir.file("out"), "train", o);
  EXPECT_EQ(fill_all(*again, 0).ids, p.ids);
  const Packed wide = fill_all(*s, 20);
  EXPECT_EQ(std::vector<int32_t>(wide.positions[4].begin() + 3, wide.positions[4].end()),
            (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}));
}

TEST(SftData, OneDocumentARowTruncateDropAndUntrainable) {
  Fixture f;
  // Slots 8, 20 (overlong at 16), 3, and one whose answer starts past slot 16.
  f.prepare_lines({plain_line(3, 4), plain_line(5, 14), plain_line(1, 1), plain_line(18, 2)},
                  [](PrepareRecipe& p) { p.chat_template = "plain"; });
  SftOptions o;
  o.seq_len = 16;
  o.packing = false;
  const auto t = open_sft_data(f.dir.file("out"), "train", o);
  EXPECT_EQ(t->counts().documents, 4);
  EXPECT_EQ(t->counts().kept, 3);
  EXPECT_EQ(t->counts().truncated, 1);
  EXPECT_EQ(t->counts().untrainable, 1);  // its answer is cut off
  EXPECT_EQ(t->counts().overlong, 0);
  ASSERT_EQ(t->size(), 3);
  EXPECT_EQ(t->length(0), 8);
  EXPECT_EQ(t->length(1), 16);  // cut to 17 ids
  EXPECT_EQ(t->length(2), 3);
  EXPECT_EQ(t->counts().slots, 27);
  EXPECT_EQ(t->counts().padding, 0);
  EXPECT_EQ(t->trained(1), 11);  // ids 6 .. 16 ('a' x 11 of the 14) as targets
  o.overlong = Overlong::drop;
  const auto d = open_sft_data(f.dir.file("out"), "train", o);
  EXPECT_EQ(d->counts().kept, 2);
  EXPECT_EQ(d->counts().overlong, 2);
  EXPECT_EQ(d->counts().truncated, 0);
  EXPECT_EQ(d->counts().untrainable, 0);
  EXPECT_EQ(test::error_of<DataError>([&] { open_sft_data(f.dir.file("missing"), "train", o); }),
            f.dir.file("missing") + "/prepare_manifest.json: missing (not a folder gtrain prepare finished)");
}

TEST(SftData, GtrainRunPreparesConversationsAndCountsThem) {
  Fixture f;
  test::write_file(f.dir.file("c.jsonl"), plain_line(3, 4) + "\n" + plain_line(5, 14) + "\n{bad\n" + plain_line(1, 1) +
                                              "\n" + plain_line(18, 2) + "\n");
  JobConfig cfg = parse_job_config(
      "[train]\nsteps = 1\n[model]\nseq_len = 16\n[data]\nkind = \"jsonl\"\nformat = \"chat\"\nchat_template = "
      "\"plain\"\n"
      "on_bad_line = \"skip\"\neval_fraction = 0.0\n",
      "test.toml", {}, {});
  cfg.data.path = f.dir.file("c.jsonl");
  cfg.data.tokenizer = f.tok;
  std::ostringstream log;
  const TextData td = ensure_text_data(cfg, f.dir.file("run"), &log);
  EXPECT_EQ(td.counts["documents"], 4);
  EXPECT_EQ(td.counts["kept"], 3);
  EXPECT_EQ(td.counts["truncated"], 1);
  EXPECT_EQ(td.counts["dropped_untrainable"], 1);
  EXPECT_EQ(td.counts["bad_lines_skipped"], 1);
  EXPECT_EQ(td.counts["rows"], 2);  // slots 16, 8 + 3
  EXPECT_NE(log.str().find("gtrain: data: 4 conversations: 3 kept (1 truncated), 0 dropped as overlong, 1 dropped "
                           "as untrainable, 1 bad line skipped, 0 with tools ignored; 2 rows, 18 trained tokens, "
                           "15.6% padding"),
            std::string::npos)
      << log.str();
  // Found prepared on the next start, with the same counts.
  const TextData again = ensure_text_data(cfg, f.dir.file("run"), nullptr);
  EXPECT_FALSE(again.prepared);
  EXPECT_EQ(again.dir, td.dir);
  EXPECT_EQ(again.counts, td.counts);
  // The ledger record carries them.
  StageRecord rec;
  rec.allocation = nlohmann::json::object();
  rec.data = td.counts;
  const auto [why, back] = StageRecord::from_json(rec.to_json());
  EXPECT_EQ(why, "");
  EXPECT_EQ(back.data, td.counts);
  // Another train_on is another preparation; a text kind or the byte tokenizer is refused.
  cfg.data.train_on = DataTrainOn::all;
  EXPECT_NE(ensure_text_data(cfg, f.dir.file("run"), nullptr).dir, td.dir);
  cfg.data.kind = DataKind::text;
  EXPECT_EQ(test::error_of<ConfigError>([&] { ensure_text_data(cfg, f.dir.file("run"), nullptr); }),
            "data.format = \"chat\" reads JSONL: data.kind is \"text\"");
  EXPECT_NE(test::error_of<ConfigError>([&] { validate_job_config(cfg); })
                .find("data.format = \"chat\" reads JSONL conversations, but data.kind = \"text\"; set data.kind = "
                      "\"jsonl\""),
            std::string::npos);
  cfg.data.kind = DataKind::jsonl;
  cfg.data.tokenizer = "bytes";
  EXPECT_EQ(test::error_of<ConfigError>([&] { ensure_text_data(cfg, f.dir.file("run"), nullptr); }),
            "data.tokenizer = \"bytes\": data.format = \"chat\" needs a Hugging Face tokenizer (its chat template "
            "and special tokens)");
}

}  // namespace
}  // namespace gtrain::text
