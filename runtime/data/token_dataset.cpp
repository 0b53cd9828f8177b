// token_dataset.cpp: language-modelling windows over token files: flat uint16/uint32 files, llm.c
// shards (GPT-2's and Llama 3's 1 KiB headers are read and checked), Megatron-LM's .bin with its
// .idx, or the bytes of any file; one file or a glob of shards, memory-mapped (mapped_file.h). Training draws random
// windows; eval walks non-overlapping windows in order. A window never crosses from one file into the next.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "runtime/checkpoint/crc32c.h"
#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/data/dataset.h"
#include "runtime/data/mapped_file.h"
#include "runtime/data/megatron_index.h"

namespace gtrain {
namespace {

constexpr int32_t kLlmcMagic = 20240520;                 // llm.c's dev/data token shards (GPT-2)
constexpr int32_t kLlmcLlama3Magic = 20240801;           // llm.c's Llama 3 shards: version 7, uint32 tokens
constexpr size_t kLlmcHeaderBytes = 256 * 4;             // 256 int32: magic, version, token count, ...
constexpr int64_t kEagerCheckTokens = int64_t{1} << 20;  // training ids checked at open, per file segment
constexpr uint32_t kLargestDataVocab = 1u << 22;         // model.vocab = 0: the most ids the data may give

int width_of(const std::string& dtype) {
  return dtype == "bytes" ? 1 : dtype == "uint32" ? 4 : 2;
}

// One file's tokens: its map, where the tokens start in it, how many, and their width in bytes.
struct TokenFile {
  std::shared_ptr<MappedFile> map;
  size_t offset = 0;
  int64_t count = 0;
  int width = 2;
  const uint8_t* at(int64_t i) const { return map->data() + offset + static_cast<size_t>(i) * width; }
};

// Checks the llm.c header of a shard of `size` bytes and returns its token width (2 or 4).
int llmc_width(const std::string& path, const int32_t head[3], size_t size, int dtype_width) {
  const int32_t magic = head[0];
  if (size < kLlmcHeaderBytes) {
    throw DataError(str(path, ": starts with llm.c's shard magic (", magic, ") but holds ", size,
                        " bytes, less than the 1024-byte header (a truncated shard?)"));
  }
  int width = 0;
  if (magic == kLlmcMagic) width = head[1] == 1 ? 2 : head[1] == 2 ? 4 : 0;
  if (magic == kLlmcLlama3Magic) width = head[1] == 7 ? 4 : 0;
  if (width == 0) {
    throw DataError(str(path, ": llm.c token shard of unknown version ", head[1], " for magic ", magic,
                        " (20240520: 1 = uint16 tokens, 2 = uint32; 20240801: 7 = uint32)"));
  }
  const char* named = width == 2 ? "uint16" : "uint32";
  if (width != dtype_width) {
    throw DataError(str(path, ": llm.c header says ", named, " tokens (version ", head[1], ")"),
                    str("set data.token_dtype = \"", named, "\""));
  }
  const size_t held = (size - kLlmcHeaderBytes) / width;
  if (head[2] < 0 || kLlmcHeaderBytes + static_cast<size_t>(head[2]) * width != size) {
    throw DataError(path + ": llm.c header says " + std::to_string(head[2]) + " tokens, but the file holds " +
                    std::to_string(held) + " after its header (a truncated or damaged shard?)");
  }
  return width;
}

TokenFile open_tokens(const std::string& path, const std::string& dtype, const std::string& key) {
  TokenFile f;
  f.map = std::make_shared<MappedFile>(path, key);
  f.width = width_of(dtype);
  const size_t size = f.map->size();
  if (dtype != "bytes") {
    // Megatron-LM's .bin: its .idx beside it says the element type and how many tokens it holds.
    if (const std::string idx = megatron_index_of(path); !idx.empty()) {
      const MegatronIndex ix = read_megatron_index(idx, size);
      f.width = ix.width;
      f.count = ix.tokens;
      return f;
    }
  }
  int32_t head[3] = {0, 0, 0};
  if (dtype != "bytes" && size > 0) std::memcpy(head, f.map->data(), std::min(sizeof(head), size));
  if (head[0] == kLlmcMagic || head[0] == kLlmcLlama3Magic) {
    f.width = llmc_width(path, head, size, f.width);
    f.offset = kLlmcHeaderBytes;
    f.count = head[2];
    return f;
  }
  if (size % f.width != 0) {
    throw DataError(path + ": size " + std::to_string(size) + " is not a multiple of " + std::to_string(f.width) +
                        " bytes (data.token_dtype = \"" + dtype + "\")",
                    text_file_note(path, key).empty()
                        ? std::string()
                        : "it looks like text: for raw text set data.kind = \"text_bytes\"");
  }
  f.count = static_cast<int64_t>(size / f.width);
  return f;
}

std::vector<TokenFile> open_all(const std::vector<std::string>& paths, const std::string& dtype,
                                const std::string& key) {
  std::vector<TokenFile> out;
  for (const auto& p : paths) out.push_back(open_tokens(p, dtype, key));
  return out;
}

// Widens n tokens at src into dst and returns the largest.
template <class Token>
uint32_t widen(const uint8_t* src, int64_t n, int64_t* dst) {
  uint32_t hi = 0;
  for (int64_t i = 0; i < n; ++i) {
    Token v;
    std::memcpy(&v, src + i * static_cast<int64_t>(sizeof(Token)), sizeof(Token));
    dst[i] = v;
    hi = std::max<uint32_t>(hi, v);
  }
  return hi;
}

uint32_t widen(const TokenFile& f, int64_t first, int64_t n, int64_t* dst) {
  if (f.width == 1) return widen<uint8_t>(f.at(first), n, dst);
  if (f.width == 2) return widen<uint16_t>(f.at(first), n, dst);
  return widen<uint32_t>(f.at(first), n, dst);
}

// The largest id among the first `limit` tokens of f from `first` (all of them for limit < 0).
uint32_t max_token(const TokenFile& f, int64_t first, int64_t limit) {
  const int64_t n = limit < 0 ? f.count - first : std::min(limit, f.count - first);
  std::vector<int64_t> buf(1 << 16);
  uint32_t hi = 0;
  for (int64_t i = 0; i < n; i += static_cast<int64_t>(buf.size())) {
    hi = std::max(hi, widen(f, first + i, std::min<int64_t>(static_cast<int64_t>(buf.size()), n - i), buf.data()));
  }
  return hi;
}

[[noreturn]] void throw_out_of_vocab(const TokenFile& f, int64_t first, int64_t n, int64_t vocab) {
  std::vector<int64_t> buf(static_cast<size_t>(n));
  widen(f, first, n, buf.data());
  int64_t i = 0;
  while (i + 1 < n && buf[i] < vocab) ++i;
  throw DataError(f.map->path() + ": token id " + std::to_string(buf[i]) + " at token " + std::to_string(first + i) +
                  " is not below model.vocab = " + std::to_string(vocab) +
                  " (a file from another tokenizer, or model.vocab too small?)");
}

// A split's windows: the token range [begin_fraction, end_fraction) of the files taken end to end,
// cut at file boundaries into segments.
class TokenWindows : public Dataset {
 public:
  TokenWindows(std::vector<TokenFile> files, double begin_fraction, double end_fraction, int64_t seq_len, int64_t vocab,
               bool eval_split)
      : files_(std::move(files)), seq_len_(seq_len), vocab_(vocab), eval_(eval_split) {
    int64_t total = 0;
    for (const auto& f : files_) total += f.count;
    const auto begin = static_cast<int64_t>(begin_fraction * static_cast<double>(total));
    const auto end = static_cast<int64_t>(end_fraction * static_cast<double>(total));
    int64_t file_start = 0, windows = 0;
    for (size_t i = 0; i < files_.size(); ++i) {
      const int64_t lo = std::max(begin, file_start), hi = std::min(end, file_start + files_[i].count);
      file_start += files_[i].count;
      if (hi - lo < seq_len_ + 1) continue;  // each window needs seq_len + 1 tokens
      const int64_t n = hi - lo;
      windows += eval_ ? (n - 1) / seq_len_ : n - seq_len_;
      segments_.push_back({i, lo - (file_start - files_[i].count), n});
      ends_.push_back(windows);
    }
  }

