// chat_template.h: conversations rendered as the chat templates of the families gtrain trains,
// written natively (no Jinja engine): Llama 3.1 / 3.2, ChatML as Qwen2 and Qwen2.5 write it, Qwen3
// (with its think blocks), and plain concatenation with EOS; and their token ids with the mask of
// the tokens a fine-tune trains on.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "runtime/core/text/tokenizer.h"

namespace gtrain::text {

enum class ChatFamily { llama3, chatml, qwen3, plain };

struct ChatTemplate {
  ChatFamily family = ChatFamily::plain;
  std::string default_system;  // chatml: the system turn a template writes when there is none ("" = none)
  std::string bos, eos;        // the template's bos_token / eos_token text (llama3: BOS; plain: EOS)
};

struct ChatMessage {
  std::string role;  // system | user | assistant
  std::string content;
  std::string reasoning;  // qwen3: reasoning_content ("" = none)
};

enum class TrainOn { assistant, all, last_assistant };

// The family of a tokenizer_config.json's chat_template, recognised by what it writes; nullopt
// when it is none of them. `bos` / `eos`: that config's tokens.
std::optional<ChatTemplate> recognize_chat_template(const std::string& jinja, const std::string& bos,
                                                    const std::string& eos);
// "llama3" | "chatml" | "qwen3" | "plain" (data.chat_template) -> the family; nullopt otherwise.
std::optional<ChatFamily> chat_family(const std::string& name);
const char* chat_family_name(ChatFamily f);

// The template to write `tok`'s conversations with: `name` ("llama3", ...; `key` names where it was
// set), or "" for the one its tokenizer_config.json carries. ConfigError naming `key` for an unknown
// name, or for a tokenizer whose template is none of these.
ChatTemplate chat_template_for(const Tokenizer& tok, const std::string& name, const std::string& key);

// A rendered conversation: the text, and the byte spans [begin, end) of the turns trained on
// (an assistant turn's content and its end-of-turn token).
struct RenderedChat {
  std::string text;
  std::vector<std::pair<size_t, size_t>> assistant_spans;
};

// The text of `messages` as transformers' apply_chat_template(tokenize=False) writes it with that
// template (Llama 3's date line is the template's own "26 Jul 2024": a run does not depend on the
// day it starts). ConfigError for a role the template does not know.
RenderedChat render_chat(const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                         bool add_generation_prompt = false);

struct EncodedChat {
  std::vector<uint32_t> ids;
  std::vector<uint8_t> train;  // 1: the loss counts this position's token
};

// The ids of the rendered text (apply_chat_template(tokenize=True): no post-processor tokens) and
// which of them are trained on: for each assistant span, the ids between the tokenizations of the
// text up to its start and up to its end (the way TRL masks a conversation). With TrainOn::assistant
// the first `untrained_turns` assistant turns are not (a prompt's, before its completion's).
EncodedChat encode_chat(const Tokenizer& tok, const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                        TrainOn on, size_t untrained_turns = 0);

// The token text a template ends an assistant turn with: llama3 "<|eot_id|>", chatml and qwen3
// "<|im_end|>", plain its EOS ("" when the tokenizer has none). Generation stops there.
std::string chat_end_of_turn(const ChatTemplate& t);

// A generated reply as a chat front end shows it: without the empty think block
// ("<think>\n\n</think>\n\n") Qwen3 writes before a reply it did not reason about.
std::string strip_empty_think(const std::string& reply);

}  // namespace gtrain::text
