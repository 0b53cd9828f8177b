// decoders.cpp: decoders (ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence) and
// post-processors (ByteLevel, TemplateProcessing, Sequence).
#include "runtime/core/text/decoders.h"

#include <nlohmann/json.hpp>

#include "runtime/core/errors.h"
#include "runtime/core/text/pipeline.h"
#include "runtime/core/text/regex.h"
#include "runtime/core/text/unicode.h"

namespace gtrain::text {
namespace {

constexpr const char* kDecoders = "ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence";
constexpr const char* kReplacement = "\xEF\xBF\xBD";

struct ByteLevelDecoder : Decoder {
  void apply(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      const size_t start = bytes.size();
      bool mapped = true;
      for (size_t i = 0; i < t.size();) {
        size_t len = 1;
        const int b = char_byte(decode_at(t, i, &len));
        i += len;
        if (b < 0) {
          mapped = false;
          break;
        }
        bytes += static_cast<char>(b);
      }
      if (!mapped) bytes.replace(start, std::string::npos, t);  // a token with other characters: as is
    }
    tokens.assign(1, utf8_lossy(bytes));
  }
};

struct MetaspaceDecoder : Decoder {
  std::string replacement;
  bool prepend = true;  // prepend_scheme is not "never": the first token's replacements go
  void apply(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (size_t at = 0; at < t.size();) {
        if (t.compare(at, replacement.size(), replacement) == 0) {
          if (!(i == 0 && prepend)) out += ' ';
          at += replacement.size();
        } else {
          out += t[at++];
        }
      }
      tokens[i].swap(out);
    }
  }
};

struct ReplaceDecoder : Decoder {
  Regex re;
  std::string content;
  ReplaceDecoder(Regex r, std::string c) : re(std::move(r)), content(std::move(c)) {}
  void apply(std::vector<std::string>& tokens) const override {
    std::vector<std::pair<size_t, size_t>> m;
    for (std::string& t : tokens) {
      re.find_all(t, m);
      if (m.empty()) continue;
      std::string out;
      size_t prev = 0;
      for (const auto& [b, e] : m) {
        out.append(t, prev, b - prev);
        out += content;
        prev = e;
      }
      out.append(t, prev, std::string::npos);
      t.swap(out);
    }
  }
};

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

struct ByteFallbackDecoder : Decoder {
  void apply(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    auto flush = [&] {
      if (bytes.empty()) return;
      if (valid_utf8_prefix(bytes) == bytes.size()) {
        out.push_back(bytes);
      } else {
        for (size_t k = 0; k < bytes.size(); ++k) out.emplace_back(kReplacement);
      }
      bytes.clear();
    };
    for (std::string& t : tokens) {
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && hex_digit(t[3]) >= 0 && hex_digit(t[4]) >= 0) {
        bytes += static_cast<char>(hex_digit(t[3]) * 16 + hex_digit(t[4]));
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    tokens.swap(out);
  }
};

struct FuseDecoder : Decoder {
  void apply(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const auto& t : tokens) all += t;
    tokens.assign(1, all);
  }
};

struct StripDecoder : Decoder {
  char32_t content = ' ';
  size_t start = 0, stop = 0;
  void apply(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::vector<std::pair<size_t, char32_t>> chars;  // byte offset, character
      for (size_t i = 0; i < t.size();) {
        size_t len = 1;
        chars.emplace_back(i, decode_at(t, i, &len));
        i += len;
      }
      size_t cut_start = 0, cut_stop = chars.size();
      for (size_t i = 0; i < std::min(start, chars.size()) && chars[i].second == content; ++i) cut_start = i + 1;
      for (size_t i = 0; i < std::min(stop, chars.size()) && chars[chars.size() - i - 1].second == content; ++i) {
        cut_stop = chars.size() - i - 1;
      }
      if (cut_stop <= cut_start) {
        t.clear();
        continue;
      }
      const size_t b = chars[cut_start].first, e = cut_stop < chars.size() ? chars[cut_stop].first : t.size();
      t = t.substr(b, e - b);
    }
  }
};

struct DecoderSequence : Decoder {
  std::vector<std::unique_ptr<Decoder>> steps;
  void apply(std::vector<std::string>& tokens) const override {
    for (const auto& s : steps) s->apply(tokens);
  }
};

std::string type_of(const nlohmann::json& j, const std::string& where, const char* what) {
  if (!j.is_object() || !j.contains("type")) throw ConfigError(where + ": " + what + " without a \"type\"");
  return j.at("type").get<std::string>();
}

void add_template(const nlohmann::json& j, const std::string& where, PostProcessor& pp) {
  const auto& special = j.at("special_tokens");
  bool seen_sequence = false;
  for (const auto& piece : j.at("single")) {
    if (piece.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    const std::string name = piece.at("SpecialToken").at("id").get<std::string>();
    if (!special.contains(name))
      throw ConfigError(where + ": TemplateProcessing names \"" + name + "\", not in its special_tokens");
    for (const auto& id : special.at(name).at("ids"))
      (seen_sequence ? pp.after : pp.before).push_back(id.get<uint32_t>());
  }
}

}  // namespace

std::unique_ptr<Decoder> make_decoder(const nlohmann::json& j, const std::string& where) {
  if (j.is_null()) return nullptr;
  const std::string type = type_of(j, where, "decoder");
  const std::string at = where + ": decoder " + type;
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace") {
    auto d = std::make_unique<MetaspaceDecoder>();
    d->replacement = j.value("replacement", std::string("\xE2\x96\x81"));
    std::string scheme = j.value("prepend_scheme", std::string());
    if (scheme.empty()) scheme = j.value("add_prefix_space", true) ? "always" : "never";
    d->prepend = scheme != "never";
    return d;
  }
  if (type == "Replace")
    return std::make_unique<ReplaceDecoder>(make_pattern(j.at("pattern"), at), j.at("content").get<std::string>());
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") {
    auto d = std::make_unique<StripDecoder>();
    const std::string c = j.at("content").get<std::string>();
    size_t len = 0;
    if (c.empty() || utf8_len(static_cast<unsigned char>(c[0])) != c.size())
      throw ConfigError(at + ": content must be one character");
    d->content = decode_at(c, 0, &len);
    d->start = j.value("start", size_t{0});
    d->stop = j.value("stop", size_t{0});
    return d;
  }
  if (type == "Sequence") {
    auto d = std::make_unique<DecoderSequence>();
    for (const auto& step : j.at("decoders")) {
      if (auto s = make_decoder(step, where)) d->steps.push_back(std::move(s));
    }
    return d;
  }
  throw ConfigError(where + ": decoder \"" + type + "\" is not supported (gtrain computes " + kDecoders + ")");
}

PostProcessor make_post_processor(const nlohmann::json& j, const std::string& where) {
  PostProcessor pp;
  if (j.is_null()) return pp;
  const std::string type = type_of(j, where, "post_processor");
  if (type == "ByteLevel") return pp;
  if (type == "TemplateProcessing") {
    add_template(j, where, pp);
    return pp;
  }
  if (type == "Sequence") {
    for (const auto& step : j.at("processors")) {
      PostProcessor inner = make_post_processor(step, where);  // wraps what the steps before it made
      inner.before.insert(inner.before.end(), pp.before.begin(), pp.before.end());
      pp.after.insert(pp.after.end(), inner.after.begin(), inner.after.end());
      pp.before = std::move(inner.before);
    }
    return pp;
  }
  throw ConfigError(where + ": post_processor \"" + type +
                    "\" is not supported (gtrain computes ByteLevel, TemplateProcessing, Sequence)");
}

}  // namespace gtrain::text
