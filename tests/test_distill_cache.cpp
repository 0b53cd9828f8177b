// test_distill_cache.cpp: the teacher-output cache (runtime/core/distill_cache.h, torch-free): entries
// read back as written across shard edges and gathered in any order, a damaged or truncated shard and a missing
// manifest are refused naming the file, and a cache made for other data, teacher, k or temperature is refused in one
// line naming both identities.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/core/distill_cache.h"
#include "runtime/core/errors.h"
#include "tests/support/test_util.h"

namespace gtrain {
namespace {

constexpr int64_t kK = 3;

DistillCacheKey key() {
  return {"teacher-0123", distill_data_key(nlohmann::json::array({{{"file", "a.bin"}, {"crc", "12ab"}}}), 16), 50, kK,
          2.0};
}

// Token g's entries: ids g, g + 1, g + 2, logits -g / 4 - j (exact in fp32), lse g / 8 + 1e-12.
DistillEntries entries(int64_t from, int64_t to) {
  DistillEntries e;
  e.k = kK;
  for (int64_t g = from; g < to; ++g) {
    for (int64_t j = 0; j < kK; ++j) {
      e.ids.push_back(static_cast<int32_t>(g + j));
      e.logits.push_back(static_cast<float>(-g / 4.0 - j));
    }
    e.lse.push_back(g / 8.0 + 1e-12);  // digits beyond fp32's
  }
  return e;
}

// A cache of `tokens` tokens in shards of 4, appended in uneven pieces.
DistillCacheManifest make_cache(const std::string& dir, int64_t tokens) {
  DistillCacheManifest header;
  header.key = key();
  header.teacher = "/models/teacher";
  header.shard_tokens = 4;
  DistillCacheWriter w(dir, header);
  for (int64_t g = 0; g < tokens;) {
    const int64_t n = std::min<int64_t>(tokens - g, 3);
    w.append(entries(g, g + n));
    g += n;
  }
  return w.finish();
}

void expect_equal(const DistillEntries& a, const DistillEntries& b) {
  EXPECT_EQ(a.k, b.k);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.logits, b.logits);
  EXPECT_EQ(a.lse, b.lse);
}

TEST(DistillCache, RoundTripsAcrossShardEdges) {
  test::TempDir dir;
  const auto written = make_cache(dir.path(), 11);
  ASSERT_EQ(written.shards.size(), 3u);
  EXPECT_EQ(written.shards[2].tokens, 3);
  DistillCacheReader r(dir.path());
  EXPECT_EQ(r.manifest().tokens, 11);
  EXPECT_EQ(r.manifest().teacher, "/models/teacher");
  EXPECT_EQ(r.manifest().to_json(), written.to_json());
  r.check_key(key());
  expect_equal(r.read(0, 11), entries(0, 11));
  expect_equal(r.read(3, 9), entries(3, 9));  // three shards' pieces
  expect_equal(r.read(9, 11), entries(9, 11));
  expect_equal(r.read(5, 5), entries(5, 5));
  EXPECT_NE(test::error_of<DataError>([&] { r.read(8, 12); }).find("tokens [8, 12) asked for, the cache holds 11"),
            std::string::npos);
}

// A student reads its tokens in the sampler's order: any order, repeats, across shards, each equal to
// its entry written in order; a token past the end is refused naming the count.
TEST(DistillCache, GathersTokensInAnyOrder) {
  test::TempDir dir;
  make_cache(dir.path(), 11);
  DistillCacheReader r(dir.path());
  const std::vector<int64_t> tokens = {10, 0, 5, 5, 3, 9, 4, 1};
  const DistillEntries got = r.gather(tokens);
  ASSERT_EQ(got.tokens(), static_cast<int64_t>(tokens.size()));
  for (size_t i = 0; i < tokens.size(); ++i) {
    const DistillEntries want = entries(tokens[i], tokens[i] + 1);
    const auto k = static_cast<size_t>(kK);
    EXPECT_EQ(std::vector<int32_t>(got.ids.begin() + i * k, got.ids.begin() + (i + 1) * k), want.ids) << tokens[i];
    EXPECT_EQ(std::vector<float>(got.logits.begin() + i * k, got.logits.begin() + (i + 1) * k), want.logits);
    EXPECT_EQ(got.lse[i], want.lse[0]) << tokens[i];
  }
  EXPECT_EQ(r.gather({}).tokens(), 0);
  EXPECT_NE(test::error_of<DataError>([&] {
              r.gather({2, 11});
            }).find("token 11 asked for, the cache holds 11"),
            std::string::npos);
}

TEST(DistillCache, DamagedShardIsRefusedNamingIt) {
  test::TempDir dir;
  make_cache(dir.path(), 11);
  const std::string shard = dir.file("shard_000001.bin");
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(13);
    f.put('\x7f');
  }
  DistillCacheReader r(dir.path());
  expect_equal(r.read(0, 4), entries(0, 4));  // the intact shard still reads
  const auto what = test::error_of<DataError>([&] { r.read(2, 6); });
  EXPECT_EQ(what.rfind(shard + ": CRC-32C ", 0), 0u) << what;
  EXPECT_NE(what.find(", distill_cache.json says "), std::string::npos) << what;
  EXPECT_NE(what.find("(a damaged shard)"), std::string::npos) << what;
}

