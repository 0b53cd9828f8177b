// distill_cache.cpp: the teacher-output cache's manifest, shard files, writer and reader.
#include "runtime/core/distill_cache.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "runtime/core/crc32c.h"
#include "runtime/core/errors.h"
#include "runtime/core/fnv.h"
#include "runtime/core/format.h"
#include "runtime/core/run_dir/run_files.h"
#include "runtime/core/unique_fd.h"

namespace gtrain {

namespace fs = std::filesystem;

namespace {
const char* const kRemake = "make the cache again (gtrain distill cache)";
const char* const kValues = "ids int32, logits float32, lse float64";  // the shards' arrays

template <class T>
T field(const nlohmann::json& j, const char* name, const std::string& where) {
  const auto it = j.find(name);
  if (it == j.end()) throw DataError(where + ": no \"" + name + "\"", kRemake);
  try {
    return it->get<T>();
  } catch (const nlohmann::json::exception&) {
    throw DataError(where + ": \"" + name + "\" has the wrong type", kRemake);
  }
}

std::string hex32(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// Bytes of a shard of n tokens of k entries.
uint64_t shard_bytes(int64_t n, int64_t k) {
  return static_cast<uint64_t>(n) * static_cast<uint64_t>(k) * 8 + static_cast<uint64_t>(n) * 8;
}

std::string path_in(const std::string& dir, const std::string& file) {
  return (fs::path(dir) / file).string();
}
}  // namespace

nlohmann::json DistillCacheKey::to_json() const {
  return {{"teacher_hash", teacher_hash}, {"data", data}, {"vocab", vocab}, {"k", k}, {"temperature", temperature}};
}

DistillCacheKey DistillCacheKey::from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw DataError(where + ": \"key\" is not a JSON object", kRemake);
  DistillCacheKey key;
  key.teacher_hash = field<std::string>(j, "teacher_hash", where);
  key.data = field<std::string>(j, "data", where);
  key.vocab = field<int64_t>(j, "vocab", where);
  key.k = field<int64_t>(j, "k", where);
  key.temperature = field<double>(j, "temperature", where);
  if (key.k < 1 || key.vocab < key.k || !(key.temperature > 0))
    throw DataError(str(where, ": k = ", key.k, ", vocab = ", key.vocab, ", temperature = ", key.temperature,
                        "; expected 1 <= k <= vocab and temperature > 0"),
                    kRemake);
  return key;
}

std::string distill_data_key(const nlohmann::json& data_identity, int64_t tokens_per_sample) {
  Fnv1a h;
  h.field(data_identity.dump()).field(std::to_string(tokens_per_sample));
  return h.hex();
}

nlohmann::json DistillCacheManifest::to_json() const {
  nlohmann::json shard_list = nlohmann::json::array();
  for (const auto& s : shards) shard_list.push_back({{"file", s.file}, {"tokens", s.tokens}, {"crc32c", s.crc}});
  return {{"format", format},
          {"version", version},
          {"key", key.to_json()},
          {"teacher", teacher},
          {"data_identity", data_identity},
          {"shard_tokens", shard_tokens},
          {"tokens", tokens},
          {"values", kValues},
          {"shards", shard_list}};
}

DistillCacheManifest DistillCacheManifest::from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) throw DataError(where + ": not a JSON object", kRemake);
  DistillCacheManifest m;
  m.format = field<std::string>(j, "format", where);
  if (m.format != kDistillCacheFormat)
    throw DataError(str(where, ": format \"", m.format, "\", expected \"", kDistillCacheFormat, "\""), kRemake);
  m.version = field<int>(j, "version", where);
  if (m.version != kDistillCacheVersion)
    throw DataError(str(where, ": version ", m.version, ", this gtrain reads version ", kDistillCacheVersion), kRemake);
  m.key = DistillCacheKey::from_json(field<nlohmann::json>(j, "key", where), where);
  m.teacher = field<std::string>(j, "teacher", where);
  m.data_identity = j.value("data_identity", nlohmann::json());
  m.shard_tokens = field<int64_t>(j, "shard_tokens", where);
  m.tokens = field<int64_t>(j, "tokens", where);
  const auto values = field<std::string>(j, "values", where);
  if (values != kValues) throw DataError(str(where, ": values \"", values, "\", expected \"", kValues, "\""), kRemake);
  int64_t total = 0;
  for (const auto& s : field<nlohmann::json>(j, "shards", where)) {
    DistillCacheShard shard{field<std::string>(s, "file", where), field<int64_t>(s, "tokens", where),
                            field<std::string>(s, "crc32c", where)};
    const std::string name = distill_shard_file(static_cast<int64_t>(m.shards.size()));
    if (shard.file != name)
      throw DataError(str(where, ": shard \"", shard.file, "\" listed where \"", name, "\" was expected"), kRemake);
    if (shard.tokens < 1 || shard.tokens > m.shard_tokens)
      throw DataError(
          str(where, ": shard ", shard.file, " holds ", shard.tokens, " tokens, expected 1 to ", m.shard_tokens),
          kRemake);
    total += shard.tokens;
    m.shards.push_back(std::move(shard));
  }
  // Every shard but the last is full: token g lies in shard g / shard_tokens.
  for (size_t i = 0; i + 1 < m.shards.size(); ++i)
    if (m.shards[i].tokens != m.shard_tokens)
      throw DataError(str(where, ": shard ", m.shards[i].file, " holds ", m.shards[i].tokens,
                          " tokens, expected shard_tokens = ", m.shard_tokens, " (only the last may hold fewer)"),
                      kRemake);
  if (total != m.tokens)
    throw DataError(str(where, ": the shards hold ", total, " tokens, \"tokens\" says ", m.tokens), kRemake);
  return m;
}

