// bpe.cpp: BPE as Hugging Face's tokenizers computes it: a word's characters (with byte fallback
// or the unknown token), then merges lowest rank first, leftmost on ties, via a heap.
#include "runtime/core/text/bpe.h"

#include <atomic>
#include <cstdio>
#include <queue>

#include <nlohmann/json.hpp>

#include "runtime/core/errors.h"
#include "runtime/core/text/unicode.h"

namespace gtrain::text {
namespace {

std::atomic<uint64_t> next_cache_key{1};

std::optional<std::string> optional_string(const nlohmann::json& j, const char* key) {
  if (!j.contains(key) || j.at(key).is_null()) return std::nullopt;
  return j.at(key).get<std::string>();
}

// A word's results, per thread: the same words come back all through a corpus.
struct WordCache {
  uint64_t owner = 0;
  std::unordered_map<std::string, std::vector<uint32_t>> words;
};
constexpr size_t kCacheWords = 1 << 16;
constexpr size_t kCacheWordBytes = 256;

}  // namespace

Bpe::Bpe(const nlohmann::json& model, const std::string& where) : cache_key_(next_cache_key++) {
  const std::string type = model.value("type", std::string("BPE"));
  if (type != "BPE") {
    throw ConfigError(where + ": model type \"" + type + "\" is not supported (gtrain computes BPE only; " +
                      "WordPiece, Unigram and WordLevel are refused rather than approximated)");
  }
  if (model.contains("dropout") && !model.at("dropout").is_null() && model.at("dropout").get<double>() != 0.0) {
    throw ConfigError(where + ": model.dropout is set (BPE dropout draws at random; gtrain encodes deterministically)");
  }
  const auto& vocab = model.at("vocab");
  uint32_t bound = 0;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) bound = std::max(bound, it.value().get<uint32_t>() + 1);
  id_to_token_.assign(bound, nullptr);
  vocab_.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    strings_.push_back(it.key());
    const uint32_t id = it.value().get<uint32_t>();
    vocab_[strings_.back()] = id;
    id_to_token_[id] = &strings_.back();
  }
  unk_token_ = optional_string(model, "unk_token");
  if (unk_token_) unk_id_ = id_of(*unk_token_);
  if (auto p = optional_string(model, "continuing_subword_prefix")) prefix_ = *p, has_prefix_ = true;
  if (auto s = optional_string(model, "end_of_word_suffix")) suffix_ = *s, has_suffix_ = true;
  fuse_unk_ = model.value("fuse_unk", false);
  byte_fallback_ = model.value("byte_fallback", false);
  ignore_merges_ = model.value("ignore_merges", false);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    if (auto id = id_of(name)) byte_ids_[b] = *id, byte_id_known_[b] = true;
  }
  const auto& merges = model.at("merges");
  merges_.reserve(merges.size());
  uint32_t rank = 0;
  std::string a, b;
  for (const auto& m : merges) {
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos) throw ConfigError(where + ": merge \"" + s + "\" is not two tokens");
      a = s.substr(0, space), b = s.substr(space + 1);
    } else {
      a = m.at(0).get<std::string>(), b = m.at(1).get<std::string>();
    }
    const auto ia = id_of(a), ib = id_of(b);
    const std::string merged = a + b.substr(std::min(b.size(), has_prefix_ ? prefix_.size() : 0));
    const auto im = id_of(merged);
    if (!ia || !ib || !im) {
      throw ConfigError(where + ": merge \"" + a + " " + b + "\" names a token not in the vocabulary");
    }
    merges_[(uint64_t{*ia} << 32) | *ib] = {rank++, *im};  // a repeated pair: the later rank wins
  }
}

