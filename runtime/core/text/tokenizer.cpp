// tokenizer.cpp: a tokenizer.json loaded into its parts (added tokens, normalizer, pre-tokenizer,
// BPE model, post-processor, decoder) and the encode / decode paths through them.
#include "runtime/core/text/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_set>

#include <nlohmann/json.hpp>

#include "runtime/core/errors.h"
#include "runtime/core/fnv.h"
#include "runtime/core/text/bpe.h"
#include "runtime/core/text/decoders.h"
#include "runtime/core/text/pipeline.h"
#include "runtime/core/text/unicode.h"

namespace gtrain::text {

struct AddedToken {
  std::string content;
  std::string pattern;  // what is matched: the content, normalized when `normalized`
  uint32_t id = 0;
  bool special = false, single_word = false, lstrip = false, rstrip = false, normalized = false;
};

// Leftmost-longest matching of a set of added tokens (tokenizers' AddedVocabulary::find_matches).
class AddedMatcher {
 public:
  void add(const AddedToken* t) {
    if (t->pattern.empty()) return;
    auto& bucket = by_first_[static_cast<unsigned char>(t->pattern[0])];
    bucket.push_back(t);
    std::stable_sort(bucket.begin(), bucket.end(),
                     [](const AddedToken* a, const AddedToken* b) { return a->pattern.size() > b->pattern.size(); });
    any_ = true;
  }
  bool empty() const { return !any_; }

  struct Split {
    size_t b, e;
    const AddedToken* token;  // null: text
  };
  void find(std::string_view s, std::vector<Split>& out) const {
    out.clear();
    size_t start_offset = 0;
    for (size_t pos = 0; any_ && pos < s.size();) {
      const AddedToken* hit = nullptr;
      for (const AddedToken* t : by_first_[static_cast<unsigned char>(s[pos])]) {
        if (s.compare(pos, t->pattern.size(), t->pattern) == 0) {
          hit = t;
          break;
        }
      }
      if (!hit) {
        ++pos;
        continue;
      }
      size_t b = pos, e = pos + hit->pattern.size();
      pos = e;
      if (hit->single_word) {
        const bool start_space = b == 0 || !ends_with_word(s.substr(0, b));
        const bool stop_space = e == s.size() || !starts_with_word(s.substr(e));
        if (!start_space || !stop_space) {
          continue;  // the automaton goes on past the discarded match's end
        }
      }
      if (hit->lstrip) b = std::max(trailing_space_start(s.substr(0, b)), start_offset);
      if (hit->rstrip) e += leading_space_len(s.substr(e));
      if (start_offset < b) out.push_back({start_offset, b, nullptr});
      out.push_back({b, e, hit});
      start_offset = e;
    }
    if (start_offset != s.size() || out.empty()) out.push_back({start_offset, s.size(), nullptr});
  }

 private:
  static char32_t last_char(std::string_view s) {
    size_t i = s.size() - 1;
    while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
    size_t len = 1;
    return decode_at(s, i, &len);
  }
  static bool ends_with_word(std::string_view s) { return !s.empty() && is_word_char(last_char(s)); }
  static bool starts_with_word(std::string_view s) {
    size_t len = 1;
    return !s.empty() && is_word_char(decode_at(s, 0, &len));
  }
  static size_t trailing_space_start(std::string_view s) {
    size_t e = s.size();
    while (e > 0) {
      size_t i = e - 1;
      while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
      size_t len = 1;
      if (!is_white_space(decode_at(s, i, &len))) break;
      e = i;
    }
    return e;
  }
  static size_t leading_space_len(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
      size_t len = 1;
      if (!is_white_space(decode_at(s, i, &len))) break;
      i += len;
    }
    return i;
  }

  std::vector<const AddedToken*> by_first_[256];
  bool any_ = false;
};

struct TokenizerImpl {
  std::string path, hash;
  std::unique_ptr<Bpe> model;
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre;
  PostProcessor post;
  std::unique_ptr<Decoder> decoder;
  std::vector<AddedToken> added;
  AddedMatcher raw, normalized;
  std::unordered_set<std::string> special;
  std::unordered_map<uint32_t, const AddedToken*> added_by_id;
  std::unordered_map<std::string, uint32_t> added_by_content;
  size_t id_bound = 0;
  std::optional<uint32_t> bos, eos;
  std::string normalizer_name, pre_name;
  std::string chat_template;
};

