// sft_data.cpp: a prepared split of conversations memory-mapped (ids, masks, document index), its
// documents truncated or dropped to fit model.seq_len, and packed into rows by best fit decreasing.
#include "runtime/core/text/sft_data.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/core/text/prepare_manifest.h"

namespace gtrain::text {

namespace {

constexpr size_t kShardHeader = 1024;  // llm.c's 256 int32

std::string hint_for(const std::string& dir) {
  return "prepare the data again: delete " + dir + " (a data cache is rebuilt on the next run)";
}

// A file mapped read-only (the ranks on a host share it through the page cache).
class MappedFile {
 public:
  MappedFile(const std::string& path, uint64_t want_bytes, const std::string& hint) : size_(want_bytes) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw DataError(path + ": cannot open (" + std::strerror(errno) + ")", hint);
    struct stat st {};
    if (::fstat(fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != want_bytes) {
      ::close(fd);
      throw DataError(str(path, ": ", st.st_size, " bytes, ", kPrepareManifestFile, " says ", want_bytes), hint);
    }
    if (size_ > 0) {
      void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
      if (p == MAP_FAILED) {
        ::close(fd);
        throw DataError(path + ": cannot map (" + std::strerror(errno) + ")", hint);
      }
      data_ = static_cast<const unsigned char*>(p);
    }
    ::close(fd);
  }
  ~MappedFile() {
    if (data_) ::munmap(const_cast<unsigned char*>(data_), size_);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const unsigned char* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  const unsigned char* data_ = nullptr;
  uint64_t size_ = 0;
};

// A document kept: its index, the slots it fills and the targets of them the loss counts.
struct Kept {
  int64_t doc = 0;
  int64_t slots = 0;
  int64_t trained = 0;
};

class PreparedSft : public SftData {
 public:
  PreparedSft(const std::string& dir, const std::string& split, const SftOptions& o);
  int64_t size() const override { return static_cast<int64_t>(row_begin_.size()) - 1; }
  int64_t length(int64_t row) const override {
    check_row(row);
    return o_.packing ? o_.seq_len : entry_slots_[static_cast<size_t>(row_begin_[static_cast<size_t>(row)])];
  }
  int64_t trained(int64_t row) const override {
    check_row(row);
    return row_trained_[static_cast<size_t>(row)];
  }
  void fill(int64_t row, int64_t width, int32_t* ids, int32_t* targets, int32_t* positions) const override;
  int32_t pad_id() const override { return pad_id_; }
  int64_t vocab() const override { return vocab_; }
  const SftCounts& counts() const override { return counts_; }

 private:
  struct Shard {
    std::unique_ptr<MappedFile> ids, mask;
    uint64_t start = 0, tokens = 0;  // in the split's ids end to end
  };
  void check_row(int64_t row) const {
    if (row < 0 || row >= size()) throw Error(str("SftData: row ", row, " of ", size()));
  }
  // Ids [at, at + n) of the split, and their mask bytes, into `ids` / `mask` (either may be null).
  void read(uint64_t at, uint64_t n, uint32_t* ids, uint8_t* mask) const;
  std::vector<Kept> select();  // the documents that fit, counted
  void pack(const std::vector<Kept>& kept);

