// sft_data.h: prepared conversations (data.format = "chat" / "prompt_completion") as the ranks read
// them: each document's ids and its trained-token mask, packed into model.seq_len rows without
// padding (best fit, deterministic) or one document a row, with the targets and the positions that
// restart at every document.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace gtrain::text {

// The target of a slot that the loss does not count (transformers' ignore_index).
constexpr int32_t kIgnoreTarget = -100;

// data.overlong: what a document longer than a row becomes.
enum class Overlong { truncate, drop };

struct SftOptions {
  int64_t seq_len = 0;                     // slots a row holds (model.seq_len)
  bool packing = true;                     // several documents a row (false: one a row, padded per micro-batch)
  Overlong overlong = Overlong::truncate;  // documents of more than seq_len + 1 ids
};

// What reading the documents kept and left out (for the start-up line and the ledger).
struct SftCounts {
  int64_t documents = 0;    // documents read
  int64_t kept = 0;         // in some row
  int64_t truncated = 0;    // kept, cut to seq_len + 1 ids
  int64_t overlong = 0;     // left out as longer than a row (data.overlong = "drop")
  int64_t untrainable = 0;  // left out: no trained target (after truncation)
  int64_t rows = 0;         // rows formed
  int64_t slots = 0;        // rows x seq_len (packing) or the documents' slots (no packing)
  int64_t trained = 0;      // targets the loss counts, over every row
  int64_t padding = 0;      // slots holding no document (packing: the rows' unfilled tails)
};

// A document of n ids fills n - 1 slots: slot t holds input id t, target id t + 1 (kIgnoreTarget
// where the mask does not train id t + 1) and position t (0 at the document's first slot).
class SftData {
 public:
  virtual ~SftData() = default;
  virtual int64_t size() const = 0;                // rows
  virtual int64_t length(int64_t row) const = 0;   // slots the row's documents fill (packed rows: seq_len)
  virtual int64_t trained(int64_t row) const = 0;  // targets of the row the loss counts
  // Writes `width` >= length(row) slots of row `row`: input ids, targets and positions. Slots past
  // the documents are padding: input pad_id(), target kIgnoreTarget, positions 0, 1, ... as a
  // document of their own (attention inside a row never crosses a document boundary).
  virtual void fill(int64_t row, int64_t width, int32_t* ids, int32_t* targets, int32_t* positions) const = 0;
  virtual int32_t pad_id() const = 0;
  virtual int64_t vocab() const = 0;  // the prepared tokenizer's ids
  virtual const SftCounts& counts() const = 0;
};

// Opens the `split` ("train" | "eval") of a folder gtrain prepare wrote for a chat or
// prompt_completion format. DataError naming the folder for anything missing or damaged.
std::unique_ptr<SftData> open_sft_data(const std::string& dir, const std::string& split, const SftOptions& o);

}  // namespace gtrain::text