namespace {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path + ": cannot read the tokenizer file");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// tokenizer_config.json's bos_token / eos_token: a string, or {"content": ...}.
std::optional<std::string> config_token(const nlohmann::json& cfg, const char* key) {
  if (!cfg.is_object() || !cfg.contains(key)) return std::nullopt;
  const auto& v = cfg.at(key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v.at("content").is_string()) return v.at("content").get<std::string>();
  return std::nullopt;
}

void refuse_settings(const nlohmann::json& j, const std::string& where) {
  for (const char* key : {"normalizer", "pre_tokenizer", "post_processor", "decoder", "model", "added_tokens"}) {
    if (!j.contains(key)) throw ConfigError(where + ": no \"" + key + "\" (is this a Hugging Face tokenizer.json?)");
  }
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<TokenizerImpl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string file = path;
  if (fs::is_directory(path, ec)) {
    file = (fs::path(path) / "tokenizer.json").string();
    if (!fs::exists(file, ec)) {
      throw ConfigError(
          path + ": no tokenizer.json in this directory",
          "gtrain reads Hugging Face tokenizer.json files (a model directory saved by transformers has one)");
    }
  } else if (!fs::exists(path, ec)) {
    throw ConfigError(path + ": no such tokenizer file or directory");
  }
  const std::string text = read_file(file);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(file + ": not valid JSON (" + std::string(e.what()) + ")");
  }
  std::string config_text;
  nlohmann::json cfg;
  const fs::path config_path = fs::path(file).parent_path() / "tokenizer_config.json";
  if (fs::exists(config_path, ec)) {
    config_text = read_file(config_path.string());
    cfg = nlohmann::json::parse(config_text, nullptr, false);
    if (cfg.is_discarded()) throw ConfigError(config_path.string() + ": not valid JSON");
  }
  auto impl = std::make_unique<TokenizerImpl>();
  impl->path = file;
  impl->hash = Fnv1a().field(text).field(config_text).hex();
  try {
    refuse_settings(j, file);
    impl->model = std::make_unique<Bpe>(j.at("model"), file);
    impl->normalizer = make_normalizer(j.at("normalizer"), file);
    impl->pre = make_pre_tokenizer(j.at("pre_tokenizer"), file);
    impl->post = make_post_processor(j.at("post_processor"), file);
    impl->decoder = make_decoder(j.at("decoder"), file);
    if (!j.at("normalizer").is_null()) impl->normalizer_name = j.at("normalizer").value("type", "");
    if (!j.at("pre_tokenizer").is_null()) impl->pre_name = j.at("pre_tokenizer").value("type", "");
    impl->id_bound = impl->model->id_bound();
    impl->added.reserve(j.at("added_tokens").size());
    for (const auto& a : j.at("added_tokens")) {
      AddedToken t;
      t.content = a.at("content").get<std::string>();
      t.id = a.at("id").get<uint32_t>();
      t.special = a.value("special", false);
      t.single_word = a.value("single_word", false);
      t.lstrip = a.value("lstrip", false);
      t.rstrip = a.value("rstrip", false);
      t.normalized = a.value("normalized", !t.special);
      t.pattern = t.content;
      if (t.normalized && impl->normalizer) {
        bool at_origin = true;
        impl->normalizer->apply(t.pattern, &at_origin);
      }
      impl->added.push_back(std::move(t));
    }
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(file + ": unexpected structure (" + std::string(e.what()) + ")");
  }
  for (const AddedToken& t : impl->added) {
    if (t.content.empty()) continue;
    (t.normalized ? impl->normalized : impl->raw).add(&t);
    impl->added_by_id[t.id] = &t;
    impl->added_by_content[t.content] = t.id;
    if (t.special) impl->special.insert(t.content);
    impl->id_bound = std::max<size_t>(impl->id_bound, t.id + 1);
  }
  if (cfg.is_object() && cfg.contains("chat_template")) {
    const auto& ct = cfg.at("chat_template");
    if (ct.is_string()) impl->chat_template = ct.get<std::string>();
    if (ct.is_array()) {  // [{"name": "default", "template": ...}, ...]
      for (const auto& named : ct) {
        if (named.value("name", "") == "default") impl->chat_template = named.value("template", "");
      }
    }
  }
  Tokenizer tok(std::move(impl));
  auto& im = *tok.impl_;
  if (auto b = config_token(cfg, "bos_token")) im.bos = tok.token_id(*b);
  if (!im.bos && !im.post.before.empty()) im.bos = im.post.before.front();
  if (auto e = config_token(cfg, "eos_token")) im.eos = tok.token_id(*e);
  for (const char* name : {"<|endoftext|>", "</s>", "<|end_of_text|>"}) {
    if (!im.eos) im.eos = tok.token_id(name);
  }
  return tok;
}

