// distill_cache.h: the teacher-output cache of knowledge distillation (torch-free): a folder that
// `gtrain distill cache` writes once and student runs read instead of running the teacher.
//
//   DIR/distill_cache.json   DistillCacheManifest, written last (atomically, by rename): a folder
//                            without it is a half-written cache and is never read
//   DIR/shard_000000.bin     the entries of tokens [0, shard_tokens), then the next shard, ...
//
// One entry a token (global token g = sample index x tokens per sample + position: the logits at
// that position, which predict the target there; every position, trained or not): the teacher's k
// largest raw logits z_i (temperature-free, in descending order) with their ids, and the log-sum-exp
// of the whole row at the cache's temperature T, lse_T = log sum_v exp(z_v / T). A student run then
// forms the teacher's kept log-probabilities z_i / T - lse_T and the tail's mass 1 - sum_i exp(...)
// exactly (runtime/models/kd_loss.h, sparse_teacher). Exactness limits: the kept set is the same at
// every T (dividing by T > 0 keeps the order), but the tail's mass at another temperature needs the
// whole tail, which is not kept, so a cache serves the temperature it was made at only (part of its
// key, refused otherwise). Values are fp32 (the logits as the teacher's fp32 output gives them:
// bitwise the values an online teacher would give the same code), ids int32, and lse_T fp64 (4
// bytes a token more than fp32, against 8k for the entries): the tail's mass is a difference from 1,
// and an fp32 lse_T (error ~1e-7 x |lse_T|) would move it by about 1e-6, a relative error of
// 1e-6 / tail that reaches the divergence's tail term.
//
// A shard of n tokens is, little-endian with no header: ids int32 [n, k], logits float32 [n, k],
// lse float64 [n]; its size and CRC-32C are in the manifest and are checked when it is read.
//
// The cache is keyed by (teacher hash, data identity, vocabulary, k, temperature): a reader given
// another key refuses it in one line naming both (ConfigError, exit 2).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gtrain {

constexpr const char* kDistillCacheFormat = "gtrain-distill-cache";
constexpr int kDistillCacheVersion = 1;
constexpr const char* kDistillCacheManifestFile = "distill_cache.json";

// What a cache was made for; a student run computes its own and the reader compares them.
struct DistillCacheKey {
  std::string teacher_hash;  // identity of the teacher's weights (e.g. its checkpoint's or HF files' hash)
  std::string data;          // distill_data_key(): the training data and how it is cut into samples
  int64_t vocab = 0;         // the teacher's (and student's) vocabulary
  int64_t k = 0;             // logits kept per token
  double temperature = 1.0;  // T of lse_T

  nlohmann::json to_json() const;
  static DistillCacheKey from_json(const nlohmann::json& j, const std::string& where);
};

// The data part of the key: FNV-1a 64 (hex) of the dataset's identity (Dataset::identity(): its
// files, sizes and checksums) and of the tokens per sample, which together fix every global token's
// place (another sequence length cuts the same files into other samples).
std::string distill_data_key(const nlohmann::json& data_identity, int64_t tokens_per_sample);

struct DistillCacheShard {
  std::string file;    // name in the folder
  int64_t tokens = 0;  // entries in it
  std::string crc;     // CRC-32C of the whole file, 8 hex digits
};

struct DistillCacheManifest {
  std::string format = kDistillCacheFormat;
  int version = kDistillCacheVersion;
  DistillCacheKey key;
  std::string teacher;           // the teacher as the config named it (informational)
  nlohmann::json data_identity;  // the dataset's identity the data key was made from (informational)
  int64_t shard_tokens = 0;      // entries per shard (the last one may hold fewer)
  int64_t tokens = 0;            // entries in all
  std::vector<DistillCacheShard> shards;

  nlohmann::json to_json() const;
  // A DataError naming `where` for a missing or mistyped field, another format or version.
  static DistillCacheManifest from_json(const nlohmann::json& j, const std::string& where);
};

// The entries of consecutive tokens: row r's k ids and logits at [r * k, (r + 1) * k).
struct DistillEntries {
  int64_t k = 0;
  std::vector<int32_t> ids;
  std::vector<float> logits;
  std::vector<double> lse;
  int64_t tokens() const { return static_cast<int64_t>(lse.size()); }
};

// The shard file name of shard `index` (shard_000000.bin, ...).
std::string distill_shard_file(int64_t index);

// Writes shard `index` of DIR (tmp file, then renamed) and returns its manifest entry. Ranks that
// split the tokens at shard boundaries may each write their own shards; one then writes the
// manifest with all of them (write_distill_manifest).
DistillCacheShard write_distill_shard(const std::string& dir, int64_t index, const DistillEntries& e);

// Writes DIR/distill_cache.json atomically: the last step of making a cache. Checks that the shards
// hold `tokens` entries and that every shard but the last holds shard_tokens.
void write_distill_manifest(const std::string& dir, const DistillCacheManifest& m);

// Writes a cache token by token, in global order: shards as they fill, the manifest at finish().
// Constructing it removes DIR's manifest first, so a cache being rewritten is never read half-made.
class DistillCacheWriter {
 public:
  DistillCacheWriter(std::string dir, DistillCacheManifest header);  // header: key, teacher, shard_tokens
  // Appends entries (header.key.k wide) after those already written.
  void append(const DistillEntries& e);
  // Writes the last shard and then the manifest; returns the manifest written.
  DistillCacheManifest finish();

 private:
  void flush_shard();
  std::string dir_;
  DistillCacheManifest m_;
  DistillEntries pending_;
};

// Reads a cache: the manifest at construction (missing, malformed or of another format: a
// DataError naming the file); each shard is mapped into memory (not read whole: a cache is many
// gigabytes for a real corpus, and a student reads its tokens in the sampler's order) the first
// time one of its tokens is asked for, and checked then (size, CRC-32C). Not thread-safe.
class DistillCacheReader {
 public:
  explicit DistillCacheReader(std::string dir);
  ~DistillCacheReader();
  DistillCacheReader(const DistillCacheReader&) = delete;
  DistillCacheReader& operator=(const DistillCacheReader&) = delete;
  const DistillCacheManifest& manifest() const { return m_; }
  const std::string& dir() const { return dir_; }
  // A ConfigError in one line naming the manifest, the field that differs, and both values (e.g.
  // "made for data 1a2b..., this run's data is 3c4d...") when the cache was made for another key.
  void check_key(const DistillCacheKey& expected) const;
  // The entries of tokens [begin, end) (0 <= begin <= end <= manifest().tokens).
  DistillEntries read(int64_t begin, int64_t end);
  // The entries of these tokens, in this order (any order, repeats allowed; each in [0, tokens)).
  DistillEntries gather(const std::vector<int64_t>& tokens);

 private:
  struct Mapping;
  // Shard `index`'s bytes, mapped and checked on first use: ids, then logits, then lse.
  const char* shard(int64_t index);
  void append_token(int64_t g, DistillEntries& out);
  std::string dir_;
  DistillCacheManifest m_;
  std::vector<std::unique_ptr<Mapping>> mapped_;  // one a shard, null until first used
};

}  // namespace gtrain
