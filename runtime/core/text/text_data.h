// text_data.h: data.kind = "text" / "jsonl": the sources tokenized once (gtrain prepare's pipeline)
// into a cache folder named by the key of the tokenizer's and the sources' hashes, where later
// stages and other runs find them; the ranks then read the shards as token files.
#pragma once

#include <iosfwd>
#include <map>
#include <string>

#include "runtime/core/config/job_config.h"
#include "runtime/core/text/prepare_manifest.h"
#include "runtime/core/text/sft_data.h"

namespace gtrain::text {

// The folder the launching gtrain found or prepared, for the ranks it starts (they skip the lookup).
constexpr const char* kEnvTextData = "GTRAIN_INTERNAL_TEXT_DATA";
// Seconds the launching gtrain spent on it (hashing, preparing, checking): the ledger records them.
constexpr const char* kEnvPrepareSeconds = "GTRAIN_INTERNAL_PREPARE_S";
// data.format = "chat" / "prompt_completion": the counts (data_counts_json) as JSON, for the ledger.
constexpr const char* kEnvDataCounts = "GTRAIN_INTERNAL_DATA_COUNTS";

struct TextData {
  std::string dir;  // the cache folder: shards and prepare_manifest.json
  PrepareManifest manifest;
  bool prepared = false;  // this call tokenized the sources (else found them prepared)
  double seconds = 0;     // what finding or preparing them took
  // Conversations: what the train split's rows keep and leave out at model.seq_len (the ledger's
  // "data" record, data_counts_json); null when the data is not conversations.
  nlohmann::json counts;
};

// The counts of a conversations' train split, with the preparation's skipped lines and ignored
// tools: {"documents", "kept", "truncated", "dropped_overlong", "dropped_untrainable",
// "bad_lines_skipped", "tools_ignored", "rows", "trained_tokens", "padding_fraction"}.
nlohmann::json data_counts_json(const SftCounts& c, const PrepareManifest& m);
// Them in words: "5000 conversations: 4990 kept (12 truncated), ..." (the start-up line, gtrain status).
std::string data_counts_line(const nlohmann::json& counts);

// data.tokenizer, else checkpoint.init_from's folder (or the folder of the file it names) when it
// holds a tokenizer.json; a ConfigError when neither gives one.
std::string text_tokenizer(const JobConfig& cfg);
// data.cache_dir, else RUN_DIR/data_cache.
std::string text_cache_root(const JobConfig& cfg, const std::string& run_dir);

// The launcher's side: hashes the sources (data.path), then finds the folder of their key under the
// cache root, checking every shard's CRC-32C (a damaged one is refused by name), or prepares it on
// every core (documents of data.eval_fraction into eval shards, the tokenizer's EOS after each). A
// tokenizer with more ids than model.vocab is a ConfigError naming both. Lines to `log` (null: none).
// data.format = "chat" / "prompt_completion": the recipe of data.messages_key ... data.on_bad_line
// (the template resolved), and the train split opened at model.seq_len for its counts (a line to `log`).
TextData ensure_text_data(const JobConfig& cfg, const std::string& run_dir, std::ostream* log);

// A rank's side: the folder the launching gtrain handed over (kEnvTextData), else (none handed
// over, or not on this host's disks) ensure_text_data.
TextData text_data_for_rank(const JobConfig& cfg, const std::string& run_dir,
                            const std::map<std::string, std::string>& env);

}  // namespace gtrain::text
