// prepare_command.h: `gtrain prepare INPUT... --tokenizer PATH --out DIR`: text and JSONL files
// into llm.c token shards and a manifest (runtime/core/text/prepare.h), torch-free.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace gtrain {

struct PrepareCommandOptions {
  std::vector<std::string> inputs;
  std::string tokenizer;  // a tokenizer.json, the model folder holding it, or "bytes"
  std::string out;
  std::string text_key = "text";
  double eval_fraction = 0;
  bool append_eos = false;
  bool split_lines = false;
  int jobs = 0;              // 0 = every core
  int64_t shard_tokens = 0;  // 0 = 100M ids a shard
  std::string format;  // "" = by each input's name, "text" or "jsonl"; "chat" / "prompt_completion": conversations
  std::string messages_key = "messages";      // chat: the key of each line's messages
  std::string prompt_key = "prompt";          // prompt_completion: the prompt's key
  std::string completion_key = "completion";  // prompt_completion: the completion's key
  std::string chat_template;                  // llama3 | chatml | qwen3 | plain ("" = the tokenizer's)
  std::string train_on = "assistant";         // assistant | all | last_assistant
  std::string on_bad_line = "error";          // error | skip
  bool quiet = false;
};

// Prepares, or says the output is up to date; lines to `out`, the progress line to stderr.
// Bad input throws (DataError, ConfigError: exit 2), leaving nothing behind.
int run_prepare_command(const PrepareCommandOptions& o, std::ostream& out);

}  // namespace gtrain
