// chat_template.cpp: the Llama 3, ChatML, Qwen3 and plain chat templates, each the text its Jinja
// source writes for system / user / assistant turns, and the assistant mask by prefix tokenization.
#include "runtime/core/text/chat_template.h"

#include "runtime/core/errors.h"
#include "runtime/core/text/unicode.h"

namespace gtrain::text {
namespace {

// Python's str.strip(): White_Space and the four separators \x1c-\x1f (Jinja's trim filter).
bool python_space(char32_t c) {
  return is_white_space(c) || (c >= 0x1C && c <= 0x1F);
}

std::string strip(const std::string& s, bool left, bool right) {
  size_t b = 0, e = s.size();
  while (left && b < e) {
    size_t len = 1;
    if (!python_space(decode_at(s, b, &len))) break;
    b += len;
  }
  while (right && e > b) {
    size_t start = e - 1;
    while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t len = 1;
    if (!python_space(decode_at(s, start, &len))) break;
    e = start;
  }
  return s.substr(b, e - b);
}

// Python's s.strip('\n') / lstrip('\n') / rstrip('\n').
std::string strip_newlines(const std::string& s, bool left, bool right) {
  size_t b = 0, e = s.size();
  while (left && b < e && s[b] == '\n') ++b;
  while (right && e > b && s[e - 1] == '\n') --e;
  return s.substr(b, e - b);
}

void check_role(const ChatMessage& m, const char* family) {
  if (m.role != "system" && m.role != "user" && m.role != "assistant") {
    throw ConfigError(std::string("chat template ") + family + ": role \"" + m.role +
                      "\" is not one of system, user, assistant");
  }
}

// Appends `s`; when `assistant`, records its span.
struct Writer {
  RenderedChat out;
  void add(const std::string& s) { out.text += s; }
  void assistant(const std::string& s) {
    out.assistant_spans.emplace_back(out.text.size(), out.text.size() + s.size());
    out.text += s;
  }
};

RenderedChat render_llama3(const ChatTemplate& t, const std::vector<ChatMessage>& messages, bool gen) {
  Writer w;
  size_t first = 0;
  std::string system;
  if (!messages.empty() && messages[0].role == "system") system = strip(messages[0].content, true, true), first = 1;
  w.add(t.bos);
  w.add(
      "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul "
      "2024\n\n" +
      system + "<|eot_id|>");
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    check_role(m, "llama3");
    w.add("<|start_header_id|>" + m.role + "<|end_header_id|>\n\n");
    const std::string body = strip(m.content, true, true) + "<|eot_id|>";
    m.role == "assistant" ? w.assistant(body) : w.add(body);
  }
  if (gen) w.add("<|start_header_id|>assistant<|end_header_id|>\n\n");
  return w.out;
}

RenderedChat render_chatml(const ChatTemplate& t, const std::vector<ChatMessage>& messages, bool gen) {
  Writer w;
  const bool has_system = !messages.empty() && messages[0].role == "system";
  if (!has_system && !t.default_system.empty()) w.add("<|im_start|>system\n" + t.default_system + "<|im_end|>\n");
  for (const ChatMessage& m : messages) {
    check_role(m, "chatml");
    w.add("<|im_start|>" + m.role + "\n");
    const std::string body = m.content + "<|im_end|>";
    m.role == "assistant" ? w.assistant(body) : w.add(body);
    w.add("\n");
  }
  if (gen) w.add("<|im_start|>assistant\n");
  return w.out;
}

RenderedChat render_qwen3(const std::vector<ChatMessage>& messages, bool gen) {
  Writer w;
  if (!messages.empty() && messages[0].role == "system")
    w.add("<|im_start|>system\n" + messages[0].content + "<|im_end|>\n");
  // The last user turn that is not a tool response: think blocks are written only after it.
  size_t last_query = messages.size() - 1;
  for (size_t k = messages.size(); k-- > 0;) {
    const std::string& c = messages[k].content;
    const bool tool_response =
        c.rfind("<tool_response>", 0) == 0 && c.size() >= 16 && c.compare(c.size() - 16, 16, "</tool_response>") == 0;
    if (messages[k].role == "user" && !tool_response) {
      last_query = k;
      break;
    }
  }
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    check_role(m, "qwen3");
    if (m.role == "user" || (m.role == "system" && i > 0)) {
      w.add("<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n");
      continue;
    }
    if (m.role == "system") continue;  // the first system turn, written above
    std::string content = m.content, reasoning = m.reasoning;
    const size_t close = content.find("</think>");
    if (reasoning.empty() && close != std::string::npos) {
      const std::string before = strip_newlines(content.substr(0, close), false, true);
      const size_t open = before.rfind("<think>");
      reasoning = strip_newlines(open == std::string::npos ? before : before.substr(open + 7), true, false);
      content = strip_newlines(content.substr(content.rfind("</think>") + 8), true, false);
    }
    w.add("<|im_start|>assistant\n");
    std::string body;
    if (i > last_query && (i + 1 == messages.size() || !reasoning.empty())) {
      body =
          "<think>\n" + strip_newlines(reasoning, true, true) + "\n</think>\n\n" + strip_newlines(content, true, false);
    } else {
      body = content;
    }
    w.assistant(body + "<|im_end|>");
    w.add("\n");
  }
  if (gen) w.add("<|im_start|>assistant\n");
  return w.out;
}

RenderedChat render_plain(const ChatTemplate& t, const std::vector<ChatMessage>& messages) {
  Writer w;
  for (const ChatMessage& m : messages) {
    check_role(m, "plain");
    m.role == "assistant" ? w.assistant(m.content + t.eos) : w.add(m.content + t.eos);
  }
  return w.out;
}

}  // namespace

