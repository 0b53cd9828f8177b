// sft_documents.cpp: conversation lines parsed and checked, and their ids and masks.
#include "runtime/core/text/sft_documents.h"

#include <nlohmann/json.hpp>

#include "runtime/core/format.h"

namespace gtrain::text {

namespace {

// "an array", "a string", ...: a JSON value's type with its article.
std::string a_type(const nlohmann::json& j) {
  const std::string t = j.type_name();
  return (t == "array" || t == "object" ? "an " : "a ") + t;
}

bool blank(const std::string& s) {
  return s.find_first_not_of(" \t\r\n") == std::string::npos;
}

// The messages of a JSON array; `name` names it in errors ("messages", "prompt").
std::vector<ChatMessage> parse_messages(const nlohmann::json& list, const std::string& where, const std::string& name) {
  if (!list.is_array())
    throw BadLineError(str(where, "\"", name, "\" is ", a_type(list), ", expected a list of messages"));
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const nlohmann::json& m = list[i];
    const std::string at = str(where, name, "[", i, "]");
    if (!m.is_object())
      throw BadLineError(str(at, " is ", a_type(m), ", expected an object with \"role\" and \"content\""));
    const auto role = m.find("role");
    if (role == m.end()) throw BadLineError(at + " has no \"role\", expected system, user or assistant");
    if (!role->is_string() || (*role != "system" && *role != "user" && *role != "assistant"))
      throw BadLineError(str(at, " has role ", role->dump(), ", expected system, user or assistant"));
    const auto content = m.find("content");
    if (content == m.end()) throw BadLineError(at + " has no \"content\", expected a string");
    if (!content->is_string()) throw BadLineError(str(at, "'s content is ", a_type(*content), ", expected a string"));
    ChatMessage msg{role->get<std::string>(), content->get<std::string>(), ""};
    const auto reasoning = m.find("reasoning_content");
    if (reasoning != m.end() && reasoning->is_string()) msg.reasoning = reasoning->get<std::string>();
    out.push_back(std::move(msg));
  }
  return out;
}

// Whether some assistant turn from `from` on has text to train on.
bool has_answer(const std::vector<ChatMessage>& messages, size_t from = 0) {
  for (size_t i = from; i < messages.size(); ++i)
    if (messages[i].role == "assistant" && (!blank(messages[i].content) || !blank(messages[i].reasoning))) return true;
  return false;
}

const nlohmann::json& key_of(const nlohmann::json& j, const std::string& key, const std::string& where,
                             const char* expected) {
  const auto it = j.find(key);
  if (it == j.end()) throw BadLineError(str(where, "no key \"", key, "\", expected ", expected));
  return *it;
}

}  // namespace

void resolve_chat_recipe(PrepareRecipe& recipe, const Tokenizer& tok, const std::string& key) {
  const ChatTemplate t = chat_template_for(tok, recipe.chat_template, key);
  recipe.chat_template = chat_family_name(t.family);
  recipe.chat_system = t.default_system;
}

ConversationEncoder::ConversationEncoder(std::shared_ptr<const Tokenizer> tok, const PrepareRecipe& recipe)
    : tok_(std::move(tok)), recipe_(recipe) {
  template_.family = chat_family(recipe.chat_template).value_or(ChatFamily::plain);
  template_.default_system = recipe.chat_system;
  template_.bos = tok_->bos_id() ? tok_->token(*tok_->bos_id()) : std::string();
  template_.eos = tok_->eos_id() ? tok_->token(*tok_->eos_id()) : std::string();
  on_ = recipe.train_on == "all"              ? TrainOn::all
        : recipe.train_on == "last_assistant" ? TrainOn::last_assistant
                                              : TrainOn::assistant;
}

EncodedChat ConversationEncoder::encode(const RawDocument& doc, const std::string& path, bool* tools) const {
  const std::string where = str(path, ":", doc.line, ": ");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(doc.bytes);
  } catch (const nlohmann::json::parse_error& e) {
    throw BadLineError(where + "not a JSON line (" + json_parse_reason(e) + "), expected a JSON object");
  }
  if (!j.is_object()) throw BadLineError(where + a_type(j) + ", expected a JSON object");
  *tools = j.contains("tools");
  if (recipe_.data_format == "chat") {
    const auto messages =
        parse_messages(key_of(j, recipe_.messages_key, where, "a list of messages"), where, recipe_.messages_key);
    if (!has_answer(messages))
      throw BadLineError(where + "no assistant turn with text, expected an answer to train on");
    return encode_chat(*tok_, template_, messages, on_);
  }
  const nlohmann::json& prompt = key_of(j, recipe_.prompt_key, where, "a string or a list of messages");
  const nlohmann::json& completion = key_of(j, recipe_.completion_key, where, "a string or a list of messages");
  if (prompt.is_string() && completion.is_string()) {
    // TRL: the completion with the EOS after it; the ids of the prompt, then of prompt + completion.
    const std::string c = completion.get<std::string>();
    if (c.empty())
      throw BadLineError(str(where, "\"", recipe_.completion_key, "\" is empty, expected the text to train on"));
    const std::string p = prompt.get<std::string>();
    EncodedChat e;
    e.ids = tok_->encode(p + c + template_.eos, true);
    const size_t n_prompt = std::min(e.ids.size(), tok_->encode(p, true).size());
    e.train.assign(e.ids.size(), 1);
    if (on_ != TrainOn::all) std::fill(e.train.begin(), e.train.begin() + static_cast<std::ptrdiff_t>(n_prompt), 0);
    return e;
  }
  if (prompt.is_string() || completion.is_string())
    throw BadLineError(str(where, "\"", recipe_.prompt_key, "\" is ", a_type(prompt), " and \"", recipe_.completion_key,
                           "\" ", a_type(completion), ", expected two strings or two lists of messages"));
  std::vector<ChatMessage> messages = parse_messages(prompt, where, recipe_.prompt_key);
  const std::vector<ChatMessage> answer = parse_messages(completion, where, recipe_.completion_key);
  if (!has_answer(answer))
    throw BadLineError(
        str(where, "no assistant turn with text in \"", recipe_.completion_key, "\", expected an answer to train on"));
  size_t prompt_turns = 0;
  for (const auto& m : messages) prompt_turns += m.role == "assistant";
  messages.insert(messages.end(), answer.begin(), answer.end());
  return encode_chat(*tok_, template_, messages, on_, prompt_turns);
}

}  // namespace gtrain::text