  SftOptions o_;
  int width_ = 2;
  std::vector<Shard> shards_;
  std::vector<uint64_t> offsets_;  // documents + 1
  std::vector<int64_t> row_begin_{0};
  std::vector<int64_t> entry_doc_;
  std::vector<int32_t> entry_slots_;
  std::vector<int64_t> row_trained_;
  int32_t pad_id_ = 0;
  int64_t vocab_ = 0;
  SftCounts counts_;
};

PreparedSft::PreparedSft(const std::string& dir, const std::string& split, const SftOptions& o) : o_(o) {
  namespace fs = std::filesystem;
  if (o.seq_len <= 0) throw Error(str("open_sft_data: seq_len ", o.seq_len, ", expected at least 1"));
  if (split != "train" && split != "eval") throw Error("open_sft_data: split \"" + split + "\"");
  const std::string hint = hint_for(dir);
  const PrepareManifest m = read_prepare_manifest(dir);
  if (!m.recipe.conversations())
    throw DataError(dir +
                        ": prepared as text documents, not conversations (data.format = \"chat\" or "
                        "\"prompt_completion\")",
                    hint);
  width_ = m.dtype == "uint32" ? 4 : 2;
  vocab_ = m.vocab_size;
  pad_id_ = m.eos_id >= 0 ? static_cast<int32_t>(m.eos_id) : 0;
  uint64_t total = 0;
  for (const auto& s : m.shards) {
    if (s.split != split) continue;
    Shard sh;
    sh.start = total;
    sh.tokens = static_cast<uint64_t>(s.tokens);
    sh.ids = std::make_unique<MappedFile>((fs::path(dir) / s.file).string(), kShardHeader + sh.tokens * width_, hint);
    sh.mask = std::make_unique<MappedFile>((fs::path(dir) / mask_file(s.file)).string(), sh.tokens, hint);
    total += sh.tokens;
    shards_.push_back(std::move(sh));
  }
  const auto index = std::find_if(m.doc_indexes.begin(), m.doc_indexes.end(),
                                  [&](const PreparedDocIndex& d) { return d.split == split; });
  if (index == m.doc_indexes.end())
    throw DataError(str(dir, "/", kPrepareManifestFile, ": no document index of the ", split, " split"), hint);
  const std::string index_path = (fs::path(dir) / index->file).string();
  const MappedFile f(index_path, 8 * static_cast<uint64_t>(index->documents + 1), hint);
  offsets_.resize(static_cast<size_t>(index->documents + 1));
  for (size_t i = 0; i < offsets_.size(); ++i) {
    uint64_t v = 0;
    for (int b = 7; b >= 0; --b) v = (v << 8) | f.data()[8 * i + static_cast<size_t>(b)];
    offsets_[i] = v;
    if ((i == 0 && v != 0) || (i > 0 && v < offsets_[i - 1]) || v > total)
      throw DataError(str(index_path, ": offset ", i, " is ", v, ", not within the split's ", total, " ids"), hint);
  }
  if (offsets_.back() != total)
    throw DataError(str(index_path, ": its documents hold ", offsets_.back(), " ids, the shards ", total), hint);
  pack(select());
}

void PreparedSft::read(uint64_t at, uint64_t n, uint32_t* ids, uint8_t* mask) const {
  auto it =
      std::upper_bound(shards_.begin(), shards_.end(), at, [](uint64_t a, const Shard& s) { return a < s.start; });
  size_t k = static_cast<size_t>(it - shards_.begin()) - 1;
  while (n > 0) {
    const Shard& s = shards_[k];
    const uint64_t from = at - s.start, take = std::min(n, s.tokens - from);
    if (ids) {
      const unsigned char* p = s.ids->data() + kShardHeader + from * width_;
      for (uint64_t i = 0; i < take; ++i) {
        if (width_ == 2) {
          uint16_t v;
          std::memcpy(&v, p + 2 * i, 2);
          ids[i] = v;
        } else {
          std::memcpy(&ids[i], p + 4 * i, 4);
        }
      }
      ids += take;
    }
    if (mask) {
      std::memcpy(mask, s.mask->data() + from, take);
      mask += take;
    }
    at += take, n -= take, ++k;
  }
}

std::vector<Kept> PreparedSft::select() {
  std::vector<Kept> kept;
  std::vector<uint8_t> mask;
  counts_.documents = static_cast<int64_t>(offsets_.size()) - 1;
  for (int64_t d = 0; d < counts_.documents; ++d) {
    int64_t n = static_cast<int64_t>(offsets_[static_cast<size_t>(d) + 1] - offsets_[static_cast<size_t>(d)]);
    const bool cut = n - 1 > o_.seq_len;
    if (cut && o_.overlong == Overlong::drop) {
      ++counts_.overlong;
      continue;
    }
    if (cut) n = o_.seq_len + 1;
    Kept k{d, n - 1, 0};
    if (n >= 2) {  // slot t's target is id t + 1: the mask of ids 1 .. n - 1
      mask.resize(static_cast<size_t>(n - 1));
      read(offsets_[static_cast<size_t>(d)] + 1, static_cast<uint64_t>(n - 1), nullptr, mask.data());
      for (uint8_t b : mask) k.trained += b != 0;
    }
    if (k.trained == 0) {
      ++counts_.untrainable;
      continue;
    }
    counts_.truncated += cut;
    kept.push_back(k);
  }
  counts_.kept = static_cast<int64_t>(kept.size());
  return kept;
}

// Best fit decreasing: the longest documents first (ties: the earlier), each into the row with the
// least room that holds it (ties: the earlier row), else a new row; a row's documents in the order
// they were placed. Without packing, each document its own row, in order.
void PreparedSft::pack(const std::vector<Kept>& kept) {
  std::vector<int64_t> row_of(kept.size());
  std::vector<size_t> order(kept.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  int64_t rows = 0;
  if (o_.packing) {
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return kept[a].slots > kept[b].slots; });
    std::set<std::pair<int64_t, int64_t>> open;  // (room left, row)
    for (size_t i : order) {
      const int64_t s = kept[i].slots;
      const auto it = open.lower_bound({s, -1});
      int64_t row, room;
      if (it != open.end()) {
        row = it->second, room = it->first - s;
        open.erase(it);
      } else {
        row = rows++, room = o_.seq_len - s;
      }
      if (room > 0) open.insert({room, row});
      row_of[i] = row;
    }
  } else {
    for (size_t i = 0; i < kept.size(); ++i) row_of[i] = rows++;
  }
  // Rows as lists of (document, slots): counted, then placed in packing order.
  row_begin_.assign(static_cast<size_t>(rows) + 1, 0);
  row_trained_.assign(static_cast<size_t>(rows), 0);
  for (size_t i = 0; i < kept.size(); ++i) {
    ++row_begin_[static_cast<size_t>(row_of[i]) + 1];
    row_trained_[static_cast<size_t>(row_of[i])] += kept[i].trained;
  }
  for (size_t r = 0; r < static_cast<size_t>(rows); ++r) row_begin_[r + 1] += row_begin_[r];
  std::vector<int64_t> at(row_begin_.begin(), row_begin_.end() - 1);
  entry_doc_.resize(kept.size());
  entry_slots_.resize(kept.size());
  int64_t used = 0;
  for (size_t i : order) {
    const size_t e = static_cast<size_t>(at[static_cast<size_t>(row_of[i])]++);
    entry_doc_[e] = kept[i].doc;
    entry_slots_[e] = static_cast<int32_t>(kept[i].slots);
    used += kept[i].slots;
    counts_.trained += kept[i].trained;
  }
  counts_.rows = rows;
  counts_.slots = o_.packing ? rows * o_.seq_len : used;
  counts_.padding = counts_.slots - used;
}

void PreparedSft::fill(int64_t row, int64_t width, int32_t* ids, int32_t* targets, int32_t* positions) const {
  check_row(row);
  if (width < length(row))
    throw Error(str("SftData::fill: width ", width, " < row ", row, "'s ", length(row), " slots"));
  std::vector<uint32_t> doc_ids;
  std::vector<uint8_t> mask;
  int64_t p = 0;
  for (int64_t e = row_begin_[static_cast<size_t>(row)]; e < row_begin_[static_cast<size_t>(row) + 1]; ++e) {
    const int64_t slots = entry_slots_[static_cast<size_t>(e)];
    doc_ids.resize(static_cast<size_t>(slots + 1));
    mask.resize(static_cast<size_t>(slots + 1));
    read(offsets_[static_cast<size_t>(entry_doc_[static_cast<size_t>(e)])], static_cast<uint64_t>(slots + 1),
         doc_ids.data(), mask.data());
    for (int64_t t = 0; t < slots; ++t, ++p) {
      ids[p] = static_cast<int32_t>(doc_ids[static_cast<size_t>(t)]);
      targets[p] =
          mask[static_cast<size_t>(t) + 1] ? static_cast<int32_t>(doc_ids[static_cast<size_t>(t) + 1]) : kIgnoreTarget;
      positions[p] = static_cast<int32_t>(t);
    }
  }
  for (int64_t t = 0; p < width; ++t, ++p) {  // padding: a document of its own, trained on nowhere
    ids[p] = pad_id_;
    targets[p] = kIgnoreTarget;
    positions[p] = static_cast<int32_t>(t);
  }
}

}  // namespace

std::unique_ptr<SftData> open_sft_data(const std::string& dir, const std::string& split, const SftOptions& o) {
  return std::make_unique<PreparedSft>(dir, split, o);
}

}  // namespace gtrain::text