std::string distill_shard_file(int64_t index) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "shard_%06lld.bin", static_cast<long long>(index));
  return buf;
}

DistillCacheShard write_distill_shard(const std::string& dir, int64_t index, const DistillEntries& e) {
  const int64_t n = e.tokens();
  GT_CHECK(n > 0 && static_cast<int64_t>(e.ids.size()) == n * e.k && e.logits.size() == e.ids.size(),
           "distill entries with inconsistent sizes");
  std::string bytes;
  bytes.reserve(shard_bytes(n, e.k));
  bytes.append(reinterpret_cast<const char*>(e.ids.data()), e.ids.size() * sizeof(int32_t));
  bytes.append(reinterpret_cast<const char*>(e.logits.data()), e.logits.size() * sizeof(float));
  bytes.append(reinterpret_cast<const char*>(e.lse.data()), e.lse.size() * sizeof(double));
  DistillCacheShard shard{distill_shard_file(index), n, hex32(crc32c(bytes.data(), bytes.size()))};
  const std::string path = path_in(dir, shard.file), tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    f.flush();
    if (!f) throw Error(tmp + ": cannot write", "check that the disk is not full and " + dir + " is writable");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw Error(path + ": cannot write: " + ec.message(), "check that " + dir + " is writable");
  return shard;
}

void write_distill_manifest(const std::string& dir, const DistillCacheManifest& m) {
  int64_t total = 0;
  for (size_t i = 0; i < m.shards.size(); ++i) {
    GT_CHECK(
        i + 1 == m.shards.size() || m.shards[i].tokens == m.shard_tokens,
        str("distill cache shard ", m.shards[i].file, " holds ", m.shards[i].tokens, " tokens, not ", m.shard_tokens));
    total += m.shards[i].tokens;
  }
  GT_CHECK(total == m.tokens, str("distill cache shards hold ", total, " tokens, the manifest says ", m.tokens));
  write_json_file(path_in(dir, kDistillCacheManifestFile), m.to_json());
}

