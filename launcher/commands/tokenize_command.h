// tokenize_command.h: `gtrain tokenize TOKENIZER` encodes text to ids (or decodes ids to text) with
// a Hugging Face tokenizer.json, exactly as the tokenizers library does (torch-free).
#pragma once

#include <string>

namespace gtrain {

struct TokenizeOptions {
  std::string tokenizer;      // a tokenizer.json, or a model directory holding one
  std::string text;           // --text: the one text to encode
  bool has_text = false;      // --text was given (an empty text is a text)
  std::string file;           // --file: the whole file is one text (or one a line, below)
  bool each_line = false;     // --each-line: every line of --file is a text (without its line end)
  bool each_json = false;     // --each-json-line: every line of --file is a JSON string
  bool json = false;          // --json: JSON arrays of ids (decode: JSON strings)
  bool no_special = false;    // --no-special: no BOS / EOS from the post-processor
  std::string decode;         // --decode: ids to decode ("1 2 3", "1,2,3" or a JSON array)
  std::string decode_file;    // --decode-file: a line of ids per text
  bool skip_special = false;  // --skip-special: decoding leaves special tokens out
  bool tokens = false;        // --tokens: print the token strings beside the ids
  int jobs = 0;               // --jobs: threads encoding the texts (0 = every core)
};

// Runs it; ConfigError (exit 2) for an unreadable file, invalid UTF-8 (file:line: byte N), an
// unsupported tokenizer component or an id outside the vocabulary.
int run_tokenize_command(const TokenizeOptions& o);

}  // namespace gtrain
