// megatron_index.h: Megatron-LM's indexed dataset (prefix.bin + prefix.idx), read-only: the .idx
// header and its sequence table checked against the .bin, so the .bin's tokens read as one stream.
#pragma once

#include <cstdint>
#include <string>

namespace gtrain {

struct MegatronIndex {
  std::string idx_path;  // the .idx read
  int width = 2;         // bytes per token in the .bin (from the .idx's dtype code)
  std::string dtype;     // the dtype's name ("uint16", "int32", ...), for messages
  int64_t sequences = 0;
  int64_t documents = 0;
  int64_t tokens = 0;  // the sequences' lengths summed: what the .bin holds
};

// The .idx beside a .bin ("x.bin" -> "x.idx"), or "" when `bin_path` does not end in .bin or no
// such file exists.
std::string megatron_index_of(const std::string& bin_path);

// Reads and checks `idx_path` (magic "MMIDIDX\0\0", version 1, dtype code, sequence and document
// counts, int32 lengths, int64 byte pointers, int64 document indices) against a .bin of `bin_bytes`
// bytes. A DataError naming the file for anything that does not agree.
MegatronIndex read_megatron_index(const std::string& idx_path, uint64_t bin_bytes);

}  // namespace gtrain
