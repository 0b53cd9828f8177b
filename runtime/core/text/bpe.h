// bpe.h: the BPE model of a tokenizer.json: vocabulary, merges by rank, byte fallback, unknown
// tokens, and the per-word result cache; one word's ids computed as Hugging Face's BPE does.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace gtrain::text {

class Bpe {
 public:
  // From tokenizer.json's "model" object; `where` names the file in errors (unknown keys' values
  // that change the result, a merge of tokens not in the vocabulary, dropout).
  Bpe(const nlohmann::json& model, const std::string& where);

  // Appends the ids of one pre-tokenized word (non-empty) to `out`.
  void tokenize(std::string_view word, std::vector<uint32_t>& out) const;

  std::optional<uint32_t> id_of(std::string_view token) const;
  const std::string* token_of(uint32_t id) const;          // null when the id is not in the vocabulary
  size_t id_bound() const { return id_to_token_.size(); }  // the largest id + 1
  bool byte_fallback() const { return byte_fallback_; }

 private:
  void merge_word(std::string_view word, std::vector<uint32_t>& out) const;

  std::deque<std::string> strings_;  // owns the vocabulary's strings; the maps view them
  std::unordered_map<std::string_view, uint32_t> vocab_;
  std::vector<const std::string*> id_to_token_;
  std::unordered_map<uint64_t, std::pair<uint32_t, uint32_t>> merges_;  // (a, b) -> (rank, merged id)
  std::optional<std::string> unk_token_;
  std::optional<uint32_t> unk_id_;
  std::string prefix_, suffix_;  // continuing_subword_prefix, end_of_word_suffix ("" = none)
  bool has_prefix_ = false, has_suffix_ = false;
  bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
  uint32_t byte_ids_[256] = {};  // <0xXX> ids for byte fallback (when byte_fallback_)
  bool byte_id_known_[256] = {};
  uint64_t cache_key_ = 0;  // tells this model's entries apart in the thread's cache
};

}  // namespace gtrain::text
