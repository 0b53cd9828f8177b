// megatron_index.cpp: Megatron-LM's .idx read and checked (megatron/core/datasets/indexed_dataset.py).
#include "runtime/data/megatron_index.h"

#include <cstring>
#include <filesystem>
#include <vector>

#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/data/mapped_file.h"

namespace gtrain {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};
constexpr size_t kHeaderBytes = 9 + 8 + 1 + 8 + 8;  // magic, version, dtype code, sequences, documents

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Megatron's dtype codes (DType in indexed_dataset.py); 0 width: a type token ids cannot be.
struct DtypeCode {
  int width;
  const char* name;
};
DtypeCode dtype_of(uint8_t code) {
  switch (code) {
    case 1:
      return {1, "uint8"};
    case 2:
      return {0, "int8"};
    case 3:
      return {2, "int16"};
    case 4:
      return {4, "int32"};
    case 5:
      return {0, "int64"};
    case 6:
      return {0, "float64"};
    case 7:
      return {0, "float32"};
    case 8:
      return {2, "uint16"};
    default:
      return {0, nullptr};
  }
}

}  // namespace

std::string megatron_index_of(const std::string& bin_path) {
  const std::filesystem::path p(bin_path);
  if (p.extension() != ".bin") return "";
  std::filesystem::path idx = p;
  idx.replace_extension(".idx");
  std::error_code ec;
  return std::filesystem::is_regular_file(idx, ec) ? idx.string() : "";
}

MegatronIndex read_megatron_index(const std::string& idx_path, uint64_t bin_bytes) {
  MappedFile map(idx_path, "data.path");
  const uint8_t* d = map.data();
  const size_t size = map.size();
  auto fail = [&](const std::string& what) -> DataError {
    return DataError(idx_path + ": " + what, "a Megatron-LM .idx is written by preprocess_data.py with its .bin");
  };
  if (size < kHeaderBytes || std::memcmp(d, kMagic, sizeof(kMagic)) != 0)
    throw fail("not a Megatron-LM index (expected the magic \"MMIDIDX\\0\\0\" and a 34-byte header)");
  MegatronIndex ix;
  ix.idx_path = idx_path;
  const uint64_t version = load<uint64_t>(d + 9);
  if (version != 1) throw fail(str("index version ", version, ", expected 1"));
  const uint8_t code = d[17];
  const DtypeCode dt = dtype_of(code);
  if (dt.width == 0) {
    throw fail(str("dtype code ", int(code), " (", dt.name ? dt.name : "unknown",
                   "): gtrain reads token ids of uint8, int16, uint16 or int32"));
  }
  ix.width = dt.width;
  ix.dtype = dt.name;
  const uint64_t n = load<uint64_t>(d + 18), docs = load<uint64_t>(d + 26);
  const uint64_t tables = size - kHeaderBytes;
  // Each count is checked against the file's size before any product of it is formed.
  if (n > tables / 12 || docs > tables / 8 || 12 * n + 8 * docs != tables) {
    throw fail(str("holds ", size, " bytes, but its header says ", n, " sequences and ", docs, " document indices (",
                   kHeaderBytes + 12 * n + 8 * docs, " bytes): truncated or damaged"));
  }
  ix.sequences = static_cast<int64_t>(n);
  ix.documents = docs == 0 ? 0 : static_cast<int64_t>(docs - 1);
  const uint8_t* lengths = d + kHeaderBytes;
  const uint8_t* pointers = lengths + 4 * n;
  const uint8_t* doc_idx = pointers + 8 * n;
  uint64_t at = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const int32_t len = load<int32_t>(lengths + 4 * i);
    const int64_t ptr = load<int64_t>(pointers + 8 * i);
    if (len < 0 || ptr < 0 || static_cast<uint64_t>(ptr) != at)
      throw fail(str("sequence ", i, " has length ", len, " at byte ", ptr, ", expected byte ", at,
                     " (the sequences follow each other in the .bin)"));
    at += static_cast<uint64_t>(len) * static_cast<uint64_t>(ix.width);
  }
  int64_t prev = 0;
  for (uint64_t i = 0; i < docs; ++i) {
    const int64_t doc = load<int64_t>(doc_idx + 8 * i);
    if (doc < prev || static_cast<uint64_t>(doc) > n || (i == 0 && doc != 0))
      throw fail(str("document index ", i, " is ", doc, " (expected 0 first, then non-decreasing up to ", n, ")"));
    prev = doc;
  }
  if (at != bin_bytes) {
    throw fail(str("describes ", at / ix.width, " ", ix.dtype, " tokens (", at, " bytes), but its .bin holds ",
                   bin_bytes, " bytes (another dataset's .bin, or a truncated one?)"));
  }
  ix.tokens = static_cast<int64_t>(at / ix.width);
  return ix;
}

}  // namespace gtrain
