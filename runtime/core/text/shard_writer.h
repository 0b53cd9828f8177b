// shard_writer.h: ShardWriter, token shards in llm.c's layout (a 256-int32 header: magic, version,
// token count; then the ids): uint16 ids (magic 20240520, version 1) when the vocabulary fits,
// else uint32 (magic 20240801, version 7, as llm.c's Llama 3 shards), so llm.c and gtrain read them.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace gtrain::text {

struct WrittenShard {
  std::string file;  // name in the output folder
  int64_t tokens = 0;
  std::string crc;  // CRC-32C of the whole file, 8 hex digits
};

class ShardWriter {
 public:
  // Shards <dir>/<prefix>_000000.bin, ... of at most shard_tokens ids each.
  ShardWriter(std::string dir, std::string prefix, size_t vocab_size, int64_t shard_tokens);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  void append(const uint32_t* ids, size_t n);
  // Closes the last shard; the shards written, in order.
  std::vector<WrittenShard> finish();
  int width() const { return width_; }

 private:
  void open_next();
  void close_current();
  std::string dir_, prefix_;
  int width_;
  int64_t shard_tokens_;
  std::FILE* file_ = nullptr;
  std::string path_;
  int64_t in_shard_ = 0;
  std::vector<char> staging_;
  std::vector<WrittenShard> done_;
};

// llm.c's header fields for a width: {magic, version}.
inline std::pair<int32_t, int32_t> llmc_magic_version(int width) {
  return width == 2 ? std::pair<int32_t, int32_t>{20240520, 1} : std::pair<int32_t, int32_t>{20240801, 7};
}

}  // namespace gtrain::text
