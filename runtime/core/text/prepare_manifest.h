// prepare_manifest.h: PrepareManifest, prepare_manifest.json in a folder gtrain prepare wrote: how
// it was made (tokenizer, options, every input's size and hash), what it holds (documents, tokens,
// shards and their CRC-32C), and the key those facts give, which names a data cache's folder.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gtrain::text {

constexpr const char* kPrepareManifestFile = "prepare_manifest.json";

// What decides the tokens besides the inputs' bytes and the tokenizer.
struct PrepareRecipe {
  std::string format = "";        // "" = each input by its name (.jsonl: JSONL), else "text" or "jsonl" for all
  std::string text_key = "text";  // JSONL: the key holding a document's text
  bool split_lines = false;       // text: one document a line instead of a file
  bool append_eos = false;        // the tokenizer's EOS id after each document
  double eval_fraction = 0;       // documents held out into eval shards
  int64_t shard_tokens = 0;       // ids per shard at most
  // Conversations (data.format): "text" = documents of text; "chat" / "prompt_completion" = one a
  // JSONL line, written with a chat template, each id with a trained-on mask.
  std::string data_format = "text";
  std::string messages_key = "messages";      // chat: the key of the messages
  std::string prompt_key = "prompt";          // prompt_completion: the prompt's key
  std::string completion_key = "completion";  // prompt_completion: the completion's key
  std::string chat_template = "";             // the family written (resolve_chat_recipe: never "" once resolved)
  std::string chat_system = "";               // chatml: the system turn its template writes when there is none
  std::string train_on = "assistant";         // assistant | all | last_assistant
  std::string on_bad_line = "error";          // error | skip
  bool conversations() const { return data_format != "text"; }
  // The conversation fields appear only for data_format != "text" (text preparations keep their keys).
  nlohmann::json to_json() const;
  static PrepareRecipe from_json(const nlohmann::json& j);
};

struct PreparedInput {
  std::string path;    // as given
  std::string format;  // "text" | "jsonl"
  uint64_t bytes = 0;  // the file's size
  std::string crc;     // CRC-32C of its bytes, 8 hex digits
};

struct PreparedShard {
  std::string file;   // name in the folder
  std::string split;  // "train" | "eval"
  int64_t tokens = 0;
  std::string crc;       // CRC-32C of the whole file
  std::string mask_crc;  // conversations: CRC-32C of mask_file(file), a byte an id (1: trained on); else ""
};

// Conversations: the mask file beside a shard (train_000000.bin -> train_000000.mask).
std::string mask_file(const std::string& shard_file);

// Conversations: a split's document index, SPLIT_docs.bin: documents + 1 little-endian uint64, the
// offsets of each document's first id in the split's ids (its shards end to end), then the total.
struct PreparedDocIndex {
  std::string file;   // "train_docs.bin" | "eval_docs.bin"
  std::string split;  // "train" | "eval"
  int64_t documents = 0;
  std::string crc;  // CRC-32C of the whole file
};

struct PrepareManifest {
  int version = 1;
  std::string key;             // prepare_key(): tokenizer, recipe and inputs' hashes
  std::string tokenizer;       // the tokenizer read (a path, or "bytes")
  std::string tokenizer_hash;  // its hash
  int64_t vocab_size = 0;      // its vocabulary
  std::string dtype;           // "uint16" | "uint32": the shards' ids
  PrepareRecipe recipe;
  std::vector<PreparedInput> inputs;
  int64_t documents = 0, tokens = 0;            // all of them
  int64_t eval_documents = 0, eval_tokens = 0;  // of which held out
  std::vector<PreparedShard> shards;
  double seconds = 0;  // how long preparing took
  // Conversations only (recipe.conversations()):
  std::vector<PreparedDocIndex> doc_indexes;  // train, eval
  int64_t eos_id = -1;                        // the tokenizer's EOS (-1 = none): the padding id
  int64_t trained_tokens = 0;                 // ids the masks train on, both splits
  int64_t bad_lines = 0;                      // lines skipped as unreadable (on_bad_line = "skip")
  int64_t tools_ignored = 0;                  // lines whose "tools" were ignored

  nlohmann::json to_json() const;
  // A DataError naming `where` for a missing or mistyped field.
  static PrepareManifest from_json(const nlohmann::json& j, const std::string& where);
  std::vector<std::string> shard_files(const std::string& split) const;  // names, in order
};

// The key of a preparation: FNV-1a 64 (hex) over the tokenizer's hash, the recipe and each
// input's format, size and CRC in order (not its path: the same bytes elsewhere are the same data).
std::string prepare_key(const std::string& tokenizer_hash, const PrepareRecipe& recipe,
                        const std::vector<PreparedInput>& inputs);

// Reads DIR/prepare_manifest.json; a DataError naming it when it is missing or malformed.
PrepareManifest read_prepare_manifest(const std::string& dir);
// Checks every shard of `m` in `dir`: present, its size, its CRC-32C. A DataError naming the first
// that differs ("DIR/train_000001.bin: CRC-32C 1234abcd, the manifest says ...").
void verify_shards(const std::string& dir, const PrepareManifest& m);

}  // namespace gtrain::text
