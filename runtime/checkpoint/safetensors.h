// safetensors.h: the safetensors file format (Hugging Face's: 8 bytes of little-endian header
// length, a JSON header giving each tensor's dtype, shape and byte range, then the bytes, with no
// holes). Written by `gtrain ckpt export`; read back to check it and to start from its weights.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "runtime/core/safetensors_header.h"

namespace gtrain {

struct SafetensorsSpec {
  std::string name;
  torch::ScalarType dtype = torch::kFloat32;
  std::vector<int64_t> shape;
};

// Writes `specs` in order to `path` (atomically: a temporary file in the same folder, renamed when
// complete). `produce(i)` gives tensor i, which must have spec i's dtype and shape; one is held at a
// time. `metadata` goes in the header's "__metadata__" (strings only, as the format requires).
// Throws CheckpointError naming the file on a bad spec or a failed write. Returns the bytes written.
int64_t write_safetensors(const std::string& path, const std::vector<SafetensorsSpec>& specs,
                          const std::map<std::string, std::string>& metadata,
                          const std::function<torch::Tensor(size_t)>& produce);

// A safetensors file opened for reading; the header is checked in full (dtypes, shapes against byte
// ranges, ranges inside the file, no holes or overlaps) and errors name the file and the tensor.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(const std::string& path);
  const std::string& path() const { return path_; }
  const std::vector<SafetensorsSpec>& tensors() const { return specs_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool has(const std::string& name) const { return index_.count(name) > 0; }
  torch::Tensor read(const std::string& name) const;  // a CPU tensor of the stored dtype and shape

 private:
  std::string path_;
  std::vector<SafetensorsSpec> specs_;
  std::map<std::string, size_t> index_;
  std::vector<std::pair<int64_t, int64_t>> ranges_;  // absolute byte ranges in the file
  std::map<std::string, std::string> metadata_;
};

// The format's dtype name ("F32", "BF16", ...) of a torch dtype, and back; throw for others.
std::string safetensors_dtype_name(torch::ScalarType t);
torch::ScalarType safetensors_dtype(const std::string& name, const std::string& where);

}  // namespace gtrain
