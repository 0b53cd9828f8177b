// prepare.h: gtrain prepare's work: text and JSONL inputs (plain, gzip or zstd) tokenized on every
// core into llm.c token shards and a manifest, streaming in bounded memory, the same bytes whatever
// the thread count, written to a folder beside the output and renamed into place when complete.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/core/text/encoder.h"
#include "runtime/core/text/prepare_manifest.h"

namespace gtrain::text {

constexpr int64_t kDefaultShardTokens = 100'000'000;  // llm.c's shard size

struct PrepareOptions {
  std::vector<std::string> inputs;  // files, in order
  std::string out;                  // the folder the shards and manifest end up in
  PrepareRecipe recipe;
  int jobs = 0;                         // tokenizing threads (0 = every core)
  bool progress = true;                 // the progress line on stderr
  std::string what = "gtrain prepare";  // names the work in the console lines
  std::vector<PreparedInput> hashed;    // the inputs' hashes when the caller has them (else computed)
  bool warn = true;                     // conversations: say on stderr, once each, that tools / bad lines were left out
  std::string template_key = "--chat-template";  // what errors about the chat template name
};

struct PrepareResult {
  PrepareManifest manifest;
  bool up_to_date = false;  // the output already held this preparation: nothing was done
  double seconds = 0;
  double peak_rss = 0;      // bytes
  uint64_t text_bytes = 0;  // the documents' text tokenized (decompressed, without JSON around it)
};

// Each input's format (recipe.format, else by its name), size and CRC-32C, in order.
std::vector<PreparedInput> hash_inputs(const std::vector<std::string>& paths, const std::string& format);

// Prepares o.inputs into o.out with `enc`, or does nothing when o.out's manifest has the same key.
// Bad input (an unreadable file, invalid UTF-8, a line that is not JSON or lacks the key) is a
// DataError naming the file and line; nothing is left behind then. Conversations
// (recipe.conversations(), a Hugging Face tokenizer): each line one document written with the chat
// template (its family resolved into the recipe first), and beside each shard a mask and per split a
// document index (prepare_manifest.h); a bad line is skipped and counted with on_bad_line = "skip".
PrepareResult prepare(const PrepareOptions& o, const Encoder& enc);

// Whether document `index` goes to the eval shards: every 1/fraction-th document, spread evenly.
bool eval_document(int64_t index, double fraction);

}  // namespace gtrain::text
