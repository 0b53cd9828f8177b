// text_dataset.cpp: data.kind = "text" / "jsonl" as the ranks read it: the token shards prepared
// at start (runtime/core/text/text_data.h) as token windows, identified for a resume by their
// sources, so adding, removing or changing a source file is named as such.
#include <filesystem>

#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/core/text/prepare_manifest.h"
#include "runtime/core/text/sft_data.h"
#include "runtime/data/dataset.h"

namespace gtrain {
namespace {

// Token windows whose identity() is the source files' (name, bytes, CRC-32C) instead of the shards'.
class SourceIdentified : public Dataset {
 public:
  SourceIdentified(std::shared_ptr<Dataset> inner, nlohmann::json sources)
      : inner_(std::move(inner)), sources_(std::move(sources)) {}
  int64_t size() const override { return inner_->size(); }
  Batch collate(const std::vector<int64_t>& indices) const override { return inner_->collate(indices); }
  DataSpec spec() const override { return inner_->spec(); }
  bool random_windows() const override { return inner_->random_windows(); }
  std::string source() const override { return inner_->source(); }
  nlohmann::json identity() const override { return sources_; }

 private:
  std::shared_ptr<Dataset> inner_;
  nlohmann::json sources_;
};

}  // namespace

DataSplits open_prepared_text(const DataConfig& d, const ModelConfig& m) {
  if (d.prepared_dir.empty()) {
    throw DataError(str("data.kind = \"", d.kind, "\": its token shards were not prepared"),
                    "gtrain run prepares them before the ranks start");
  }
  const text::PrepareManifest pm = text::read_prepare_manifest(d.prepared_dir);
  if (m.vocab > 0 && pm.vocab_size > m.vocab) {
    throw ConfigError(
        str("data.tokenizer: ", pm.tokenizer, " has ", pm.vocab_size, " ids, more than model.vocab = ", m.vocab),
        str("set model.vocab to at least ", pm.vocab_size, ", or use the model's own tokenizer"));
  }
  const int64_t vocab = m.vocab > 0 ? m.vocab : pm.vocab_size;
  auto files = [&](const std::string& split) {
    std::vector<std::string> out;
    for (const auto& f : pm.shard_files(split)) out.push_back((std::filesystem::path(d.prepared_dir) / f).string());
    return out;
  };
  nlohmann::json sources = nlohmann::json::array();
  for (const auto& in : pm.inputs)
    sources.push_back(
        {{"file", std::filesystem::path(in.path).filename().string()}, {"bytes", in.bytes}, {"crc", in.crc}});
  DataSplits s;
  if (d.format != DataFormat::text) {  // conversations: rows of documents with their masks
    const text::SftOptions o{m.seq_len, d.packing,
                             d.overlong == DataOverlong::drop ? text::Overlong::drop : text::Overlong::truncate};
    s.train = open_sft_rows(text::open_sft_data(d.prepared_dir, "train", o), m.seq_len, vocab, d.packing, sources);
    if (pm.eval_documents > 0) {
      s.eval = open_sft_rows(text::open_sft_data(d.prepared_dir, "eval", o), m.seq_len, vocab, d.packing, nullptr);
    }
    return s;
  }
  const auto train = files("train");
  if (train.empty()) throw DataError(d.prepared_dir + ": no training shard (the sources hold no document?)");
  s.train = std::make_shared<SourceIdentified>(
      open_token_files(train, pm.dtype, m.seq_len, 0.0, 1.0, false, vocab, "data.path"), sources);
  const auto eval = files("eval");
  if (!eval.empty()) s.eval = open_token_files(eval, pm.dtype, m.seq_len, 0.0, 1.0, true, vocab, "data.path");
  return s;
}

}  // namespace gtrain