std::optional<ChatFamily> chat_family(const std::string& name) {
  if (name == "llama3") return ChatFamily::llama3;
  if (name == "chatml") return ChatFamily::chatml;
  if (name == "qwen3") return ChatFamily::qwen3;
  if (name == "plain") return ChatFamily::plain;
  return std::nullopt;
}

const char* chat_family_name(ChatFamily f) {
  switch (f) {
    case ChatFamily::llama3:
      return "llama3";
    case ChatFamily::chatml:
      return "chatml";
    case ChatFamily::qwen3:
      return "qwen3";
    case ChatFamily::plain:
      return "plain";
  }
  return "plain";
}

std::optional<ChatTemplate> recognize_chat_template(const std::string& jinja, const std::string& bos,
                                                    const std::string& eos) {
  ChatTemplate t;
  t.bos = bos;
  t.eos = eos;
  auto has = [&](const char* s) { return jinja.find(s) != std::string::npos; };
  if (has("<|start_header_id|>") && has("<|eot_id|>") && has("Cutting Knowledge Date: December 2023")) {
    t.family = ChatFamily::llama3;
    return t;
  }
  if (has("<|im_start|>") && has("<|im_end|>")) {
    if (has("<think>") && has("last_query_index")) {
      t.family = ChatFamily::qwen3;
      return t;
    }
    t.family = ChatFamily::chatml;
    // The system turn written when the conversation has none: '<|im_start|>system\n...<|im_end|>\n'
    // as a literal in the template's else branch.
    const std::string open = "'<|im_start|>system\\n", close = "<|im_end|>\\n'";
    for (size_t at = jinja.find(open); at != std::string::npos; at = jinja.find(open, at + 1)) {
      const size_t b = at + open.size(), e = jinja.find(close, b);
      if (e == std::string::npos) break;
      const std::string body = jinja.substr(b, e - b);
      if (body.find('\'') == std::string::npos && body.find('+') == std::string::npos) {
        t.default_system = body;
        break;
      }
    }
    return t;
  }
  return std::nullopt;
}

ChatTemplate chat_template_for(const Tokenizer& tok, const std::string& name, const std::string& key) {
  const std::string bos = tok.bos_id() ? tok.token(*tok.bos_id()) : std::string();
  const std::string eos = tok.eos_id() ? tok.token(*tok.eos_id()) : std::string();
  const auto recognized = recognize_chat_template(tok.chat_template(), bos, eos);
  if (name.empty()) {
    if (recognized) return *recognized;
    throw ConfigError(tok.path() + ": " +
                      (tok.chat_template().empty() ? std::string("its tokenizer_config.json has no chat_template")
                                                   : std::string("its chat_template is none gtrain writes")) +
                      "; set " + key + " = \"llama3\", \"chatml\", \"qwen3\" or \"plain\"");
  }
  const auto family = chat_family(name);
  if (!family) throw ConfigError(key + " = \"" + name + "\": expected \"llama3\", \"chatml\", \"qwen3\" or \"plain\"");
  if (recognized && recognized->family == *family) return *recognized;
  ChatTemplate t;
  t.family = *family;
  t.bos = bos;
  t.eos = eos;
  return t;
}

RenderedChat render_chat(const ChatTemplate& t, const std::vector<ChatMessage>& messages, bool add_generation_prompt) {
  switch (t.family) {
    case ChatFamily::llama3:
      return render_llama3(t, messages, add_generation_prompt);
    case ChatFamily::chatml:
      return render_chatml(t, messages, add_generation_prompt);
    case ChatFamily::qwen3:
      return render_qwen3(messages, add_generation_prompt);
    case ChatFamily::plain:
      return render_plain(t, messages);
  }
  return {};
}

EncodedChat encode_chat(const Tokenizer& tok, const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                        TrainOn on, size_t untrained_turns) {
  const RenderedChat r = render_chat(t, messages);
  EncodedChat e;
  e.ids = tok.encode(r.text, false);
  e.train.assign(e.ids.size(), on == TrainOn::all ? 1 : 0);
  if (on == TrainOn::all) return e;
  const size_t first =
      on == TrainOn::last_assistant && !r.assistant_spans.empty() ? r.assistant_spans.size() - 1 : untrained_turns;
  for (size_t k = first; k < r.assistant_spans.size(); ++k) {
    const auto [b, end] = r.assistant_spans[k];
    const size_t from = tok.encode(std::string_view(r.text).substr(0, b), false).size();
    const size_t to = std::min(e.ids.size(), tok.encode(std::string_view(r.text).substr(0, end), false).size());
    for (size_t i = from; i < to; ++i) e.train[i] = 1;
  }
  return e;
}

std::string chat_end_of_turn(const ChatTemplate& t) {
  switch (t.family) {
    case ChatFamily::llama3:
      return "<|eot_id|>";
    case ChatFamily::chatml:
    case ChatFamily::qwen3:
      return "<|im_end|>";
    case ChatFamily::plain:
      return t.eos;
  }
  return t.eos;
}

std::string strip_empty_think(const std::string& reply) {
  auto skip_space = [&](size_t at) {
    while (at < reply.size() && (reply[at] == '\n' || reply[at] == ' ' || reply[at] == '\t' || reply[at] == '\r')) ++at;
    return at;
  };
  size_t at = skip_space(0);
  if (reply.compare(at, 7, "<think>") != 0) return reply;
  at = skip_space(at + 7);
  if (reply.compare(at, 8, "</think>") != 0) return reply;
  return reply.substr(skip_space(at + 8));
}

}  // namespace gtrain::text
