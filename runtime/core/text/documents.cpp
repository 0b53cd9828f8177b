// documents.cpp: documents read a line at a time, and their text checked and taken out.
#include "runtime/core/text/documents.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/core/text/tokenizer.h"

namespace gtrain::text {

namespace {
// Invalid UTF-8 in `bytes` (which start on line `line`): the error naming the line it is on and
// its byte offset in that line, as gtrain tokenize names it.
void check_utf8(const std::string& bytes, const std::string& path, int64_t line) {
  const auto bad = utf8_error(bytes);
  if (!bad) return;
  const auto at = static_cast<std::ptrdiff_t>(*bad);
  const int64_t at_line = line + std::count(bytes.begin(), bytes.begin() + at, '\n');
  const size_t line_start = *bad == 0 ? 0 : bytes.rfind('\n', *bad - 1);
  const size_t in_line = line_start == std::string::npos || *bad == 0 ? *bad : *bad - line_start - 1;
  throw DataError(str(path, ":", at_line, ": invalid UTF-8 at byte ", in_line),
                  "gtrain reads UTF-8 text only: convert the file (iconv -f LATIN1 -t UTF-8) or fix its bytes");
}
}  // namespace

InputFormat format_of(const std::string& path) {
  std::string p = path;
  for (const char* z : {".gz", ".zst"})
    if (ends_with(p, z)) p.resize(p.size() - std::strlen(z));
  for (const char* j : {".jsonl", ".ndjson", ".json"})
    if (ends_with(p, j)) return InputFormat::jsonl;
  return InputFormat::text;
}

const char* name_of(InputFormat f) {
  return f == InputFormat::jsonl ? "jsonl" : "text";
}

DocumentReader::DocumentReader(const std::string& path, uint32_t input_index, InputFormat format, bool split_lines)
    : stream_(path), input_(input_index), whole_(format == InputFormat::text && !split_lines), buf_(1 << 20) {}

bool DocumentReader::next_line(std::string& line) {
  line.clear();
  bool any = false;
  while (true) {
    if (pos_ == len_) {
      len_ = stream_.read(buf_.data(), buf_.size());
      pos_ = 0;
      if (len_ == 0) return any;
    }
    any = true;
    const char* start = buf_.data() + pos_;
    const void* nl = std::memchr(start, '\n', len_ - pos_);
    const size_t k = nl ? static_cast<size_t>(static_cast<const char*>(nl) - start) : len_ - pos_;
    line.append(start, k);
    pos_ += k;
    offset_ += k;
    if (nl) {
      ++pos_;
      ++offset_;
      return true;
    }
  }
}

bool DocumentReader::next(RawDocument& doc) {
  if (done_) return false;
  doc.input = input_;
  if (whole_) {  // the whole file, one document (an empty file: none)
    doc.bytes.clear();
    doc.line = 1;
    doc.offset = 0;
    size_t n;
    char block[1 << 16];
    while ((n = stream_.read(block, sizeof(block))) > 0) doc.bytes.append(block, n);
    done_ = true;
    return !doc.bytes.empty();
  }
  while (true) {
    const uint64_t start = offset_;
    if (!next_line(doc.bytes)) {
      done_ = true;
      return false;
    }
    ++line_;
    if (!doc.bytes.empty() && doc.bytes.back() == '\r') doc.bytes.pop_back();
    if (doc.bytes.find_first_not_of(" \t") == std::string::npos) continue;  // a blank line: no document
    doc.line = line_;
    doc.offset = start;
    return true;
  }
}

std::string json_parse_reason(const std::exception& e) {
  std::string why = e.what();
  if (const auto p = why.find("parse error"); p != std::string::npos) why = why.substr(p);
  return why;
}

void text_of(const RawDocument& doc, const std::string& path, InputFormat format, const std::string& key,
             std::string& text) {
  check_utf8(doc.bytes, path, doc.line);
  if (format == InputFormat::text) {
    text = doc.bytes;
    return;
  }
  const std::string where = str(path, ":", doc.line, ": ");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(doc.bytes);
  } catch (const nlohmann::json::parse_error& e) {
    throw DataError(where + "not a JSON line (" + json_parse_reason(e) + ")",
                    "each line of a JSONL file is one JSON object");
  }
  if (!j.is_object()) throw DataError(where + "a JSON " + j.type_name() + ", expected an object");
  const auto it = j.find(key);
  if (it == j.end()) {
    throw DataError(where + "no key \"" + key + "\" in this line's object",
                    "name the key holding the text with --text-key (data.text_key)");
  }
  if (!it->is_string()) throw DataError(str(where, "\"", key, "\" is a ", it->type_name(), ", expected a string"));
  text = it->get<std::string>();
}

}  // namespace gtrain::text
