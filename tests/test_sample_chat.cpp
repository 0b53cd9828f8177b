// test_sample_chat.cpp: `gtrain sample --chat` on a Hugging Face llama whose weights make it a chain
// of bigrams: the prompt is what render_chat and encode give, the reply stops at the template's
// end-of-turn token and is printed alone, and bad flags are one line each.
#include <gtest/gtest.h>

#include <torch/torch.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "runtime/checkpoint/hf_checkpoint.h"
#include "runtime/core/text/chat_template.h"
#include "runtime/core/text/pipeline.h"
#include "tests/support/cli_util.h"
#include "tests/support/test_util.h"

namespace gtrain {
namespace {

constexpr int64_t kImStart = 256, kImEnd = 257, kEndOfText = 258;

// Qwen2.5's ChatML template (its default system turn shortened).
const char* kChatml =
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + "
    "'<|im_end|>\\n' }}{%- else %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + message.content + "
    "'<|im_end|>' + '\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- endif %}";

// Bytes as ids 0-255 and ChatML's special tokens; tokenizer_config.json with `chat_template`.
void write_tokenizer(const std::string& dir, const std::string& chat_template) {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[text::byte_char(static_cast<unsigned char>(b))] = b;
  nlohmann::json added = nlohmann::json::array();
  for (const auto& [id, s] : std::vector<std::pair<int64_t, std::string>>{
           {kImStart, "<|im_start|>"}, {kImEnd, "<|im_end|>"}, {kEndOfText, "<|endoftext|>"}}) {
    vocab[s] = id;
    added.push_back({{"id", id}, {"content", s}, {"special", true}});
  }
  std::filesystem::create_directories(dir);
  test::write_file(dir + "/tokenizer.json",
                   nlohmann::json{{"added_tokens", added},
                                  {"normalizer", nullptr},
                                  {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
                                  {"post_processor", nullptr},
                                  {"decoder", {{"type", "ByteLevel"}}},
                                  {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}}
                       .dump());
  nlohmann::json cfg = {{"eos_token", "<|endoftext|>"}};
  if (!chat_template.empty()) cfg["chat_template"] = chat_template;
  test::write_file(dir + "/tokenizer_config.json", cfg.dump());
}

// A one-block llama with zero attention and MLP weights: the logits at a position depend on its
// token alone. Token `from[k]` embeds as unit vector k and the head maps it to `to[k]`, so greedy
// decoding after "\n" writes "Hi", <|im_end|>, then "X" for ever.
void write_bigram_model(const std::string& dir) {
  ModelConfig m;
  m.name = "llama", m.n_layer = 1, m.n_head = 2, m.n_kv_head = 2, m.n_embd = 8, m.seq_len = 128, m.vocab = 260;
  m.intermediate_size = 8, m.tied_embeddings = false, m.eos_token_id = {kEndOfText};
  const std::vector<int64_t> from = {'\n', 'H', 'i', kImEnd, 'X'}, to = {'H', 'i', kImEnd, 'X', 'X'};
  std::map<std::string, torch::Tensor> p;
  for (const auto& n : hf_tensor_names(m)) {
    const bool norm = n.gtrain.size() >= 11 && n.gtrain.compare(n.gtrain.size() - 11, 11, "norm.weight") == 0;
    p[n.gtrain] = norm ? torch::ones(n.shape) : torch::zeros(n.shape);
  }
  for (size_t k = 0; k < from.size(); ++k) {
    p["embed_tokens.weight"][from[k]][k] = 1.0;
    p["lm_head.weight"][to[k]][k] = 4.0;
  }
  write_hf_checkpoint(dir, m, torch::kFloat32, int64_t{1} << 30, {},
                      [&](const std::string& name) { return p.at(name); });
  write_tokenizer(dir, kChatml);
}

std::vector<int64_t> ids_of(const std::vector<uint32_t>& ids) {
  return std::vector<int64_t>(ids.begin(), ids.end());
}

TEST(SampleChat, PromptIsTheTemplatesAndTheReplyStopsAtEndOfTurn) {
  test::TempDir dir;
  const std::string model = dir.file("model");
  write_bigram_model(model);
  auto sample = [&](const std::string& flags) {
    return test::run_command(GTRAIN_BINARY + " sample " + model + " --temperature 0 " + flags);
  };
  const text::Tokenizer tok = text::Tokenizer::load(model);
  const text::ChatTemplate chatml = text::chat_template_for(tok, "", "--chat-template");
  auto expected_prompt = [&](const std::vector<text::ChatMessage>& messages) {
    return ids_of(tok.encode(text::render_chat(chatml, messages, true).text, false));
  };

  const auto r = sample("--chat 'Hello?' --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto j = nlohmann::json::parse(r.output);
  const auto prompt = j.at("prompt").get<std::vector<int64_t>>();
  EXPECT_EQ(prompt, expected_prompt({{"user", "Hello?", ""}}));
  // The default system turn, the user's, then the assistant's header: "<|im_start|>system\n..."
  EXPECT_EQ(prompt.front(), kImStart);
  EXPECT_EQ(prompt.size(), 63u);  // 3 <|im_start|>, 2 <|im_end|> and 58 bytes
  EXPECT_EQ(j.at("tokens").get<std::vector<int64_t>>(), (std::vector<int64_t>{'H', 'i', kImEnd}));
  EXPECT_EQ(j.at("stopped"), "end_of_turn");
  EXPECT_EQ(j.at("text"), "Hi");
  EXPECT_EQ(j.at("template"), "chatml");
  // Without --json only the reply is printed.
  EXPECT_EQ(sample("--chat 'Hello?'").output, "Hi\n");
  // --system replaces the default system turn.
  const auto sys = sample("--chat 'Hello?' --system 'Be brief.' --json");
  ASSERT_EQ(sys.exit_code, 0) << sys.output;
  EXPECT_EQ(nlohmann::json::parse(sys.output).at("prompt").get<std::vector<int64_t>>(),
            expected_prompt({{"system", "Be brief.", ""}, {"user", "Hello?", ""}}));
  // The same model after "\n" without --chat: the end-of-turn token does not stop it.
  const auto free = sample("--prompt-ids 10 --tokens 5 --json");
  ASSERT_EQ(free.exit_code, 0) << free.output;
  const auto jf = nlohmann::json::parse(free.output);
  EXPECT_EQ(jf.at("tokens").get<std::vector<int64_t>>(), (std::vector<int64_t>{'H', 'i', kImEnd, 'X', 'X'}));
  EXPECT_EQ(jf.at("stopped"), "length");

  const std::string bare = dir.file("bare");
  write_tokenizer(bare, "");
  for (const auto& [flags, expect] : std::vector<std::pair<std::string, std::string>>{
           {"--chat q --prompt-text x", "or a question as --chat \"...\" (one of them)"},
           {"--prompt-text x --system s", "--system: only with --chat"},
           {"--prompt-ids 1 --chat-template chatml", "--chat-template: only with --chat"},
           {"--chat q --chat-template jinja", "--chat-template = \"jinja\": expected \"llama3\", \"chatml\""},
           {"--chat q --tokenizer " + bare,
            bare + "/tokenizer_config.json has no chat_template; name one with --chat-template"},
           {"--chat q --tokens 100", "exceed the model's context, model.seq_len = 128"}}) {
    const auto bad = sample(flags);
    EXPECT_EQ(bad.exit_code, 2) << flags << "\n" << bad.output;
    EXPECT_NE(bad.output.find(expect), std::string::npos) << flags << "\n" << bad.output;
    EXPECT_EQ(test::lines(bad.output).size(), 1u) << bad.output;
  }
  // --chat-template names the template for a tokenizer without one.
  const auto named = sample("--chat 'Hello?' --tokenizer " + bare + " --chat-template chatml --json");
  ASSERT_EQ(named.exit_code, 0) << named.output;
  EXPECT_EQ(nlohmann::json::parse(named.output).at("stopped"), "end_of_turn");
}

}  // namespace
}  // namespace gtrain
