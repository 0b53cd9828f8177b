// sample_command.h: `gtrain sample PATH`: text from a trained model (a run, a checkpoint, or a
// Hugging Face model directory), on one device with a key/value cache, for looking at what it learnt.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace gtrain {

struct SampleOptions {
  std::string path;           // run / checkpoints / checkpoint directory, or a Hugging Face model directory
  std::string prompt_ids;     // "1,2,3": the prompt as token ids
  std::string prompt_text;    // the prompt as text (through the run's tokenizer, or bytes for text_bytes)
  std::string tokenizer;      // a tokenizer.json or model directory ("" = the run's or the model directory's)
  int64_t tokens = 32;        // tokens to generate
  double temperature = 1.0;   // 0 = greedy (the most likely token each time)
  int64_t top_k = 0;          // sample among the k most likely tokens (0 = all)
  uint64_t seed = 0;          // the sampling random stream
  bool json = false;          // one JSON object (prompt, tokens, text) instead of plain lines
  std::string chat;           // --chat: a user turn rendered with the chat template, its reply printed
  std::string system;         // --system: the conversation's system turn ("" = none; with --chat)
  std::string chat_template;  // --chat-template: llama3 | chatml | qwen3 | plain ("" = the run's / tokenizer's)
};

// Prints the generated token ids (and the text, when the model has a tokenizer or reads bytes); with
// --chat only the assistant's reply, generation stopping at the template's end-of-turn token. 0 on
// success. Errors are ConfigError / CheckpointError naming the flag or the file.
int sample_command(const SampleOptions& o);

// Token ids of "1, 2,3" (ConfigError naming --prompt-ids and the bad item).
std::vector<int64_t> parse_prompt_ids(const std::string& text);

}  // namespace gtrain