  int64_t size() const override { return ends_.empty() ? 0 : ends_.back(); }

  Batch collate(const std::vector<int64_t>& idx) const override {
    const int64_t m = static_cast<int64_t>(idx.size()), T = seq_len_;
    auto input = torch::empty({m, T}, torch::kLong);
    auto target = torch::empty({m, T}, torch::kLong);
    int64_t* in = input.data_ptr<int64_t>();
    int64_t* tg = target.data_ptr<int64_t>();
    std::vector<int64_t> window(static_cast<size_t>(T + 1));
    for (int64_t i = 0; i < m; ++i) {
      if (idx[i] < 0 || idx[i] >= size()) throw DataError("token window " + std::to_string(idx[i]) + " out of range");
      const size_t s = static_cast<size_t>(std::upper_bound(ends_.begin(), ends_.end(), idx[i]) - ends_.begin());
      const int64_t local = idx[i] - (s == 0 ? 0 : ends_[s - 1]);
      const Segment& seg = segments_[s];
      const TokenFile& f = files_[seg.file];
      const int64_t first = seg.first + (eval_ ? local * T : local);
      // Ids are checked as they are read: a file from another tokenizer fails at its first bad
      // window instead of indexing past the embedding.
      if (widen(f, first, T + 1, window.data()) >= static_cast<uint64_t>(vocab_)) {
        throw_out_of_vocab(f, first, T + 1, vocab_);
      }
      std::memcpy(in + i * T, window.data(), static_cast<size_t>(T) * sizeof(int64_t));
      std::memcpy(tg + i * T, window.data() + 1, static_cast<size_t>(T) * sizeof(int64_t));
    }
    return {input, target, m};
  }

