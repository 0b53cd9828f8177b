// tokenize_command.cpp: gtrain tokenize: texts from --text or a file (whole, per line, or per
// JSON-string line) to ids, and ids back to text; what the differential tests against Hugging
// Face's tokenizers call.
#include "launcher/commands/tokenize_command.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

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

namespace {

// The printed line of one text's ids.
void format_ids(const text::Tokenizer& tok, const std::vector<uint32_t>& ids, const TokenizeOptions& o,
                std::string& out) {
  if (o.json) out += '[';
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += o.json ? ',' : ' ';
    out += std::to_string(ids[i]);
    if (o.tokens && !o.json) out += "(" + nlohmann::json(tok.token(ids[i])).dump() + ")";
  }
  out += o.json ? "]\n" : "\n";
}

}  // namespace

int run_tokenize_command(const TokenizeOptions& o) {
  const text::Tokenizer tok = text::Tokenizer::load(o.tokenizer);
  if (!o.decode.empty() || !o.decode_file.empty()) return decode(tok, o);
  const auto texts = texts_of(o);
  for (const auto& [t, where] : texts) check_utf8(t, where);
  // Texts in contiguous blocks, one a thread; printed in order.
  const size_t cores = std::max(1u, std::thread::hardware_concurrency());
  const size_t jobs = std::min(texts.size(), o.jobs > 0 ? static_cast<size_t>(o.jobs) : cores);
  std::vector<std::string> outs(std::max<size_t>(jobs, 1));
  auto work = [&](size_t j) {
    std::vector<uint32_t> ids;
    for (size_t i = texts.size() * j / jobs; i < texts.size() * (j + 1) / jobs; ++i) {
      ids.clear();
      tok.encode_into(texts[i].first, !o.no_special, ids);
      format_ids(tok, ids, o, outs[j]);
    }
  };
  std::vector<std::thread> threads;
  for (size_t j = 1; j < jobs; ++j) threads.emplace_back(work, j);
  if (jobs > 0) work(0);
  for (auto& t : threads) t.join();
  for (const auto& out : outs) std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace gtrain
