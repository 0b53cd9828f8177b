// documents.h: the documents of an input file for gtrain prepare: a plain text file is one
// document (or one a line with split_lines), a JSONL file one a line (the text under a key);
// read in order from a ByteStream, a line at a time, so an input is never held whole.
#pragma once

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "runtime/core/text/byte_stream.h"

namespace gtrain::text {

enum class InputFormat { text, jsonl };

// JSONL by name (.jsonl, .ndjson, .json, with .gz / .zst after it), else text.
InputFormat format_of(const std::string& path);
const char* name_of(InputFormat f);

// A document as read, before its text is taken out of it (by a worker thread: text_of).
struct RawDocument {
  std::string bytes;    // the line (JSONL, split_lines, without its line end) or the whole file
  int64_t line = 1;     // the line it starts on (1-based)
  uint64_t offset = 0;  // its first byte's offset in the (decompressed) input
  uint32_t input = 0;   // index of its input file
};

class DocumentReader {
 public:
  DocumentReader(const std::string& path, uint32_t input_index, InputFormat format, bool split_lines);
  // The next document; false at the end. Blank JSONL lines and empty lines of split_lines are skipped.
  bool next(RawDocument& doc);
  uint64_t raw_read() const { return stream_.raw_read(); }

 private:
  bool next_line(std::string& line);
  ByteStream stream_;
  uint32_t input_;
  bool whole_;  // one document for the whole file
  std::vector<char> buf_;
  size_t pos_ = 0, len_ = 0;
  int64_t line_ = 0;     // lines read so far
  uint64_t offset_ = 0;  // bytes consumed so far
  bool done_ = false;
};

// The document's text: for JSONL, the string under `key` of the line's object; else the bytes
// themselves. A DataError "FILE:LINE: ..." for a line that is not a JSON object, a missing key, a
// value that is not a string, or invalid UTF-8 ("FILE:LINE: invalid UTF-8 at byte N", N the offset
// in that line, from 0).
void text_of(const RawDocument& doc, const std::string& path, InputFormat format, const std::string& key,
             std::string& text);

// Why a JSONL line did not parse, for its one-line error: nlohmann::json's message from "parse
// error" on, without its "[json.exception.parse_error.N]" prefix.
std::string json_parse_reason(const std::exception& e);

}  // namespace gtrain::text
