// tokenize_command.cpp: gtrain tokenize: texts from --text or a file (whole, per line, or per
// JSON-string line) to ids, and ids back to text; what the differential tests against Hugging
// Face's tokenizers call.
#include "launcher/commands/tokenize_command.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "runtime/core/errors.h"
#include "runtime/core/text/tokenizer.h"

namespace gtrain {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ConfigError(path + ": cannot read (--file)");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void check_utf8(const std::string& text, const std::string& where) {
  if (auto bad = text::utf8_error(text)) {
    throw ConfigError(where + ": invalid UTF-8 at byte " + std::to_string(*bad),
                      "gtrain tokenizes UTF-8 text only; convert the file (iconv) or remove the bytes");
  }
}

// The texts to encode, each with where it came from (for errors).
std::vector<std::pair<std::string, std::string>> texts_of(const TokenizeOptions& o) {
  std::vector<std::pair<std::string, std::string>> texts;
  if (o.has_text) {
    texts.emplace_back(o.text, "--text");
    return texts;
  }
  if (o.file.empty()) throw ConfigError("gtrain tokenize: give --text, --file, --decode or --decode-file");
  const std::string all = read_all(o.file);
  if (!o.each_line && !o.each_json) {
    texts.emplace_back(all, o.file);
    return texts;
  }
  size_t line = 0;
  for (size_t at = 0; at < all.size();) {
    size_t end = all.find('\n', at);
    if (end == std::string::npos) end = all.size();
    ++line;
    const std::string where = o.file + ":" + std::to_string(line);
    std::string t = all.substr(at, end - at);
    at = end + 1;
    if (o.each_json) {
      try {
        const auto j = nlohmann::json::parse(t);
        if (!j.is_string()) throw ConfigError(where + ": expected a JSON string (--each-json-line)");
        t = j.get<std::string>();
      } catch (const nlohmann::json::exception& e) {
        throw ConfigError(where + ": not a JSON string (--each-json-line): " + std::string(e.what()));
      }
    }
    texts.emplace_back(std::move(t), where);
  }
  return texts;
}

std::vector<uint32_t> parse_ids(const std::string& s, const std::string& where) {
  std::vector<uint32_t> ids;
  std::string t = s;
  for (char& c : t) {
    if (c == ',' || c == '[' || c == ']') c = ' ';
  }
  std::istringstream in(t);
  std::string word;
  while (in >> word) {
    size_t used = 0;
    unsigned long v = 0;
    try {
      v = std::stoul(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != word.size() || v > 0xFFFFFFFFul) throw ConfigError(where + ": '" + word + "' is not a token id");
    ids.push_back(static_cast<uint32_t>(v));
  }
  return ids;
}

int decode(const text::Tokenizer& tok, const TokenizeOptions& o) {
  std::vector<std::pair<std::string, std::string>> lines;
  if (!o.decode_file.empty()) {
    std::istringstream in(read_all(o.decode_file));
    std::string line;
    for (size_t n = 1; std::getline(in, line); ++n) lines.emplace_back(line, o.decode_file + ":" + std::to_string(n));
  } else {
    lines.emplace_back(o.decode, "--decode");
  }
  std::string out;
  for (const auto& [ids, where] : lines) {
    const std::string text = tok.decode(parse_ids(ids, where), o.skip_special);
    out += o.json ? nlohmann::json(text).dump() : text;
    out += '\n';
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace

int run_tokenize_command(const TokenizeOptions& o) {
  const text::Tokenizer tok = text::Tokenizer::load(o.tokenizer);
  if (!o.decode.empty() || !o.decode_file.empty()) return decode(tok, o);
  const auto texts = texts_of(o);
  std::string out;
  std::vector<uint32_t> ids;
  for (const auto& [t, where] : texts) check_utf8(t, where);
  for (const auto& [t, where] : texts) {
    ids.clear();
    tok.encode_into(t, !o.no_special, ids);
    if (o.json) {
      out += '[';
      for (size_t i = 0; i < ids.size(); ++i) out += (i ? "," : "") + std::to_string(ids[i]);
      out += "]\n";
    } else {
      for (size_t i = 0; i < ids.size(); ++i) {
        out += (i ? " " : "") + std::to_string(ids[i]);
        if (o.tokens) out += "(" + nlohmann::json(tok.token(ids[i])).dump() + ")";
      }
      out += '\n';
    }
    if (out.size() > (1u << 20)) std::fwrite(out.data(), 1, out.size(), stdout), out.clear();
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace gtrain
