// token_dataset.cpp: language-modelling windows over a flat token file (uint16/uint32) or the bytes
// of any file. Training draws random windows; eval walks non-overlapping windows in order.
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "runtime/common/errors.h"
#include "runtime/data/dataset.h"

namespace gtrain {
namespace {

// Token is the narrowest type that holds the file's ids (uint8_t for bytes, uint16_t, int32_t):
// the tokens stay in memory at the file's own width.
template <class Token>
class TokenWindows : public Dataset {
 public:
  TokenWindows(std::vector<Token> tokens, int64_t seq_len, int64_t vocab, bool eval_split)
      : tokens_(std::move(tokens)), seq_len_(seq_len), vocab_(vocab), eval_(eval_split) {}

  int64_t size() const override {
    const int64_t n = static_cast<int64_t>(tokens_.size());
    if (n < seq_len_ + 1) return 0;
    return eval_ ? (n - 1) / seq_len_ : n - seq_len_;  // each window needs seq_len + 1 tokens
  }

  Batch collate(const std::vector<int64_t>& idx) const override {
    const int64_t m = static_cast<int64_t>(idx.size()), T = seq_len_;
    auto input = torch::empty({m, T}, torch::kLong);
    auto target = torch::empty({m, T}, torch::kLong);
    int64_t* in = input.data_ptr<int64_t>();
    int64_t* tg = target.data_ptr<int64_t>();
    for (int64_t i = 0; i < m; ++i) {
      const int64_t start = eval_ ? idx[i] * T : idx[i];
      const Token* src = tokens_.data() + start;
      for (int64_t t = 0; t < T; ++t) {
        in[i * T + t] = src[t];
        tg[i * T + t] = src[t + 1];
      }
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

 private:
  std::vector<Token> tokens_;
  int64_t seq_len_, vocab_;
  bool eval_;
};

std::pair<size_t, size_t> split_range(size_t n, double begin_fraction, double end_fraction) {
  return {static_cast<size_t>(begin_fraction * static_cast<double>(n)),
          static_cast<size_t>(end_fraction * static_cast<double>(n))};
}

// The bytes of a regular file in the fraction [begin_fraction, end_fraction) of its length, read
// at their exact size (a split of text_bytes reads only itself).
std::vector<uint8_t> read_file(const std::string& path, double begin_fraction = 0.0, double end_fraction = 1.0) {
  require_regular_file(path, "data.path");
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw DataError(path + ": cannot open data file (data.path)");
  const auto [begin, end] = split_range(static_cast<size_t>(in.tellg()), begin_fraction, end_fraction);
  std::vector<uint8_t> out(end - begin);
  in.seekg(static_cast<std::streamoff>(begin));
  if (!out.empty() && !in.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size()))) {
    throw DataError(path + ": cannot read data file (data.path)");
  }
  return out;
}

template <class Token>
std::shared_ptr<Dataset> make_windows(const std::string& path, std::vector<Token> toks, int64_t seq_len, int64_t vocab,
                                      bool eval_split) {
  auto ds = std::make_shared<TokenWindows<Token>>(std::move(toks), seq_len, vocab, eval_split);
  if (ds->size() < 1) {
    throw DataError(path + ": too short for one " + std::string(eval_split ? "eval" : "training") +
                    " window of model.seq_len + 1 = " + std::to_string(seq_len + 1) + " tokens" +
                    (eval_split ? " in its data.eval_fraction; raise data.eval_fraction or lower model.seq_len"
                                : "; lower model.seq_len or data.eval_fraction"));
  }
  return ds;
}

}  // namespace

std::shared_ptr<Dataset> open_token_file(const std::string& path, const std::string& dtype, int64_t seq_len,
                                         double begin_fraction, double end_fraction, bool eval_split,
                                         int64_t vocab_hint) {
  auto bytes = read_file(path);
  const size_t width = dtype == "uint32" ? 4 : 2;
  if (bytes.size() % width != 0) {
    throw DataError(path + ": size " + std::to_string(bytes.size()) + " is not a multiple of " + std::to_string(width) +
                    " bytes (data.token_dtype = \"" + dtype + "\")");
  }
  const size_t n = bytes.size() / width;
  const auto [b, e] = split_range(n, begin_fraction, end_fraction);
  // The split's ids at the file's width (uint16 stays 2 bytes a token), and the largest id.
  int64_t max_tok = 0;
  auto split_tokens = [&](auto zero) {
    using Token = decltype(zero);
    std::vector<Token> toks(e - b);
    for (size_t i = b; i < e; ++i) {
      uint32_t v = 0;
      std::memcpy(&v, bytes.data() + i * width, width);
      if (v > 0x7fffffffu) throw DataError(path + ": token id " + std::to_string(v) + " out of range");
      toks[i - b] = static_cast<Token>(v);
      max_tok = std::max<int64_t>(max_tok, v);
    }
    return toks;
  };
  std::vector<uint16_t> narrow;
  std::vector<int32_t> wide;
  if (width == 2)
    narrow = split_tokens(uint16_t{0});
  else
    wide = split_tokens(int32_t{0});
  // The vocabulary must cover the whole file, not only this split: scan the rest cheaply.
  for (size_t i = 0; i < n && vocab_hint <= 0; ++i) {
    uint32_t v = 0;
    std::memcpy(&v, bytes.data() + i * width, width);
    max_tok = std::max<int64_t>(max_tok, v);
  }
  const int64_t vocab = vocab_hint > 0 ? vocab_hint : max_tok + 1;
  if (max_tok >= vocab) {
    throw DataError(path + ": token id " + std::to_string(max_tok) +
                    " is not below model.vocab = " + std::to_string(vocab));
  }
  if (width == 2) return make_windows(path, std::move(narrow), seq_len, vocab, eval_split);
  return make_windows(path, std::move(wide), seq_len, vocab, eval_split);
}

std::shared_ptr<Dataset> open_text_bytes(const std::string& path, int64_t seq_len, double begin_fraction,
                                         double end_fraction, bool eval_split) {
  // Only the split, one byte a token.
  return make_windows(path, read_file(path, begin_fraction, end_fraction), seq_len, 256, eval_split);
}

}  // namespace gtrain
