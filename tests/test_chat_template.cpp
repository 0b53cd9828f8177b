// test_chat_template.cpp: the native chat templates' text and masks where transformers is not the
// judge (the plain template, recognition, errors); tests/python/chat_template_check.py compares
// the others with apply_chat_template on the genuine tokenizers.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "runtime/core/errors.h"
#include "runtime/core/text/chat_template.h"
#include "runtime/core/text/pipeline.h"
#include "tests/support/test_util.h"

namespace gtrain::text {
namespace {

// Bytes as ids (0-255) and an end-of-text token 256, with tokenizer_config.json's template.
Tokenizer byte_tokenizer(test::TempDir& dir, const std::string& chat_template) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(static_cast<unsigned char>(b))] = b;
  vocab["<|end|>"] = 256;
  test::write_file(dir.file("tokenizer.json"),
                   nlohmann::json{{"added_tokens", {{{"id", 256}, {"content", "<|end|>"}, {"special", true}}}},
                                  {"normalizer", nullptr},
                                  {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
                                  {"post_processor", nullptr},
                                  {"decoder", {{"type", "ByteLevel"}}},
                                  {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}}
                       .dump());
  nlohmann::json cfg = {{"eos_token", "<|end|>"}};
  if (!chat_template.empty()) cfg["chat_template"] = chat_template;
  test::write_file(dir.file("tokenizer_config.json"), cfg.dump());
  return Tokenizer::load(dir.path());
}

TEST(ChatTemplate, PlainConcatenatesWithEosAndMasksTheAnswers) {
  test::TempDir dir;
  const Tokenizer tok = byte_tokenizer(dir, "");
  const ChatTemplate t = chat_template_for(tok, "plain", "data.chat_template");
  const std::vector<ChatMessage> chat = {
      {"user", "hi", ""}, {"assistant", "yo", ""}, {"user", "q", ""}, {"assistant", "a", ""}};
  EXPECT_EQ(render_chat(t, chat).text, "hi<|end|>yo<|end|>q<|end|>a<|end|>");
  const EncodedChat all = encode_chat(tok, t, chat, TrainOn::all);
  const EncodedChat answers = encode_chat(tok, t, chat, TrainOn::assistant);
  const EncodedChat last = encode_chat(tok, t, chat, TrainOn::last_assistant);
  const std::vector<uint32_t> ids = {'h', 'i', 256, 'y', 'o', 256, 'q', 256, 'a', 256};
  EXPECT_EQ(answers.ids, ids);
  EXPECT_EQ(all.train, std::vector<uint8_t>(ids.size(), 1));
  EXPECT_EQ(answers.train, (std::vector<uint8_t>{0, 0, 0, 1, 1, 1, 0, 0, 1, 1}));  // the EOS after an answer too
  EXPECT_EQ(last.train, (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 0, 0, 1, 1}));
}

TEST(ChatTemplate, RecognisedByContentOrNamedByTheKey) {
  const std::string qwen25 =
      "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + "
      "'<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou are Qwen.<|im_end|>\\n' }}{%- endif %}";
  const auto chatml = recognize_chat_template(qwen25, "", "<|endoftext|>");
  ASSERT_TRUE(chatml.has_value());
  EXPECT_EQ(chatml->family, ChatFamily::chatml);
  EXPECT_EQ(chatml->default_system, "You are Qwen.");
  EXPECT_EQ(render_chat(*chatml, {{"user", "hi", ""}}, true).text,
            "<|im_start|>system\nYou are Qwen.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_FALSE(recognize_chat_template("{{ messages }}", "", "").has_value());
  test::TempDir dir;
  const Tokenizer unknown = byte_tokenizer(dir, "{% for m in messages %}{{ m.content }}{% endfor %}");
  try {
    chat_template_for(unknown, "", "data.chat_template");
    ADD_FAILURE() << "an unrecognised template was taken";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("its chat_template is none gtrain writes; set data.chat_template"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(chat_template_for(unknown, "jinja", "data.chat_template"), ConfigError);
  const ChatTemplate plain = chat_template_for(unknown, "plain", "data.chat_template");
  EXPECT_THROW(render_chat(plain, {{"tool", "x", ""}}), ConfigError);  // a role no template writes
}

// gtrain sample --chat stops at the template's end-of-turn token and shows the reply without
// Qwen3's empty think block (a think block with reasoning in it stays).
TEST(ChatTemplate, EndOfTurnAndReplyText) {
  ChatTemplate t;
  t.eos = "<|end|>";
  t.family = ChatFamily::llama3;
  EXPECT_EQ(chat_end_of_turn(t), "<|eot_id|>");
  t.family = ChatFamily::chatml;
  EXPECT_EQ(chat_end_of_turn(t), "<|im_end|>");
  t.family = ChatFamily::qwen3;
  EXPECT_EQ(chat_end_of_turn(t), "<|im_end|>");
  t.family = ChatFamily::plain;
  EXPECT_EQ(chat_end_of_turn(t), "<|end|>");
  EXPECT_EQ(strip_empty_think("<think>\n\n</think>\n\nParis."), "Paris.");
  EXPECT_EQ(strip_empty_think("<think></think>Paris."), "Paris.");
  EXPECT_EQ(strip_empty_think("<think>\nhm\n</think>\n\nParis."), "<think>\nhm\n</think>\n\nParis.");
  EXPECT_EQ(strip_empty_think("Paris. <think>\n\n</think>"), "Paris. <think>\n\n</think>");
  EXPECT_EQ(strip_empty_think(""), "");
}

}  // namespace
}  // namespace gtrain::text
