// sample_command.cpp: loading a trained decoder on the CPU (or the first GPU) and generating from it.
#include "launcher/commands/sample_command.h"
#include "launcher/commands/lora_merge.h"

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/hf_checkpoint.h"
#include "runtime/core/checkpoint_dirs.h"
#include "runtime/core/config/job_config.h"
#include "runtime/core/errors.h"
#include "runtime/core/text/chat_template.h"
#include "runtime/core/text/tokenizer.h"
#include "runtime/models/decoder_lm.h"
#include "runtime/models/model_registry.h"

namespace gtrain {
namespace {

// A trained decoder and how its tokens read as text.
struct Loaded {
  std::shared_ptr<DecoderLm> model;
  bool bytes = false;  // byte-level (text_bytes): token i is byte i
  std::string source;
  std::string tokenizer;      // where its tokenizer is ("" = none known)
  std::string chat_template;  // the run's data.chat_template ("" = none set)
};

// A string value of the run's resolved config (the manifest keeps each as TOML text), "" if absent.
std::string config_string(const std::optional<nlohmann::json>& config, const std::string& key) {
  if (!config || !config->contains(key) || !config->at(key).is_string()) return "";
  const auto v = nlohmann::json::parse(config->at(key).get<std::string>(), nullptr, false);
  return v.is_string() ? v.get<std::string>() : "";
}

bool has_tokenizer(const std::string& dir) {
  return !dir.empty() && std::ifstream(dir + "/tokenizer.json").good();
}

// The model of a gtrain checkpoint: its [model] keys from the manifest, its vocabulary from the
// embedding, its weights read whole (any layout wrote them).
Loaded load_checkpoint(const std::string& path) {
  const auto shared = std::make_shared<CheckpointReader>(resolve_checkpoint_path(path, ""));
  CheckpointReader& ck = *shared;
  const auto& meta = ck.manifest().meta;
  // A LoRA run's: its base with the adapters folded in (lora_merge.h).
  std::optional<MergedLora> merged;
  if (meta.base_model) merged = open_merged_lora(shared);
  std::string toml = "[model]\n";
  for (const auto& [key, text] : meta.model) toml += key + " = " + text + "\n";
  toml += "[train]\nsteps = 1\n";
  const JobConfig cfg = parse_job_config(toml, ck.path() + "/manifest.json", {}, {});
  ModelConfig mc = cfg.model;
  if (!mc.plugin.empty()) ModelRegistry::global().load_plugin(mc.plugin);
  const std::string embedding = mc.name == "gpt" ? "wte.weight" : "embed_tokens.weight";
  if (merged) {
    mc.vocab = merged->reader->shape().model.vocab;
  } else if (!ck.has(embedding)) {
    throw ConfigError(ck.path() + ": holds a '" + mc.name + "' model; gtrain sample generates with gpt and llama",
                      "train a decoder (model.name = \"gpt\" or \"llama\")");
  } else {
    mc.vocab = ck.shape(embedding).at(0);
  }
  mc.seq_len = std::max(mc.seq_len, mc.context_length());  // generation may use the whole context
  DataSpec spec;
  spec.tokens = true;
  spec.vocab = mc.vocab;
  spec.input_shape = {mc.seq_len};
  auto model = std::dynamic_pointer_cast<DecoderLm>(ModelRegistry::global().create(mc, spec));
  if (!model) throw ConfigError(ck.path() + ": model.name = '" + mc.name + "' is not a decoder gtrain sample can run");
  torch::NoGradGuard ng;
  for (auto& kv : model->named_parameters()) {
    if (merged) {
      kv.value().copy_(merged->read(kv.key()));
      continue;
    }
    if (!ck.has(kv.key())) throw CheckpointError(ck.path() + ": no tensor '" + kv.key() + "' for the model");
    kv.value().copy_(ck.read(kv.key()));
  }
  Loaded out;
  out.model = model;
  out.source = ck.path() + " (step " + std::to_string(ck.step()) +
               (merged ? ", LoRA adapters on " + merged->base : std::string()) + ")";
  if (meta.config && meta.config->contains("data.kind")) {
    out.bytes = meta.config->at("data.kind").get<std::string>() == "\"text_bytes\"";
  }
  // The tokenizer it was trained with: data.tokenizer, else the Hugging Face directory it began from.
  out.tokenizer = config_string(meta.config, "data.tokenizer");
  const std::string init = config_string(meta.config, "checkpoint.init_from");
  if (out.tokenizer.empty() && has_tokenizer(init)) out.tokenizer = init;
  out.chat_template = config_string(meta.config, "data.chat_template");
  return out;
}

// The model of a Hugging Face directory: its config.json's shape, its safetensors' weights.
Loaded load_hf(const std::string& dir) {
  HfCheckpointReader hf(dir);
  ModelConfig mc = hf.shape().model;
  // The whole context: gpt's position table, llama's max_position_embeddings.
  mc.seq_len = std::max(mc.seq_len, mc.context_length());
  DataSpec spec;
  spec.tokens = true;
  spec.vocab = mc.vocab;
  spec.input_shape = {mc.seq_len};
  auto model = std::dynamic_pointer_cast<DecoderLm>(ModelRegistry::global().create(mc, spec));
  GT_CHECK(model != nullptr, "a Hugging Face directory builds a decoder");
  torch::NoGradGuard ng;
  for (auto& kv : model->named_parameters()) kv.value().copy_(hf.read(kv.key()));
  Loaded out;
  out.model = model;
  out.source = dir + " (" + hf_architecture(hf.shape().family) + ")";
  if (has_tokenizer(dir)) out.tokenizer = dir;
  return out;
}

int64_t choose(const torch::Tensor& logits, const SampleOptions& o, torch::Generator& gen) {
  if (o.temperature <= 0) return logits.argmax().item<int64_t>();
  auto l = logits.to(torch::kFloat) / o.temperature;
  if (o.top_k > 0 && o.top_k < l.size(0)) {
    auto kth = std::get<0>(l.topk(o.top_k)).min();
    l = l.masked_fill(l < kth, -std::numeric_limits<double>::infinity());
  }
  return torch::multinomial(torch::softmax(l, -1), 1, false, gen).item<int64_t>();
}

}  // namespace

std::vector<int64_t> parse_prompt_ids(const std::string& text) {
  std::vector<int64_t> ids;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    const auto b = item.find_first_not_of(" \t"), e = item.find_last_not_of(" \t");
    const std::string t = b == std::string::npos ? "" : item.substr(b, e - b + 1);
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(t, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (t.empty() || used != t.size() || v < 0) {
      throw ConfigError("--prompt-ids: '" + t + "' is not a token id (expected non-negative integers: 1,2,3)");
    }
    ids.push_back(v);
  }
  return ids;
}

namespace {

// --chat's template: --chat-template, else the run's data.chat_template, else the one the
// tokenizer's tokenizer_config.json carries (recognised by content).
text::ChatTemplate sample_chat_template(const SampleOptions& o, const Loaded& m, const text::Tokenizer& tok) {
  if (!o.chat_template.empty()) return text::chat_template_for(tok, o.chat_template, "--chat-template");
  if (!m.chat_template.empty()) return text::chat_template_for(tok, m.chat_template, "data.chat_template");
  const std::string bos = tok.bos_id() ? tok.token(*tok.bos_id()) : std::string();
  const std::string eos = tok.eos_id() ? tok.token(*tok.eos_id()) : std::string();
  if (auto t = text::recognize_chat_template(tok.chat_template(), bos, eos)) return *t;
  const std::string config = std::filesystem::path(tok.path()).parent_path().string() + "/tokenizer_config.json";
  throw ConfigError("--chat: " + config +
                    (tok.chat_template().empty() ? " has no chat_template"
                                                 : ": its chat_template is none of llama3, chatml, qwen3, plain") +
                    "; name one with --chat-template llama3, chatml, qwen3 or plain");
}

// The prompt as ids: --chat's conversation (--system's turn, the user's, the assistant's header)
// as apply_chat_template(add_generation_prompt=True, tokenize=True) gives it (no post-processor
// tokens), --prompt-text through the tokenizer (or as bytes), or --prompt-ids.
std::vector<int64_t> prompt_of(const SampleOptions& o, const Loaded& m, const std::optional<text::Tokenizer>& tok,
                               const std::optional<text::ChatTemplate>& chat) {
  std::vector<int64_t> prompt;
  if (chat) {
    std::vector<text::ChatMessage> messages;
    if (!o.system.empty()) messages.push_back({"system", o.system, ""});
    messages.push_back({"user", o.chat, ""});
    for (uint32_t id : tok->encode(text::render_chat(*chat, messages, true).text, false)) prompt.push_back(id);
  } else if (!o.prompt_text.empty()) {
    if (tok) {
      for (uint32_t id : tok->encode(o.prompt_text)) prompt.push_back(id);
    } else {
      for (unsigned char ch : o.prompt_text) prompt.push_back(ch);
    }
  } else {
    prompt = parse_prompt_ids(o.prompt_ids);
    for (int64_t id : prompt) {
      if (id >= m.model->vocab()) {
        throw ConfigError("--prompt-ids: token " + std::to_string(id) + " is outside the model's vocabulary of " +
                          std::to_string(m.model->vocab()));
      }
    }
  }
  return prompt;
}

struct Generated {
  std::vector<int64_t> tokens;     // the stop token, if any, included
  std::string stopped = "length";  // "length" | "eos" | "end_of_turn"
};

// Up to o.tokens tokens after `prompt`, stopping at (and keeping) an `eos` or the `end_of_turn` id.
Generated generate(DecoderLm& model, const std::vector<int64_t>& prompt, const SampleOptions& o,
                   const std::vector<int64_t>& eos, std::optional<int64_t> end_of_turn) {
  model.eval();
  auto gen = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  KvCache cache;
  auto logits = model.decode(torch::tensor(prompt, torch::kLong).unsqueeze(0), cache);
  Generated g;
  for (int64_t i = 0; i < o.tokens; ++i) {
    const int64_t next = choose(logits[0][logits.size(1) - 1], o, gen);
    g.tokens.push_back(next);
    if (end_of_turn && next == *end_of_turn) {
      g.stopped = "end_of_turn";
      break;
    }
    if (std::find(eos.begin(), eos.end(), next) != eos.end()) {
      g.stopped = "eos";
      break;
    }
    if (i + 1 < o.tokens) logits = model.decode(torch::tensor({next}, torch::kLong).unsqueeze(0), cache);
  }
  return g;
}

void check_prompt_flags(const SampleOptions& o) {
  const int prompts = !o.prompt_ids.empty() + !o.prompt_text.empty() + !o.chat.empty();
  if (prompts != 1) {
    throw ConfigError(
        "gtrain sample: give the prompt as --prompt-ids 1,2,3 or as --prompt-text \"...\", or a question as --chat "
        "\"...\" (one of them)");
  }
  if (o.chat.empty() && !o.system.empty()) throw ConfigError("--system: only with --chat \"question\"");
  if (o.chat.empty() && !o.chat_template.empty()) throw ConfigError("--chat-template: only with --chat \"question\"");
  for (const auto& [flag, text] : {std::pair<const char*, const std::string&>{"--prompt-text", o.prompt_text},
                                   {"--chat", o.chat},
                                   {"--system", o.system}}) {
    if (auto bad = text::utf8_error(text)) {
      throw ConfigError(std::string(flag) + ": invalid UTF-8 at byte " + std::to_string(*bad));
    }
  }
  if (o.tokens < 1) throw ConfigError("--tokens: expected at least 1, got " + std::to_string(o.tokens));
  if (o.temperature < 0) throw ConfigError("--temperature: expected 0 (greedy) or more");
  if (o.top_k < 0) throw ConfigError("--top-k: expected 0 (all tokens) or more");
}

}  // namespace

int sample_command(const SampleOptions& o) {
  check_prompt_flags(o);
  Loaded m = is_hf_model_dir(o.path) ? load_hf(o.path) : load_checkpoint(o.path);
  const ModelConfig& mc = m.model->config();
  if (!o.tokenizer.empty()) m.tokenizer = o.tokenizer, m.bytes = false;  // the flag wins over bytes
  std::optional<text::Tokenizer> tok;
  if (!m.tokenizer.empty() && !m.bytes) tok = text::Tokenizer::load(m.tokenizer);
  if (tok && static_cast<int64_t>(tok->vocab_size()) > m.model->vocab()) {
    throw ConfigError("--tokenizer: " + tok->path() + " has " + std::to_string(tok->vocab_size()) +
                      " ids, more than the model's vocabulary of " + std::to_string(m.model->vocab()));
  }
  const char* text_flag = !o.chat.empty() ? "--chat" : !o.prompt_text.empty() ? "--prompt-text" : nullptr;
  if (text_flag && !tok && !(m.bytes && o.chat.empty())) {
    throw ConfigError(std::string(text_flag) + ": " + m.source +
                          " has no tokenizer gtrain knows of (no data.tokenizer, no tokenizer.json in its directory)",
                      o.chat.empty() ? "name one with --tokenizer PATH, or give the ids with --prompt-ids"
                                     : "name one with --tokenizer PATH");
  }
  std::optional<text::ChatTemplate> chat;
  if (!o.chat.empty()) chat = sample_chat_template(o, m, *tok);
  const std::vector<int64_t> prompt = prompt_of(o, m, tok, chat);
  const int64_t total = static_cast<int64_t>(prompt.size()) + o.tokens;
  if (total > mc.seq_len) {
    throw ConfigError(
        "--tokens: the prompt (" + std::to_string(prompt.size()) + ") and " + std::to_string(o.tokens) +
            " new tokens exceed the model's context, model.seq_len = " + std::to_string(mc.seq_len),
        "ask for at most " + std::to_string(std::max<int64_t>(0, mc.seq_len - (total - o.tokens))) + " tokens");
  }
  // Generation stops at the model's end-of-sequence tokens (model.eos_token_id, an import's), which
  // are kept in the output as transformers' generate() keeps them; a chat also at the template's
  // end-of-turn token and the tokenizer's EOS.
  std::vector<int64_t> eos = mc.eos_token_id;
  std::optional<int64_t> end_of_turn;
  if (chat) {
    if (auto id = tok->token_id(text::chat_end_of_turn(*chat))) end_of_turn = *id;
    if (tok->eos_id()) eos.push_back(*tok->eos_id());
  }
  const Generated g = generate(*m.model, prompt, o, eos, end_of_turn);
  const std::vector<int64_t>& out = g.tokens;
  std::string text;
  const bool has_text = m.bytes || tok.has_value();
  if (tok) {  // the generated ids as text, special tokens (the end of sequence) left out
    text = tok->decode(std::vector<uint32_t>(out.begin(), out.end()), true);
    if (chat) text = text::strip_empty_think(text);
  } else if (m.bytes) {
    for (size_t i = 0; i < out.size(); ++i)
      if (!(g.stopped == "eos" && i + 1 == out.size())) text += static_cast<char>(out[i]);
  }
  if (o.json) {
    nlohmann::json j = {{"source", m.source}, {"prompt", prompt}, {"tokens", out}, {"stopped", g.stopped}};
    if (chat) j["template"] = text::chat_family_name(chat->family);
    if (has_text) j["text"] = text;
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
  } else if (chat) {
    std::cout << text << "\n";  // the reply alone
  } else {
    std::string ids;
    for (size_t i = 0; i < out.size(); ++i) ids += (i ? "," : "") + std::to_string(out[i]);
    std::cout << ids << "\n";
    if (has_text)
      std::cout << (o.prompt_text.empty() && tok
                        ? tok->decode(std::vector<uint32_t>(prompt.begin(), prompt.end()), true)
                        : o.prompt_text)
                << text << "\n";
  }
  return 0;
}

}  // namespace gtrain