  DataSpec spec() const override {
    DataSpec s;
    s.input_shape = {seq_len_};
    s.vocab = vocab_;
    s.tokens = true;
    return s;
  }

  bool random_windows() const override { return !eval_; }
  const std::vector<TokenFile>& files() const { return files_; }

  nlohmann::json identity() const override {
    std::call_once(identity_once_, [this] {
      identity_ = nlohmann::json::array();
      for (const auto& f : files_) {
        const size_t bytes = static_cast<size_t>(f.count) * f.width, edge = std::min<size_t>(bytes, 64 << 10);
        uint32_t crc = crc32c(f.at(0), edge);
        crc = crc32c(f.at(0) + (bytes - edge), edge, crc);
        char hex[9];
        std::snprintf(hex, sizeof(hex), "%08x", crc);
        identity_.push_back(
            {{"file", std::filesystem::path(f.map->path()).filename().string()}, {"tokens", f.count}, {"crc", hex}});
      }
    });
    return identity_;
  }

  std::string source() const override {
    int64_t tokens = 0;
    for (const auto& s : segments_) tokens += s.count;
    // The files this split reads (a split's edge can leave a file a piece too short for a window).
    return std::to_string(segments_.size()) + (segments_.size() == 1 ? " file, " : " files, ") +
           std::to_string(tokens) + " tokens";
  }

  // Checks the first `limit` ids of each segment (all for limit < 0) against the vocabulary, the
  // rest as they are read, so a wrong tokenizer or model.vocab fails at start.
  void check_vocabulary(int64_t limit) const {
    for (const auto& seg : segments_) {
      const TokenFile& f = files_[seg.file];
      const int64_t n = limit < 0 ? seg.count : std::min(seg.count, limit);
      if (max_token(f, seg.first, n) >= static_cast<uint64_t>(vocab_)) throw_out_of_vocab(f, seg.first, n, vocab_);
    }
  }

