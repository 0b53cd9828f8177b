// dataset.h: the Dataset interface (indexed samples collated into batches) and the factory that
// opens the train and eval splits a DataConfig describes.
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <memory>
#include <vector>

#include "runtime/core/config/data_config.h"
#include "runtime/core/config/model_config.h"
#include "runtime/core/data_paths.h"
#include "runtime/models/model.h"

namespace gtrain {

namespace text {
class SftData;
}

struct Batch {
  Batch() = default;
  Batch(torch::Tensor input_, torch::Tensor target_, int64_t samples_)
      : input(std::move(input_)), target(std::move(target_)), samples(samples_) {}
  torch::Tensor input;   // [m, ...] float features or int64 tokens
  torch::Tensor target;  // [m] class ids or [m, T] next tokens (-100 where the loss does not count)
  int64_t samples = 0;
  // Rows of several documents (packed conversations): [m, T] int64, each token's position in its
  // document; undefined for plain rows (runtime/models/token_layout.h).
  torch::Tensor positions;
  // [k] int64 flat indices (row * T + t) of the targets that count; undefined: all of them.
  torch::Tensor trained;
  double weight = 0;  // the sum of the samples' weight() (targets that count, or samples)
  // [m] int64: the dataset indices the rows came from (collate_samples; undefined from collate).
  torch::Tensor sample_ids;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  // Samples addressable by index. For random-window token data: possible window starts.
  virtual int64_t size() const = 0;
  // Builds the batch of these samples, in this order. Must be safe to call from several threads.
  virtual Batch collate(const std::vector<int64_t>& indices) const = 0;
  virtual DataSpec spec() const = 0;
  // true: training order draws indices at random (hashed, with replacement) instead of a
  // per-epoch permutation; used when size() is too large to permute.
  virtual bool random_windows() const { return false; }
  // What sample `index` weighs in a step's loss: the targets it trains (token rows) or 1 (a
  // classified sample). The step's loss is the sum of its samples' losses over their total weight.
  // Default: model.seq_len tokens for token data, 1 otherwise.
  virtual double weight(int64_t index) const;
  // Whether weight() differs between samples (masked or padded rows); false: every sample weighs
  // the default, and the trainer need not add them up.
  virtual bool weighted() const { return false; }
  // Where the samples come from, for the start-up line ("" = nothing to add): token data names its
  // files and tokens, so a glob that found fewer shards than meant shows at once.
  virtual std::string source() const { return ""; }
  // What identifies the data, for a resume to name what changed: token data lists its files (name,
  // tokens, CRC-32C of the first and last 64 KiB); null for data drawn from the seed or fixed files.
  virtual nlohmann::json identity() const { return nullptr; }
};

// dataset.collate(indices) with the indices recorded in Batch::sample_ids (a distillation cache
// reads the teacher's outputs by sample).
Batch collate_samples(const Dataset& dataset, const std::vector<int64_t>& indices);

struct DataSplits {
  std::shared_ptr<Dataset> train;
  std::shared_ptr<Dataset> eval;   // may be null (no held-out split)
  std::vector<std::string> notes;  // warnings for the console (held-out files that also train, ...)
};

// Opens the splits; a missing or malformed file is a DataError naming the path.
DataSplits open_datasets(const DataConfig& data, const ModelConfig& model, int64_t seed);

// A warning when a token file (data.kind = "tokens") looks like text: its first 64 KiB hold no NUL
// byte and are at least 98% printable ASCII, tabs, line ends or UTF-8 (a uint16 file of token ids
// has a zero high byte in most ids below 256 and many control bytes); "" otherwise. Names the file,
// the key and data.kind = "text_bytes".
std::string text_file_note(const std::string& path, const std::string& key);

// Readers, exposed for tests.
std::shared_ptr<Dataset> open_idx(const std::string& images_path, const std::string& labels_path);
// Token windows over `paths` taken end to end (one file, or the shards a glob named), the token range
// [begin_fraction, end_fraction) of them. dtype: "uint16" | "uint32" (flat files or llm.c shards,
// whose header is recognised and checked) | "bytes" (any file, vocabulary 256). vocab <= 0: the
// largest id in `paths` + 1. `key` names the config key in errors.
std::shared_ptr<Dataset> open_token_files(const std::vector<std::string>& paths, const std::string& dtype,
                                          int64_t seq_len, double begin_fraction, double end_fraction, bool eval_split,
                                          int64_t vocab, const std::string& key);
// The largest token id in these files + 1 (256 for "bytes").
int64_t token_files_vocab(const std::vector<std::string>& paths, const std::string& dtype, const std::string& key);
std::shared_ptr<Dataset> open_token_file(const std::string& path, const std::string& dtype, int64_t seq_len,
                                         double begin_fraction, double end_fraction, bool eval_split,
                                         int64_t vocab_hint);
std::shared_ptr<Dataset> open_text_bytes(const std::string& path, int64_t seq_len, double begin_fraction,
                                         double end_fraction, bool eval_split);
// data.kind = "text" / "jsonl": the shards in data.prepared_dir (found or made at start), the training
// split identified by the source files; a DataError when nothing was prepared.
DataSplits open_prepared_text(const DataConfig& data, const ModelConfig& model);
// Rows of prepared conversations (data.format = "chat" / "prompt_completion"): ids, targets -100
// where the mask does not train them, and with `packed` rows each token's position in its document;
// weight() is a row's trained targets. `identity`: the sources', for a resume.
std::shared_ptr<Dataset> open_sft_rows(std::shared_ptr<const text::SftData> rows, int64_t seq_len, int64_t vocab,
                                       bool packed, nlohmann::json identity);
std::shared_ptr<Dataset> make_synthetic(const DataConfig& data, const ModelConfig& model, int64_t seed,
                                        bool eval_split);

}  // namespace gtrain