std::optional<uint32_t> Bpe::id_of(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* Bpe::token_of(uint32_t id) const {
  return id < id_to_token_.size() ? id_to_token_[id] : nullptr;
}

void Bpe::tokenize(std::string_view word, std::vector<uint32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto id = id_of(word)) {
      out.push_back(*id);
      return;
    }
  }
  thread_local WordCache cache;
  if (cache.owner != cache_key_) cache.words.clear(), cache.owner = cache_key_;
  if (word.size() < kCacheWordBytes) {
    const auto it = cache.words.find(std::string(word));
    if (it != cache.words.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t before = out.size();
  merge_word(word, out);
  if (word.size() < kCacheWordBytes && cache.words.size() < kCacheWords) {
    cache.words.emplace(std::string(word), std::vector<uint32_t>(out.begin() + before, out.end()));
  }
}

void Bpe::merge_word(std::string_view w, std::vector<uint32_t>& out) const {
  struct Symbol {
    uint32_t id;
    int32_t prev, next;
    bool alive;
  };
  std::vector<Symbol> sym;
  sym.reserve(w.size());
  auto add = [&](uint32_t id) {
    const auto n = static_cast<int32_t>(sym.size());
    sym.push_back({id, n - 1, -1, true});
    if (n > 0) sym[n - 1].next = n;
  };
  int64_t unk = -1;  // a pending unknown token's id (fused when fuse_unk), -1 = none
  std::string piece;
  for (size_t i = 0; i < w.size();) {
    const size_t len = utf8_len(static_cast<unsigned char>(w[i]));
    const bool first = i == 0, last = i + len >= w.size();
    std::string_view s = w.substr(i, len);
    if ((!first && has_prefix_) || (last && has_suffix_)) {
      piece.assign(!first && has_prefix_ ? prefix_ : std::string());
      piece.append(s);
      if (last && has_suffix_) piece += suffix_;
      s = piece;
    }
    i += len;
    if (auto id = id_of(s)) {
      if (unk >= 0) add(static_cast<uint32_t>(unk)), unk = -1;
      add(*id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char b : s) all = all && byte_id_known_[b];
      if (all) {
        for (unsigned char b : s) add(byte_ids_[b]);
        continue;
      }
    }
    if (unk_token_) {
      if (!unk_id_) throw ConfigError("tokenizer: unk_token \"" + *unk_token_ + "\" is not in the vocabulary");
      if (unk >= 0 && !fuse_unk_) add(static_cast<uint32_t>(unk));
      if (unk < 0 || !fuse_unk_) unk = *unk_id_;
    }
  }
  if (unk >= 0) add(static_cast<uint32_t>(unk));

  struct Merge {
    uint32_t rank;
    int32_t pos;
    uint32_t id;
    bool operator<(const Merge& o) const {  // the heap's top: lowest rank, then leftmost
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  auto lookup = [&](uint32_t a, uint32_t b) { return merges_.find((uint64_t{a} << 32) | b); };
  std::priority_queue<Merge> queue;
  for (size_t k = 0; k + 1 < sym.size(); ++k) {
    const auto it = lookup(sym[k].id, sym[k + 1].id);
    if (it != merges_.end()) queue.push({it->second.first, static_cast<int32_t>(k), it->second.second});
  }
  while (!queue.empty()) {
    const Merge top = queue.top();
    queue.pop();
    Symbol& cur = sym[top.pos];
    if (!cur.alive || cur.next < 0) continue;
    Symbol& right = sym[cur.next];
    const auto now = lookup(cur.id, right.id);
    if (now == merges_.end() || now->second.second != top.id) continue;  // an expired entry
    cur.id = top.id;
    right.alive = false;
    cur.next = right.next;
    if (right.next >= 0) sym[right.next].prev = top.pos;
    if (cur.prev >= 0) {
      const auto it = lookup(sym[cur.prev].id, cur.id);
      if (it != merges_.end()) queue.push({it->second.first, cur.prev, it->second.second});
    }
    if (cur.next >= 0) {
      const auto it = lookup(cur.id, sym[cur.next].id);
      if (it != merges_.end()) queue.push({it->second.first, top.pos, it->second.second});
    }
  }
  for (const Symbol& s : sym) {
    if (s.alive) out.push_back(s.id);
  }
}

}  // namespace gtrain::text