TEST(DistillCache, TruncatedShardIsRefused) {
  test::TempDir dir;
  make_cache(dir.path(), 11);
  const std::string shard = dir.file("shard_000002.bin");
  std::filesystem::resize_file(shard, 44);
  DistillCacheReader r(dir.path());
  EXPECT_EQ(test::error_of<DataError>([&] { r.read(8, 11); }),
            shard + ": 44 bytes, distill_cache.json says 96 (3 tokens of k = 3)");
  std::filesystem::remove(shard);
  EXPECT_EQ(test::error_of<DataError>([&] { r.read(10, 11); }), shard + ": missing; distill_cache.json lists it");
}

// Shards without a manifest (a writer that stopped early) are not a cache; rewriting one removes the
// old manifest before the first shard.
TEST(DistillCache, MissingManifestIsRefused) {
  test::TempDir dir;
  make_cache(dir.path(), 11);
  DistillCacheManifest header;
  header.key = key();
  header.shard_tokens = 4;
  {
    DistillCacheWriter w(dir.path(), header);
    w.append(entries(0, 5));  // no finish()
  }
  EXPECT_EQ(test::error_of<DataError>([&] { DistillCacheReader r(dir.path()); }),
            dir.file("distill_cache.json") + ": missing (not a cache gtrain distill cache finished)");
  test::write_file(dir.file("distill_cache.json"), "{\"format\": \"gtrain-distill-cache\", \"version\": 1}");
  EXPECT_EQ(test::error_of<DataError>([&] { DistillCacheReader r(dir.path()); }),
            dir.file("distill_cache.json") + ": no \"key\"");
}

TEST(DistillCache, CacheForOtherDataOrTeacherIsRefusedNamingBoth) {
  test::TempDir dir;
  make_cache(dir.path(), 6);
  DistillCacheReader r(dir.path());
  const std::string where = dir.file("distill_cache.json");
  auto other = key();
  other.data = distill_data_key(nlohmann::json::array({{{"file", "b.bin"}, {"crc", "12ab"}}}), 16);
  ASSERT_NE(other.data, key().data);
  EXPECT_NE(distill_data_key(nlohmann::json::array({{{"file", "a.bin"}, {"crc", "12ab"}}}), 32), key().data);
  try {
    r.check_key(other);
    ADD_FAILURE() << "accepted";
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), where + ": made for data " + key().data + ", this run's data is " + other.data);
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
  }
  other = key();
  other.teacher_hash = "teacher-4567";
  EXPECT_EQ(test::error_of<ConfigError>([&] { r.check_key(other); }),
            where + ": made for teacher teacher-0123 (/models/teacher), this run's teacher is teacher-4567");
  other = key();
  other.k = 64;
  EXPECT_EQ(test::error_of<ConfigError>([&] { r.check_key(other); }),
            where + ": keeps k = 3 logits a token, this run's distill.top_k is 64");
  other = key();
  other.temperature = 1.0;
  EXPECT_EQ(test::error_of<ConfigError>([&] { r.check_key(other); }),
            where + ": made at temperature 2, this run's distill.temperature is 1 (the tail's mass depends on it)");
}

TEST(DistillCache, ManifestWithInconsistentShardsIsRefused) {
  test::TempDir dir;
  auto m = make_cache(dir.path(), 11);
  auto j = m.to_json();
  j["tokens"] = 12;
  EXPECT_EQ(test::error_of<DataError>([&] { DistillCacheManifest::from_json(j, "c.json"); }),
            "c.json: the shards hold 11 tokens, \"tokens\" says 12");
  j = m.to_json();
  j["shards"][1]["tokens"] = 3;
  j["tokens"] = 10;
  EXPECT_EQ(test::error_of<DataError>([&] { DistillCacheManifest::from_json(j, "c.json"); }),
            "c.json: shard shard_000001.bin holds 3 tokens, expected shard_tokens = 4 (only the last may hold fewer)");
  j = m.to_json();
  j["shards"][0]["file"] = "../elsewhere.bin";
  EXPECT_EQ(test::error_of<DataError>([&] { DistillCacheManifest::from_json(j, "c.json"); }),
            "c.json: shard \"../elsewhere.bin\" listed where \"shard_000000.bin\" was expected");
}

}  // namespace
}  // namespace gtrain