DistillCacheWriter::DistillCacheWriter(std::string dir, DistillCacheManifest header)
    : dir_(std::move(dir)), m_(std::move(header)) {
  GT_CHECK(m_.shard_tokens > 0 && m_.key.k > 0, "distill cache writer without shard_tokens or k");
  m_.tokens = 0;
  m_.shards.clear();
  pending_.k = m_.key.k;
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec) throw ConfigError(dir_ + ": cannot create the cache folder: " + ec.message());
  fs::remove(path_in(dir_, kDistillCacheManifestFile), ec);
  if (ec) throw Error(path_in(dir_, kDistillCacheManifestFile) + ": cannot remove the old manifest: " + ec.message());
}

void DistillCacheWriter::append(const DistillEntries& e) {
  GT_CHECK(e.k == m_.key.k, str("distill entries of k = ", e.k, ", the cache keeps ", m_.key.k));
  for (int64_t from = 0; from < e.tokens();) {
    const int64_t n = std::min(e.tokens() - from, m_.shard_tokens - pending_.tokens());
    const auto k = static_cast<size_t>(e.k);
    const auto a = static_cast<size_t>(from), b = static_cast<size_t>(from + n);
    pending_.ids.insert(pending_.ids.end(), e.ids.begin() + a * k, e.ids.begin() + b * k);
    pending_.logits.insert(pending_.logits.end(), e.logits.begin() + a * k, e.logits.begin() + b * k);
    pending_.lse.insert(pending_.lse.end(), e.lse.begin() + a, e.lse.begin() + b);
    from += n;
    if (pending_.tokens() == m_.shard_tokens) flush_shard();
  }
}

void DistillCacheWriter::flush_shard() {
  if (pending_.tokens() == 0) return;
  m_.shards.push_back(write_distill_shard(dir_, static_cast<int64_t>(m_.shards.size()), pending_));
  m_.tokens += pending_.tokens();
  pending_ = DistillEntries{};
  pending_.k = m_.key.k;
}

DistillCacheManifest DistillCacheWriter::finish() {
  flush_shard();
  write_distill_manifest(dir_, m_);
  return m_;
}

DistillCacheReader::DistillCacheReader(std::string dir) : dir_(std::move(dir)) {
  const std::string path = path_in(dir_, kDistillCacheManifestFile);
  std::ifstream f(path);
  if (!f)
    throw DataError(path + ": missing (not a cache gtrain distill cache finished)",
                    "point distill.cache at a folder `gtrain distill cache` wrote, or make it again");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw DataError(path + ": not JSON (" + e.what() + ")", kRemake);
  }
  m_ = DistillCacheManifest::from_json(j, path);
  mapped_.resize(m_.shards.size());
}

void DistillCacheReader::check_key(const DistillCacheKey& want) const {
  const std::string where = path_in(dir_, kDistillCacheManifestFile);
  const std::string hint =
      "make a cache for this run with gtrain distill cache, or set distill.cache = \"\" to "
      "run the teacher online";
  const auto& have = m_.key;
  if (have.data != want.data)
    throw ConfigError(str(where, ": made for data ", have.data, ", this run's data is ", want.data), hint);
  if (have.teacher_hash != want.teacher_hash)
    throw ConfigError(str(where, ": made for teacher ", have.teacher_hash, " (", m_.teacher,
                          "), this run's teacher is ", want.teacher_hash),
                      hint);
  if (have.vocab != want.vocab)
    throw ConfigError(str(where, ": made for a vocabulary of ", have.vocab, ", this run's is ", want.vocab), hint);
  if (have.k != want.k)
    throw ConfigError(str(where, ": keeps k = ", have.k, " logits a token, this run's distill.top_k is ", want.k),
                      hint);
  if (have.temperature != want.temperature)
    throw ConfigError(str(where, ": made at temperature ", have.temperature, ", this run's distill.temperature is ",
                          want.temperature, " (the tail's mass depends on it)"),
                      hint);
}

