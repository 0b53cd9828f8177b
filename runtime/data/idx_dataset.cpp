// idx_dataset.cpp: MNIST / Fashion-MNIST IDX image and label files, gzipped or not (zlib reads both).
#include <zlib.h>

#include <filesystem>

#include <sys/stat.h>
#include <cstdint>
#include <cstring>

#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/data/dataset.h"

namespace gtrain {
namespace {

std::vector<uint8_t> read_maybe_gz(const std::string& path) {
  require_regular_file(path, "data.path");
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw DataError(path + ": cannot open data file");
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) out.insert(out.end(), buf, buf + n);
  int err = 0;
  const char* msg = gzerror(f, &err);
  std::string why = msg && *msg ? msg : "zlib error";  // copied: gzclose frees the message
  if (why.rfind(path + ": ", 0) == 0) why = why.substr(path.size() + 2);
  gzclose(f);
  if (n < 0 || (err != Z_OK && err != Z_STREAM_END)) {
    throw DataError(path + ": cannot read data file (" + why + "; a corrupt or truncated gzip file?)");
  }
  return out;
}

uint32_t be32(const std::vector<uint8_t>& b, size_t off) {
  return (uint32_t(b[off]) << 24) | (uint32_t(b[off + 1]) << 16) | (uint32_t(b[off + 2]) << 8) | b[off + 3];
}

class IdxDataset : public Dataset {
 public:
  IdxDataset(const std::string& images_path, const std::string& labels_path) {
    auto img = read_maybe_gz(images_path);
    auto lab = read_maybe_gz(labels_path);
    if (img.size() < 16 || be32(img, 0) != 0x00000803) {
      throw DataError(images_path + ": not an IDX image file (expected magic 0x00000803 and 3 dimensions)");
    }
    if (lab.size() < 8 || be32(lab, 0) != 0x00000801) {
      throw DataError(labels_path + ": not an IDX label file (expected magic 0x00000801)");
    }
    n_ = be32(img, 4), rows_ = be32(img, 8), cols_ = be32(img, 12);
    const int64_t n_labels = be32(lab, 4);
    if (n_labels != n_) {
      throw DataError(labels_path + ": " + std::to_string(n_labels) + " labels for " + std::to_string(n_) +
                      " images in " + images_path);
    }
    // Each dimension is below 2^32: their product is checked by division, so it cannot overflow.
    const uint64_t px = static_cast<uint64_t>(rows_) * static_cast<uint64_t>(cols_);
    const uint64_t body = img.size() - 16;
    if (px == 0 || body % px != 0 || body / px != static_cast<uint64_t>(n_) ||
        static_cast<int64_t>(lab.size()) != 8 + n_) {
      throw DataError(images_path + ": truncated IDX file (size does not match its header)");
    }
    pixels_.assign(img.begin() + 16, img.end());
    labels_.assign(lab.begin() + 8, lab.end());
    int64_t max_label = 0;
    for (auto l : labels_) max_label = std::max<int64_t>(max_label, l);
    classes_ = std::max<int64_t>(max_label + 1, 2);
  }

  int64_t size() const override { return n_; }

  Batch collate(const std::vector<int64_t>& idx) const override {
    const int64_t m = static_cast<int64_t>(idx.size()), px = rows_ * cols_;
    auto input = torch::empty({m, 1, rows_, cols_}, torch::kFloat);
    auto target = torch::empty({m}, torch::kLong);
    float* in = input.data_ptr<float>();
    int64_t* tg = target.data_ptr<int64_t>();
    // Scale to [0, 1] then standardise with fixed constants (same on every rank and run).
    constexpr float kMean = 0.2860f, kStd = 0.3530f;
    for (int64_t i = 0; i < m; ++i) {
      const uint8_t* src = pixels_.data() + idx[i] * px;
      for (int64_t p = 0; p < px; ++p) in[i * px + p] = (src[p] / 255.0f - kMean) / kStd;
      tg[i] = labels_[idx[i]];
    }
    return {input, target, m};
  }

  DataSpec spec() const override {
    DataSpec s;
    s.input_shape = {1, rows_, cols_};
    s.num_classes = std::max<int64_t>(classes_, 10);
    return s;
  }

 private:
  int64_t n_ = 0, rows_ = 0, cols_ = 0, classes_ = 10;
  std::vector<uint8_t> pixels_, labels_;
};

}  // namespace

std::shared_ptr<Dataset> open_idx(const std::string& images_path, const std::string& labels_path) {
  return std::make_shared<IdxDataset>(images_path, labels_path);
}

}  // namespace gtrain
