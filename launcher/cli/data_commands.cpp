// data_commands.cpp: the data subcommands' flags and runs: tokenize, prepare.
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "launcher/cli/commands.h"
#include "launcher/commands/prepare_command.h"
#include "launcher/commands/tokenize_command.h"

namespace gtrain {

Command add_tokenize(CLI::App& app) {
  auto o = std::make_shared<TokenizeOptions>();
  Command c;
  c.app = app.add_subcommand("tokenize",
                             "Encode text to token ids (or --decode ids to text) with a Hugging Face tokenizer.json, "
                             "exactly as the tokenizers library does.");
  c.app->add_option("tokenizer", o->tokenizer, "A tokenizer.json, or a model directory holding one")->required();
  c.app->add_option("--text", o->text, "The text to encode")->each([o](const std::string&) { o->has_text = true; });
  c.app->add_option("--file", o->file, "Encode this file (the whole file is one text)");
  c.app->add_flag("--each-line", o->each_line, "With --file: every line is a text (without its line end)");
  c.app->add_flag("--each-json-line", o->each_json, "With --file: every line is a JSON string (texts with newlines)");
  c.app->add_flag("--json", o->json, "JSON arrays of ids, one a text (decode: JSON strings)");
  c.app->add_flag("--no-special", o->no_special, "No BOS / EOS from the post-processor (add_special_tokens=False)");
  c.app->add_flag("--tokens", o->tokens, "Print each id's token string beside it");
  c.app->add_flag("--chat", o->chat,
                  "With --file: every line is a conversation {\"messages\": [...]}, printed as "
                  "{\"ids\": [...], \"train\": [...]} (1: an assistant token the loss counts)");
  c.app->add_option("--chat-template", o->chat_template,
                    "llama3 | chatml | qwen3 | plain (default: the one tokenizer_config.json carries)");
  c.app->add_option("--jobs", o->jobs, "Threads encoding the texts (0 = every core); the output is in order")
      ->check(CLI::Range(0, 1024));
  c.app->add_option("--decode", o->decode, "Decode these ids (\"1 2 3\", \"1,2,3\" or a JSON array)");
  c.app->add_option("--decode-file", o->decode_file, "Decode every line of ids in this file");
  c.app->add_flag("--skip-special", o->skip_special, "Decoding leaves special tokens out (skip_special_tokens=True)");
  c.run = [o] { return run_tokenize_command(*o); };
  return c;
}

Command add_prepare(CLI::App& app) {
  auto o = std::make_shared<PrepareCommandOptions>();
  Command c;
  auto* cmd = c.app = app.add_subcommand(
      "prepare",
      "Tokenize text and JSONL files (plain, .gz, .zst) into llm.c token shards and a manifest, on every core.");
  cmd->add_option("inputs", o->inputs, "Text or JSONL files (.jsonl/.ndjson/.json by name; .gz and .zst read too)")
      ->required();
  cmd->add_option("--tokenizer", o->tokenizer,
                  "A Hugging Face tokenizer.json, the model folder holding it, or \"bytes\" (each byte an id)")
      ->required();
  cmd->add_option("--out", o->out, "Output folder (written beside it, then renamed into place)")->required();
  cmd->add_option("--text-key", o->text_key, "JSONL: the key holding each line's text")->capture_default_str();
  cmd->add_option("--eval-fraction", o->eval_fraction, "Documents held out into eval shards (every 1/F-th)")
      ->check(CLI::Range(0.0, 0.5))
      ->capture_default_str();
  cmd->add_flag("--append-eos", o->append_eos, "The tokenizer's EOS id after each document");
  cmd->add_flag("--split-lines", o->split_lines, "Text files: one document a line (default: one a file)");
  cmd->add_option("--format", o->format,
                  "Read every input as text or jsonl (default: by its name); chat or prompt_completion: JSONL "
                  "conversations written with the chat template, with the mask of the ids trained on")
      ->check(CLI::IsMember({"text", "jsonl", "chat", "prompt_completion"}));
  cmd->add_option("--messages-key", o->messages_key, "chat: the key holding each line's messages")
      ->capture_default_str();
  cmd->add_option("--prompt-key", o->prompt_key, "prompt_completion: the key holding the prompt")
      ->capture_default_str();
  cmd->add_option("--completion-key", o->completion_key, "prompt_completion: the key holding the completion")
      ->capture_default_str();
  cmd->add_option("--chat-template", o->chat_template,
                  "llama3 | chatml | qwen3 | plain (default: the one tokenizer_config.json carries)")
      ->check(CLI::IsMember({"llama3", "chatml", "qwen3", "plain"}));
  cmd->add_option("--train-on", o->train_on, "chat, prompt_completion: the ids the loss counts")
      ->check(CLI::IsMember({"assistant", "all", "last_assistant"}))
      ->capture_default_str();
  cmd->add_option("--on-bad-line", o->on_bad_line,
                  "chat, prompt_completion: stop at a line that is not a conversation, or skip and count it")
      ->check(CLI::IsMember({"error", "skip"}))
      ->capture_default_str();
  cmd->add_option("--jobs", o->jobs, "Tokenizing threads (default: every core)")->check(CLI::Range(1, 1024));
  cmd->add_option("--shard-tokens", o->shard_tokens, "Ids per shard at most (default 100000000)")
      ->check(CLI::Range(int64_t{1}, int64_t{2147483647}));
  cmd->add_flag("--quiet", o->quiet, "No progress line");
  c.run = [o] { return run_prepare_command(*o, std::cout); };
  return c;
}

}  // namespace gtrain