 private:
  struct Segment {
    size_t file;    // index into files_
    int64_t first;  // first token of the segment in its file
    int64_t count;  // tokens in the segment
  };
  std::vector<TokenFile> files_;
  std::vector<Segment> segments_;
  std::vector<int64_t> ends_;  // cumulative window count at the end of each segment
  mutable std::once_flag identity_once_;
  mutable nlohmann::json identity_;
  int64_t seq_len_, vocab_;
  bool eval_;
};

}  // namespace

std::string text_file_note(const std::string& path, const std::string& key) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return "";  // the reader names an unreadable file
  std::vector<unsigned char> head(64 * 1024);
  const size_t n = std::fread(head.data(), 1, head.size(), f);
  std::fclose(f);
  if (n < 64) return "";
  int32_t magic = 0;
  std::memcpy(&magic, head.data(), sizeof(magic));
  if (magic == kLlmcMagic || magic == kLlmcLlama3Magic) return "";
  size_t texty = 0;
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = head[i];
    if (c == 0) return "";
    texty += (c >= 0x20 && c != 0x7f) || c == '\t' || c == '\n' || c == '\r';
  }
  if (texty * 100 < n * 98) return "";
  return str(key, ": ", path, " looks like text (no NUL byte and ", texty * 100 / n, "% printable in its first ",
             format_size(static_cast<double>(n)),
             "), yet data.kind = \"tokens\" reads it as token ids, making a vocabulary of its byte pairs; "
             "for raw text set data.kind = \"text_bytes\"");
}

int64_t token_files_vocab(const std::vector<std::string>& paths, const std::string& dtype, const std::string& key) {
  if (dtype == "bytes") return 256;
  uint32_t hi = 0;
  for (const auto& f : open_all(paths, dtype, key)) {
    const uint32_t m = max_token(f, 0, -1);
    // The largest tokenizers have about 256k ids: an id in the millions is a file of another element
    // type or layout, and a vocabulary of it would not fit in memory.
    if (m >= kLargestDataVocab) {
      throw DataError(f.map->path() + ": token id " + std::to_string(m) + " with model.vocab = 0 would make a " +
                          std::to_string(static_cast<int64_t>(m) + 1) + "-id vocabulary (data.token_dtype = \"" +
                          dtype + "\"; a file of another element type?)",
                      "set model.vocab if the ids are right");
    }
    hi = std::max(hi, m);
  }
  return static_cast<int64_t>(hi) + 1;
}

std::shared_ptr<Dataset> open_token_files(const std::vector<std::string>& paths, const std::string& dtype,
                                          int64_t seq_len, double begin_fraction, double end_fraction, bool eval_split,
                                          int64_t vocab, const std::string& key) {
  if (vocab <= 0) vocab = token_files_vocab(paths, dtype, key);
  auto ds = std::make_shared<TokenWindows>(open_all(paths, dtype, key), begin_fraction, end_fraction, seq_len, vocab,
                                           eval_split);
  if (ds->size() < 1) {
    const std::string what = paths.size() == 1 ? paths[0] : key + " (" + std::to_string(paths.size()) + " files)";
    const std::string window = "one window of model.seq_len + 1 = " + std::to_string(seq_len + 1) + " tokens";
    int64_t longest = 0;
    for (const auto& f : ds->files()) longest = std::max(longest, f.count);
    if (longest == 0) throw DataError(what + ": holds no tokens (an empty file?)");
    if (longest < seq_len + 1) {
      throw DataError(what + ": too short for " + window + (paths.size() == 1 ? "" : " in any one file") + " (" +
                          std::to_string(longest) + " tokens" + (paths.size() == 1 ? "" : " in the longest") + ")",
                      "lower model.seq_len or give longer files");
    }
    throw DataError(str(what, ": its ", eval_split ? "eval" : "training", " split is too short for ", window),
                    eval_split
                        ? "raise data.eval_fraction, name held-out files in data.eval_path, or lower model.seq_len"
                        : "lower data.eval_fraction or model.seq_len");
  }
  // Evaluation reads its windows in order, possibly hours in: its ids are all checked now.
  ds->check_vocabulary(eval_split ? -1 : kEagerCheckTokens);
  return ds;
}

std::shared_ptr<Dataset> open_token_file(const std::string& path, const std::string& dtype, int64_t seq_len,
                                         double begin_fraction, double end_fraction, bool eval_split,
                                         int64_t vocab_hint) {
  return open_token_files({path}, dtype, seq_len, begin_fraction, end_fraction, eval_split, vocab_hint, "data.path");
}

std::shared_ptr<Dataset> open_text_bytes(const std::string& path, int64_t seq_len, double begin_fraction,
                                         double end_fraction, bool eval_split) {
  return open_token_files({path}, "bytes", seq_len, begin_fraction, end_fraction, eval_split, 256, "data.path");
}

}  // namespace gtrain
