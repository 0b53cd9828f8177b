// synthetic_dataset.cpp: deterministic learnable data for tests and benchmarks, and the factory
// that opens the splits of any data.kind.
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>

#include "runtime/core/errors.h"
#include "runtime/data/dataset.h"
#include "runtime/data/mapped_file.h"
#include "runtime/data/rng.h"

namespace gtrain {
namespace {

constexpr uint64_t kEvalOffset = 1ull << 40;  // eval samples come from a disjoint index range

// Classification: x ~ N(0, I), label = argmax(W x) for a fixed random teacher W.
class SyntheticClasses : public Dataset {
 public:
  SyntheticClasses(int64_t n, int64_t features, int64_t classes, uint64_t seed, bool eval)
      : n_(n), f_(features), c_(classes), seed_(seed), offset_(eval ? kEvalOffset : 0) {
    rng::Stream s(rng::hash(seed, 0x7eac4e7));
    teacher_.resize(static_cast<size_t>(f_ * c_));
    for (auto& w : teacher_) w = static_cast<float>(s.normal());
  }
  int64_t size() const override { return n_; }
  Batch collate(const std::vector<int64_t>& idx) const override {
    const int64_t m = static_cast<int64_t>(idx.size());
    auto input = torch::empty({m, f_}, torch::kFloat);
    auto target = torch::empty({m}, torch::kLong);
    float* in = input.data_ptr<float>();
    int64_t* tg = target.data_ptr<int64_t>();
    for (int64_t i = 0; i < m; ++i) {
      rng::Stream s(rng::hash(seed_, offset_ + static_cast<uint64_t>(idx[i])));
      for (int64_t j = 0; j < f_; ++j) in[i * f_ + j] = static_cast<float>(s.normal());
      int64_t best = 0;
      float best_v = -1e30f;
      for (int64_t c = 0; c < c_; ++c) {
        float v = 0;
        for (int64_t j = 0; j < f_; ++j) v += teacher_[c * f_ + j] * in[i * f_ + j];
        if (v > best_v) best_v = v, best = c;
      }
      tg[i] = best;
    }
    return {input, target, m};
  }
  DataSpec spec() const override {
    DataSpec s;
    s.input_shape = {f_};
    s.num_classes = c_;
    return s;
  }

 private:
  int64_t n_, f_, c_;
  uint64_t seed_, offset_;
  std::vector<float> teacher_;
};

// Token sequences t[i+1] = (t[i] + k) mod vocab with k in {1, 2, 3} per sample: learnable in context.
class SyntheticTokens : public Dataset {
 public:
  SyntheticTokens(int64_t n, int64_t seq_len, int64_t vocab, uint64_t seed, bool eval)
      : n_(n), T_(seq_len), V_(vocab), seed_(seed), offset_(eval ? kEvalOffset : 0) {}
  int64_t size() const override { return n_; }
  Batch collate(const std::vector<int64_t>& idx) const override {
    const int64_t m = static_cast<int64_t>(idx.size());
    auto input = torch::empty({m, T_}, torch::kLong);
    auto target = torch::empty({m, T_}, torch::kLong);
    int64_t* in = input.data_ptr<int64_t>();
    int64_t* tg = target.data_ptr<int64_t>();
    for (int64_t i = 0; i < m; ++i) {
      rng::Stream s(rng::hash(seed_, offset_ + static_cast<uint64_t>(idx[i])));
      int64_t t = static_cast<int64_t>(s.below(V_)), k = 1 + static_cast<int64_t>(s.below(3));
      for (int64_t j = 0; j < T_; ++j) {
        in[i * T_ + j] = t;
        t = (t + k) % V_;
        tg[i * T_ + j] = t;
      }
    }
    return {input, target, m};
  }
  DataSpec spec() const override {
    DataSpec s;
    s.input_shape = {T_};
    s.vocab = V_;
    s.tokens = true;
    return s;
  }

