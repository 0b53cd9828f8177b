// sample_command.cpp: loading a trained decoder on the CPU (or the first GPU) and generating from it.
#include "launcher/commands/sample_command.h"

#include <torch/torch.h>

#include <algorithm>
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
  std::string tokenizer;  // where its tokenizer is ("" = none known)
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
  CheckpointReader ck(resolve_checkpoint_path(path, ""));
  const auto& meta = ck.manifest().meta;
  std::string toml = "[model]\n";
  for (const auto& [key, text] : meta.model) toml += key + " = " + text + "\n";
  toml += "[train]\nsteps = 1\n";
  const JobConfig cfg = parse_job_config(toml, ck.path() + "/manifest.json", {}, {});
  ModelConfig mc = cfg.model;
  if (!mc.plugin.empty()) ModelRegistry::global().load_plugin(mc.plugin);
  const std::string embedding = mc.name == "gpt" ? "wte.weight" : "embed_tokens.weight";
  if (!ck.has(embedding)) {
    throw ConfigError(ck.path() + ": holds a '" + mc.name + "' model; gtrain sample generates with gpt and llama",
                      "train a decoder (model.name = \"gpt\" or \"llama\")");
  }
  mc.vocab = ck.shape(embedding).at(0);
  mc.seq_len = std::max(mc.seq_len, mc.context_length());  // generation may use the whole context
  DataSpec spec;
  spec.tokens = true;
  spec.vocab = mc.vocab;
  spec.input_shape = {mc.seq_len};
  auto model = std::dynamic_pointer_cast<DecoderLm>(ModelRegistry::global().create(mc, spec));
  if (!model) throw ConfigError(ck.path() + ": model.name = '" + mc.name + "' is not a decoder gtrain sample can run");
  torch::NoGradGuard ng;
  for (auto& kv : model->named_parameters()) {
    if (!ck.has(kv.key())) throw CheckpointError(ck.path() + ": no tensor '" + kv.key() + "' for the model");
    kv.value().copy_(ck.read(kv.key()));
  }
  Loaded out;
  out.model = model;
  out.source = ck.path() + " (step " + std::to_string(ck.step()) + ")";
  if (meta.config && meta.config->contains("data.kind")) {
    out.bytes = meta.config->at("data.kind").get<std::string>() == "\"text_bytes\"";
  }
  // The tokenizer it was trained with: data.tokenizer, else the Hugging Face directory it began from.
  out.tokenizer = config_string(meta.config, "data.tokenizer");
  const std::string init = config_string(meta.config, "checkpoint.init_from");
  if (out.tokenizer.empty() && has_tokenizer(init)) out.tokenizer = init;
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

int sample_command(const SampleOptions& o) {
  if (o.prompt_ids.empty() == o.prompt_text.empty()) {
    throw ConfigError("gtrain sample: give the prompt as --prompt-ids 1,2,3 or as --prompt-text \"...\" (one of them)");
  }
  if (o.tokens < 1) throw ConfigError("--tokens: expected at least 1, got " + std::to_string(o.tokens));
  if (o.temperature < 0) throw ConfigError("--temperature: expected 0 (greedy) or more");
  if (o.top_k < 0) throw ConfigError("--top-k: expected 0 (all tokens) or more");
  Loaded m = is_hf_model_dir(o.path) ? load_hf(o.path) : load_checkpoint(o.path);
  const ModelConfig& mc = m.model->config();
  if (!o.tokenizer.empty()) m.tokenizer = o.tokenizer, m.bytes = false;  // the flag wins over bytes
  std::optional<text::Tokenizer> tok;
  if (!m.tokenizer.empty() && !m.bytes) tok = text::Tokenizer::load(m.tokenizer);
  if (tok && static_cast<int64_t>(tok->vocab_size()) > m.model->vocab()) {
    throw ConfigError("--tokenizer: " + tok->path() + " has " + std::to_string(tok->vocab_size()) +
                      " ids, more than the model's vocabulary of " + std::to_string(m.model->vocab()));
  }
  std::vector<int64_t> prompt;
  if (!o.prompt_text.empty()) {
    if (!m.bytes && !tok) {
      throw ConfigError("--prompt-text: " + m.source +
                            " has no tokenizer gtrain knows of (no data.tokenizer, no tokenizer.json in its directory)",
                        "name one with --tokenizer PATH, or give the ids with --prompt-ids");
    }
    if (auto bad = text::utf8_error(o.prompt_text)) {
      throw ConfigError("--prompt-text: invalid UTF-8 at byte " + std::to_string(*bad));
    }
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
  const int64_t total = static_cast<int64_t>(prompt.size()) + o.tokens;
  if (total > mc.seq_len) {
    throw ConfigError(
        "--tokens: the prompt (" + std::to_string(prompt.size()) + ") and " + std::to_string(o.tokens) +
            " new tokens exceed the model's context, model.seq_len = " + std::to_string(mc.seq_len),
        "ask for at most " + std::to_string(std::max<int64_t>(0, mc.seq_len - (total - o.tokens))) + " tokens");
  }
  m.model->eval();
  auto gen = at::make_generator<at::CPUGeneratorImpl>(o.seed);
  KvCache cache;
  auto logits = m.model->decode(torch::tensor(prompt, torch::kLong).unsqueeze(0), cache);
  std::vector<int64_t> out;
  // Generation stops at the model's end-of-sequence tokens (model.eos_token_id, an import's), which
  // are kept in the output as transformers' generate() keeps them.
  const std::vector<int64_t>& eos = mc.eos_token_id;
  bool at_eos = false;
  for (int64_t i = 0; i < o.tokens; ++i) {
    const int64_t next = choose(logits[0][logits.size(1) - 1], o, gen);
    out.push_back(next);
    at_eos = std::find(eos.begin(), eos.end(), next) != eos.end();
    if (at_eos) break;
    if (i + 1 < o.tokens) logits = m.model->decode(torch::tensor({next}, torch::kLong).unsqueeze(0), cache);
  }
  std::string text;
  const bool has_text = m.bytes || tok.has_value();
  if (m.bytes) {
    for (size_t i = 0; i < out.size(); ++i)
      if (!(at_eos && i + 1 == out.size())) text += static_cast<char>(out[i]);
  } else if (tok) {  // the generated ids as text, special tokens (the end of sequence) left out
    text = tok->decode(std::vector<uint32_t>(out.begin(), out.end()), true);
  }
  if (o.json) {
    nlohmann::json j = {
        {"source", m.source}, {"prompt", prompt}, {"tokens", out}, {"stopped", at_eos ? "eos" : "length"}};
    if (has_text) j["text"] = text;
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << std::endl;
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