void Tokenizer::encode_into(std::string_view text, bool add_special, std::vector<uint32_t>& out) const {
  const TokenizerImpl& im = *impl_;
  if (add_special) out.insert(out.end(), im.post.before.begin(), im.post.before.end());
  thread_local std::vector<AddedMatcher::Split> first, second;
  thread_local std::vector<Piece> pieces;
  thread_local std::string normalized;
  im.raw.find(text, first);
  for (const auto& s : first) {
    if (s.token) {
      out.push_back(s.token->id);
      continue;
    }
    normalized.assign(text.substr(s.b, s.e - s.b));
    bool at_origin = s.b == 0;
    if (im.normalizer) im.normalizer->apply(normalized, &at_origin);
    if (normalized.empty()) continue;
    im.normalized.find(normalized, second);
    for (const auto& n : second) {
      if (n.token) {
        out.push_back(n.token->id);
        continue;
      }
      if (n.e == n.b) continue;
      pieces.clear();
      pieces.push_back({normalized.substr(n.b, n.e - n.b), at_origin && n.b == 0});
      if (im.pre) im.pre->apply(pieces);
      for (const Piece& p : pieces) im.model->tokenize(p.text, out);
    }
  }
  if (add_special) out.insert(out.end(), im.post.after.begin(), im.post.after.end());
}

std::vector<uint32_t> Tokenizer::encode(std::string_view text, bool add_special) const {
  std::vector<uint32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  encode_into(text, add_special, ids);
  return ids;
}

std::string Tokenizer::decode(const std::vector<uint32_t>& ids, bool skip_special) const {
  const TokenizerImpl& im = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (uint32_t id : ids) {
    const std::string* tok = nullptr;
    const auto added = im.added_by_id.find(id);
    if (added != im.added_by_id.end()) {
      tok = added->second->normalized && im.normalizer ? &added->second->pattern : &added->second->content;
    } else {
      tok = im.model->token_of(id);
    }
    if (!tok) {
      throw ConfigError("token id " + std::to_string(id) + " is not in the tokenizer's vocabulary (" + im.path +
                        ": ids 0.." + std::to_string(im.id_bound - 1) + ")");
    }
    if (skip_special && im.special.count(*tok)) continue;
    tokens.push_back(*tok);
  }
  if (!im.decoder) {
    std::string joined;
    for (size_t i = 0; i < tokens.size(); ++i) joined += (i ? " " : "") + tokens[i];
    return joined;
  }
  im.decoder->apply(tokens);
  std::string joined;
  for (const auto& t : tokens) joined += t;
  return joined;
}

size_t Tokenizer::vocab_size() const {
  return impl_->id_bound;
}
std::optional<uint32_t> Tokenizer::bos_id() const {
  return impl_->bos;
}
std::optional<uint32_t> Tokenizer::eos_id() const {
  return impl_->eos;
}

std::optional<uint32_t> Tokenizer::token_id(std::string_view token) const {
  const auto it = impl_->added_by_content.find(std::string(token));
  if (it != impl_->added_by_content.end()) return it->second;
  return impl_->model->id_of(token);
}

std::string Tokenizer::token(uint32_t id) const {
  const auto added = impl_->added_by_id.find(id);
  if (added != impl_->added_by_id.end()) return added->second->content;
  const std::string* t = impl_->model->token_of(id);
  return t ? *t : std::string();
}

const std::string& Tokenizer::chat_template() const {
  return impl_->chat_template;
}
const std::string& Tokenizer::hash() const {
  return impl_->hash;
}
const std::string& Tokenizer::path() const {
  return impl_->path;
}

std::string Tokenizer::describe() const {
  const TokenizerImpl& im = *impl_;
  std::string s = "BPE";
  if (im.model->byte_fallback()) s += " with byte fallback";
  s += ", " + std::to_string(im.id_bound) + " ids";
  if (!im.normalizer_name.empty()) s += ", normalizer " + im.normalizer_name;
  if (!im.pre_name.empty()) s += ", pre-tokenizer " + im.pre_name;
  s += ", " + std::to_string(im.added.size()) + " added tokens";
  return s;
}

}  // namespace gtrain::text