// A shard file mapped read-only for the reader's life.
struct DistillCacheReader::Mapping {
  void* data = MAP_FAILED;
  size_t bytes = 0;
  ~Mapping() {
    if (data != MAP_FAILED) munmap(data, bytes);
  }
};

DistillCacheReader::~DistillCacheReader() = default;

const char* DistillCacheReader::shard(int64_t index) {
  auto& slot = mapped_.at(static_cast<size_t>(index));
  if (slot) return static_cast<const char*>(slot->data);
  const auto& s = m_.shards.at(static_cast<size_t>(index));
  const std::string path = path_in(dir_, s.file);
  const std::string hint = "the cache is damaged: " + std::string(kRemake);
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) throw DataError(path + ": missing; " + kDistillCacheManifestFile + " lists it", hint);
  struct stat st {};
  if (fstat(fd.get(), &st) != 0) throw DataError(path + ": cannot be read: " + std::strerror(errno), hint);
  const uint64_t want = shard_bytes(s.tokens, m_.key.k);
  if (static_cast<uint64_t>(st.st_size) != want)
    throw DataError(str(path, ": ", st.st_size, " bytes, ", kDistillCacheManifestFile, " says ", want, " (", s.tokens,
                        " tokens of k = ", m_.key.k, ")"),
                    hint);
  auto map = std::make_unique<Mapping>();
  map->bytes = static_cast<size_t>(want);
  map->data = mmap(nullptr, map->bytes, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (map->data == MAP_FAILED) throw DataError(path + ": cannot be mapped: " + std::strerror(errno), hint);
  const std::string crc = hex32(crc32c(map->data, map->bytes));
  if (crc != s.crc)
    throw DataError(
        str(path, ": CRC-32C ", crc, ", ", kDistillCacheManifestFile, " says ", s.crc, " (a damaged shard)"), hint);
  slot = std::move(map);
  return static_cast<const char*>(slot->data);
}

void DistillCacheReader::append_token(int64_t g, DistillEntries& out) {
  const int64_t index = g / m_.shard_tokens, row = g - index * m_.shard_tokens;
  const int64_t n = m_.shards[static_cast<size_t>(index)].tokens, k = m_.key.k;
  const char* bytes = shard(index);
  const auto* ids = reinterpret_cast<const int32_t*>(bytes) + row * k;
  const auto* logits = reinterpret_cast<const float*>(bytes + n * k * 4) + row * k;
  double lse;
  std::memcpy(&lse, bytes + n * k * 8 + row * 8, sizeof lse);
  out.ids.insert(out.ids.end(), ids, ids + k);
  out.logits.insert(out.logits.end(), logits, logits + k);
  out.lse.push_back(lse);
}

DistillEntries DistillCacheReader::read(int64_t begin, int64_t end) {
  if (begin < 0 || end < begin || end > m_.tokens)
    throw DataError(str(path_in(dir_, kDistillCacheManifestFile), ": tokens [", begin, ", ", end, ") asked for, the ",
                        "cache holds ", m_.tokens),
                    "the cache was made for a shorter run of this data: " + std::string(kRemake));
  std::vector<int64_t> tokens(static_cast<size_t>(end - begin));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = begin + static_cast<int64_t>(i);
  return gather(tokens);
}

DistillEntries DistillCacheReader::gather(const std::vector<int64_t>& tokens) {
  DistillEntries out;
  out.k = m_.key.k;
  out.ids.reserve(tokens.size() * static_cast<size_t>(out.k));
  out.logits.reserve(tokens.size() * static_cast<size_t>(out.k));
  out.lse.reserve(tokens.size());
  for (const int64_t g : tokens) {
    if (g < 0 || g >= m_.tokens)
      throw DataError(
          str(path_in(dir_, kDistillCacheManifestFile), ": token ", g, " asked for, the cache holds ", m_.tokens),
          "the cache was made for other data: " + std::string(kRemake));
    append_token(g, out);
  }
  return out;
}

}  // namespace gtrain
