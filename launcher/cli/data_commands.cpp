// data_commands.cpp: the data subcommands' flags and runs: tokenize.
#include <CLI/CLI.hpp>

#include <memory>

#include "launcher/cli/commands.h"
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
  c.app->add_option("--jobs", o->jobs, "Threads encoding the texts (0 = every core); the output is in order")
      ->check(CLI::Range(0, 1024));
  c.app->add_option("--decode", o->decode, "Decode these ids (\"1 2 3\", \"1,2,3\" or a JSON array)");
  c.app->add_option("--decode-file", o->decode_file, "Decode every line of ids in this file");
  c.app->add_flag("--skip-special", o->skip_special, "Decoding leaves special tokens out (skip_special_tokens=True)");
  c.run = [o] { return run_tokenize_command(*o); };
  return c;
}

}  // namespace gtrain