 private:
  int64_t n_, T_, V_;
  uint64_t seed_, offset_;
};

bool exists(const std::string& p) {
  struct stat st;
  return ::stat(p.c_str(), &st) == 0;
}

// <dir>/<prefix>-<kind>, trying the .gz name first.
std::string idx_file(const std::string& dir, const std::string& prefix, const std::string& kind) {
  std::string base = dir + "/" + prefix + "-" + kind;
  if (exists(base + ".gz")) return base + ".gz";
  if (exists(base)) return base;
  throw DataError("data.path: missing IDX file " + base + "[.gz] (data.kind = \"idx\", data.path = \"" + dir +
                  "\"; Fashion-MNIST: apt-get install dataset-fashion-mnist)");
}

}  // namespace

std::shared_ptr<Dataset> make_synthetic(const DataConfig& d, const ModelConfig& m, int64_t seed, bool eval) {
  const int64_t n = eval ? std::max<int64_t>(1, d.synthetic_samples / 4) : d.synthetic_samples;
  if (m.name == "gpt" || m.name == "llama") {
    return std::make_shared<SyntheticTokens>(n, m.seq_len, m.vocab > 0 ? m.vocab : 64, seed, eval);
  }
  return std::make_shared<SyntheticClasses>(n, d.synthetic_features, d.synthetic_classes, seed, eval);
}

Batch collate_samples(const Dataset& dataset, const std::vector<int64_t>& indices) {
  Batch b = dataset.collate(indices);
  b.sample_ids = torch::tensor(indices, torch::kLong);
  return b;
}

double Dataset::weight(int64_t) const {
  const DataSpec s = spec();
  return s.tokens ? static_cast<double>(s.tokens_per_sample()) : 1.0;
}

DataSplits open_datasets(const DataConfig& d, const ModelConfig& m, int64_t seed) {
  DataSplits s;
  if (d.kind == DataKind::idx) {
    if (!exists(d.path)) throw DataError("data.path: directory \"" + d.path + "\" does not exist");
    std::error_code ec;
    if (!std::filesystem::is_directory(d.path, ec)) {
      throw DataError("data.path: \"" + d.path +
                      "\" is a file; data.kind = \"idx\" needs the directory holding the "
                      "IDX files");
    }
    auto open_split = [&](const std::string& prefix) {
      const std::string images = idx_file(d.path, prefix, "images-idx3-ubyte");  // checked first
      const std::string labels = idx_file(d.path, prefix, "labels-idx1-ubyte");
      return open_idx(images, labels);
    };
    s.train = open_split(d.train_prefix);
    if (!d.eval_prefix.empty()) s.eval = open_split(d.eval_prefix);
  } else if (is_text(d.kind)) {
    s = open_prepared_text(d, m);
  } else if (is_token_file(d.kind)) {
    const std::string dtype = d.kind == DataKind::tokens ? d.token_dtype : "bytes";
    const auto train_files = expand_data_path(d.path, "data.path");
    const auto eval_files =
        d.eval_path.empty() ? std::vector<std::string>{} : expand_data_path(d.eval_path, "data.eval_path");
    if (d.kind == DataKind::tokens) {
      for (const auto& f : train_files)
        if (std::string note = text_file_note(f, "data.path"); !note.empty()) s.notes.push_back(note);
    }
    int64_t vocab = d.kind == DataKind::text_bytes ? 256 : m.vocab;
    if (vocab <= 0) {  // the vocabulary covers every file, the held-out ones too
      vocab = token_files_vocab(train_files, dtype, "data.path");
      if (!eval_files.empty()) vocab = std::max(vocab, token_files_vocab(eval_files, dtype, "data.eval_path"));
    }
    for (const auto& e : eval_files) {
      std::error_code ec;
      for (const auto& t : train_files) {
        if (std::filesystem::equivalent(e, t, ec)) {
          s.notes.push_back("data.eval_path: " + e +
                            " is also a training file (data.path): evaluation measures data the model trains on");
          break;
        }
      }
    }
    if (!eval_files.empty()) {
      s.train = open_token_files(train_files, dtype, m.seq_len, 0.0, 1.0, false, vocab, "data.path");
      s.eval = open_token_files(eval_files, dtype, m.seq_len, 0.0, 1.0, true, vocab, "data.eval_path");
    } else {
      const double split = 1.0 - d.eval_fraction;
      s.train = open_token_files(train_files, dtype, m.seq_len, 0.0, split, false, vocab, "data.path");
      if (d.eval_fraction > 0)
        s.eval = open_token_files(train_files, dtype, m.seq_len, split, 1.0, true, vocab, "data.path");
    }
  } else {  // DataKind::synthetic
    s.train = make_synthetic(d, m, static_cast<uint64_t>(seed), false);
    s.eval = make_synthetic(d, m, static_cast<uint64_t>(seed), true);
  }
  return s;
}

}  // namespace gtrain
