// sft_dataset.cpp: prepared conversations (runtime/core/text/sft_data.h) as the trainer's batches:
// ids, targets that are -100 where the mask does not train, the indices of the trained targets,
// and for packed rows each token's position in its document.
#include <algorithm>

#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/core/text/sft_data.h"
#include "runtime/data/dataset.h"

namespace gtrain {
namespace {

class SftRows : public Dataset {
 public:
  SftRows(std::shared_ptr<const text::SftData> rows, int64_t seq_len, int64_t vocab, bool packed,
          nlohmann::json identity)
      : rows_(std::move(rows)), seq_len_(seq_len), vocab_(vocab), packed_(packed), identity_(std::move(identity)) {}

  int64_t size() const override { return rows_->size(); }
  double weight(int64_t index) const override { return static_cast<double>(rows_->trained(index)); }
  bool weighted() const override { return true; }
  nlohmann::json identity() const override { return identity_; }
  std::string source() const override {
    const auto& c = rows_->counts();
    return str(c.kept, " documents in ", c.rows, packed_ ? " packed rows" : " rows", ", ", c.trained,
               " trained tokens");
  }

  DataSpec spec() const override {
    DataSpec s;
    s.input_shape = {seq_len_};
    s.vocab = vocab_;
    s.tokens = true;
    return s;
  }

  // Packed rows are seq_len wide; unpacked ones are padded to the longest row of the batch.
  Batch collate(const std::vector<int64_t>& idx) const override {
    const int64_t m = static_cast<int64_t>(idx.size());
    int64_t width = 0;
    for (int64_t i : idx) {
      if (i < 0 || i >= size()) throw DataError(str("conversation row ", i, " out of range (", size(), " rows)"));
      width = std::max(width, rows_->length(i));
    }
    std::vector<int32_t> ids(static_cast<size_t>(m * width)), targets(ids.size()), positions(ids.size());
    for (int64_t r = 0; r < m; ++r) {
      const size_t at = static_cast<size_t>(r * width);
      rows_->fill(idx[static_cast<size_t>(r)], width, ids.data() + at, targets.data() + at, positions.data() + at);
    }
    Batch b;
    b.samples = m;
    auto as_long = [&](std::vector<int32_t>& v) {
      return torch::from_blob(v.data(), {m, width}, torch::kInt).to(torch::kLong);
    };
    b.input = as_long(ids);
    b.target = as_long(targets);
    if (packed_) b.positions = as_long(positions);
    std::vector<int64_t> trained;
    for (size_t k = 0; k < targets.size(); ++k) {
      if (targets[k] >= 0) trained.push_back(static_cast<int64_t>(k));
    }
    b.trained = torch::tensor(trained, torch::kLong);
    for (int64_t i : idx) b.weight += weight(i);
    GT_CHECK(static_cast<double>(trained.size()) == b.weight,
             "conversation rows: trained targets disagree with the rows' counts");
    if (!ids.empty() && *std::max_element(ids.begin(), ids.end()) >= vocab_) {
      throw DataError(str("a conversation row holds an id at or above model.vocab = ", vocab_));
    }
    return b;
  }

 private:
  std::shared_ptr<const text::SftData> rows_;
  int64_t seq_len_, vocab_;
  bool packed_;
  nlohmann::json identity_;
};

}  // namespace

std::shared_ptr<Dataset> open_sft_rows(std::shared_ptr<const text::SftData> rows, int64_t seq_len, int64_t vocab,
                                       bool packed, nlohmann::json identity) {
  GT_CHECK(rows != nullptr, "open_sft_rows: no rows");
  return std::make_shared<SftRows>(std::move(rows), seq_len, vocab, packed, std::move(identity));
}

}  // namespace gtrain
