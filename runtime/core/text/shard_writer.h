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
  std::string crc;       // CRC-32C of the whole file, 8 hex digits
  std::string mask_crc;  // with masks: CRC-32C of its .mask file
};

class ShardWriter {
 public:
  // Shards <dir>/<prefix>_000000.bin, ... of at most shard_tokens ids each; with `masks`, beside
  // each its <prefix>_000000.mask, a byte an id (append's `mask`).
  ShardWriter(std::string dir, std::string prefix, size_t vocab_size, int64_t shard_tokens, bool masks = false);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  void append(const uint32_t* ids, size_t n, const uint8_t* mask = nullptr);
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
  bool masks_;
  std::FILE* mask_file_ = nullptr;
  std::string mask_path_;
  uint32_t mask_crc_ = 0;
  int64_t in_shard_ = 0;
  std::vector<char> staging_;
  std::vector<WrittenShard> done_;
};

// A split's document index (prepare_manifest.h's PreparedDocIndex): offsets as uint64, CRC-32C
// as written.
class DocIndexWriter {
 public:
  DocIndexWriter(const std::string& dir, const std::string& split);
  ~DocIndexWriter();
  DocIndexWriter(const DocIndexWriter&) = delete;
  DocIndexWriter& operator=(const DocIndexWriter&) = delete;
  void add(uint64_t ids);  // the next document's id count
  // Closes it: its name, documents and CRC-32C.
  void finish(std::string* file, int64_t* documents, std::string* crc);

 private:
  void put(uint64_t v);
  std::string path_;
  std::FILE* file_ = nullptr;
  uint64_t at_ = 0;
  int64_t documents_ = 0;
  uint32_t crc_ = 0;
};

// llm.c's header fields for a width: {magic, version}.
inline std::pair<int32_t, int32_t> llmc_magic_version(int width) {
  return width == 2 ? std::pair<int32_t, int32_t>{20240520, 1} : std::pair<int32_t, int32_t>{20240801, 7};
}

}  // namespace gtrain::text
