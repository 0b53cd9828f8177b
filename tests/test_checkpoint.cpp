// test_checkpoint.cpp: checkpoints: periodic saves and reload, bitwise resume, refused resumes,
// deadlines, corrupt shards, resharding, pruning, superseding, malformed manifests.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <thread>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/crc32c.h"
#include "runtime/checkpoint/staging_buffer.h"
#include "runtime/core/errors.h"
#include "runtime/core/schedule.h"
#include "tests/support/test_util.h"
#include "tests/support/trainer_util.h"

namespace gtrain {
namespace {

namespace fs = std::filesystem;

// The staging writer leaves exactly the bytes given, on a disk file system (O_DIRECT: whole blocks,
// then cut back) and on one without O_DIRECT (tmpfs: through the page cache), and reuses its memory.
TEST(Checkpoint, StagedWriteIsExactWithAndWithoutDirectIo) {
  test::TempDir dir;
  StagingBuffer staging;
  char* const first = staging.reserve(10000);
  ASSERT_EQ(reinterpret_cast<uintptr_t>(first) % StagingBuffer::kAlign, 0u);
  EXPECT_EQ(staging.capacity(), 12288u);
  EXPECT_EQ(staging.reserve(5000), first);  // large enough: the same memory
  for (size_t i = 0; i < 10000; ++i) first[i] = static_cast<char>(i * 7 + 3);
  std::vector<std::string> paths = {dir.file("shard.bin")};
  if (fs::is_directory("/dev/shm")) paths.push_back("/dev/shm/gtrain-staged-" + std::to_string(::getpid()));
  for (const auto& path : paths) {
    bool direct = false;
    const int fd = open_for_staged_write(path, &direct);
    ASSERT_GE(fd, 0) << path;
    write_staged(fd, direct, first, 10000, path);
    ::close(fd);
    const std::string back = test::read_file(path);
    ASSERT_EQ(back.size(), 10000u) << path << (direct ? " (O_DIRECT)" : " (page cache)");
    EXPECT_EQ(back, std::string(first, 10000)) << path;
    if (path.rfind("/dev/shm/", 0) == 0) fs::remove(path);
  }
  EXPECT_THROW(write_staged(-1, false, first, 10, "nowhere.bin"), CheckpointError);
}

TEST(Checkpoint, PeriodicSavesKeepNewestAndReload) {
  test::TempDir dir;
  auto c = synthetic_mlp(10, 16);
  c.checkpoint.interval = 3;
  c.checkpoint.keep = 2;
  TrainerPaths paths;
  paths.checkpoints = dir.file("ckpt");
  paths.metrics = dir.file("metrics.jsonl");
  auto t = make_trainer(c, 0, paths);
  t->run();
  auto all = list_checkpoints(paths.checkpoints);
  ASSERT_EQ(all.size(), 2u);  // saved at 3, 6, 9 and the end (10); the newest two remain
  EXPECT_EQ(all[0].step, 9);
  EXPECT_EQ(all[1].step, 10);
  EXPECT_EQ(all[1].consumed_samples, 160);
  CheckpointReader ck(all[1].path);
  EXPECT_TRUE(ck.verify().empty());
  EXPECT_EQ(ck.read("optimizer.step").item<int64_t>(), 10);
  // A fresh trainer resumed from it holds the same parameters and optimizer state.
  auto fresh = make_trainer(c);
  fresh->resume(all[1].path);
  EXPECT_EQ(fresh->steps_done(), 10);
  auto a = params_of(*t), b = params_of(*fresh);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i]));
  auto sa = t->engine().state_shards(), sb = fresh->engine().state_shards();
  ASSERT_EQ(sa.size(), sb.size());
  for (size_t i = 0; i < sa.size(); ++i) EXPECT_TRUE(torch::equal(sa[i].data, sb[i].data)) << sa[i].name;
  // A half-written checkpoint (no manifest) is not listed.
  std::filesystem::create_directories(paths.checkpoints + "/step_00000011");
  EXPECT_EQ(list_checkpoints(paths.checkpoints).size(), 2u);
}

// Resuming mid-run on the same layout continues bitwise identically.
TEST(Checkpoint, ResumeIsBitwiseIdentical) {
  test::TempDir dir;
  auto c = synthetic_mlp(12, 16);
  c.model.dropout = 0.1;
  std::vector<double> ref;
  {
    auto t = make_trainer(c);
    for (int s = 0; s < 12; ++s) ref.push_back(t->train_step().loss);
  }
  TrainerPaths paths;
  paths.checkpoints = dir.file("ckpt");
  auto first = make_trainer(c, 0, paths);
  for (int s = 0; s < 5; ++s) EXPECT_EQ(first->train_step().loss, ref[s]);
  first->save_checkpoint_now();
  first->finish_saves();
  auto second = make_trainer(c, 0, paths);
  second->resume(find_latest_valid_checkpoint(paths.checkpoints, nullptr));
  for (int s = 5; s < 12; ++s) EXPECT_EQ(second->train_step().loss, ref[s]) << "step " << s;
}

// Runs `c` to its end, saving into dir/<name>; returns the final checkpoint's path.
std::string finished_run_checkpoint(const test::TempDir& dir, const JobConfig& c, const std::string& name) {
  TrainerPaths paths;
  paths.checkpoints = dir.file(name);
  make_trainer(c, 0, paths)->run();
  return find_latest_valid_checkpoint(paths.checkpoints, nullptr);
}

TEST(Checkpoint, ChangedModelOrBatchIsRefused) {
  test::TempDir dir;
  auto c = synthetic_mlp(2, 16);
  const std::string path = finished_run_checkpoint(dir, c, "ckpt");
  auto wider = c;
  wider.model.hidden = {48};
  try {
    make_trainer(wider)->resume(path);
    FAIL();
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("different model (model.hidden [32] -> [48])"), std::string::npos) << e.what();
  }
  auto bigger = c;
  bigger.train.global_batch = 32;
  EXPECT_THROW(make_trainer(bigger)->resume(path), ResumeMismatchError);
}

// Only the keys that shape the model's parameters must stay: keys the model does not read may
// change, model.vocab = 0 is the data's vocabulary, and a changed dropout resumes (it changes the
// trajectory, not the tensors).
TEST(Checkpoint, ResumeComparesTheKeysThatShapeTheModel) {
  test::TempDir dir;
  auto c = synthetic_mlp(2, 16);
  const std::string mlp_ckpt = finished_run_checkpoint(dir, c, "ckpt");
  auto unused = c;
  unused.model.channels = {8};
  unused.model.n_layer = 9;
  unused.model.init_std = 0.5;
  unused.model.dropout = 0.2;
  auto t = make_trainer(unused);
  EXPECT_NO_THROW(t->resume(mlp_ckpt));
  EXPECT_EQ(t->steps_done(), 2);

  // A byte-level gpt saved with model.vocab = 0 (256 from the data) resumes with vocab = 256.
  std::string text;
  for (int i = 0; i < 400; ++i) text += "the quick brown fox " + std::to_string(i) + "\n";
  test::write_file(dir.file("t.txt"), text);
  JobConfig g;
  g.model.name = "gpt";
  g.model.n_layer = 1;
  g.model.n_head = 2;
  g.model.n_embd = 16;
  g.model.seq_len = 8;
  g.data.kind = DataKind::text_bytes;
  g.data.path = dir.file("t.txt");
  g.train.global_batch = 4;
  g.train.steps = 2;
  g.log.progress = "none";
  const std::string gpt_ckpt = finished_run_checkpoint(dir, g, "gpt");
  auto explicit_vocab = g;
  explicit_vocab.model.vocab = 256;
  explicit_vocab.model.hidden = {7};
  EXPECT_NO_THROW(make_trainer(explicit_vocab)->resume(gpt_ckpt));
  auto other_vocab = g;
  other_vocab.model.vocab = 512;
  try {
    make_trainer(other_vocab)->resume(gpt_ckpt);
    FAIL() << "a different vocabulary resumed";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("different model (model.vocab 256 -> 512)"), std::string::npos) << e.what();
  }
}

// A deadline inside the save lead still lets a stage run one step and save (every stage makes
// progress); one already past when the stage starts ends it before its first step, saving nothing.
TEST(Checkpoint, DeadlineBeforeTheFirstStep) {
  test::TempDir dir;
  auto c = synthetic_mlp(50, 16);
  TrainerPaths paths;
  paths.checkpoints = dir.file("ckpt");
  StageOptions close;
  close.ledger = dir.file("stages.jsonl");
  close.deadline_unix = unix_now() + 0.5;  // inside the lead (min_lead_s 5)
  close.deadline_source = "--time-limit";
  auto first = make_trainer(c, 0, paths);
  first->set_stage(close);
  auto s1 = first->run();
  EXPECT_TRUE(s1.stopped_early);
  EXPECT_EQ(s1.stage_steps, 1);
  ASSERT_EQ(list_checkpoints(paths.checkpoints).size(), 1u);

  StageOptions past = close;
  past.deadline_unix = unix_now() - 1.0;
  auto second = make_trainer(c, 0, paths);
  second->resume(find_latest_valid_checkpoint(paths.checkpoints, nullptr));
  second->set_stage(past);
  auto s2 = second->run();
  EXPECT_TRUE(s2.stopped_early);
  EXPECT_EQ(s2.stage_steps, 0);
  EXPECT_EQ(s2.steps, 1);
  EXPECT_EQ(s2.stop_reason, "deadline (--time-limit)");
  const auto all = list_checkpoints(paths.checkpoints);
  ASSERT_EQ(all.size(), 1u);  // nothing new saved
  EXPECT_EQ(all[0].step, 1);
  const auto ledger = test::lines(test::read_file(dir.file("stages.jsonl")));
  ASSERT_EQ(ledger.size(), 2u);
  const auto row = nlohmann::json::parse(ledger[1]);
  EXPECT_EQ(row.at("step_from"), 1);
  EXPECT_EQ(row.at("step_to"), 1);
  EXPECT_EQ(row.at("exit").get<std::string>().rfind("resumable: deadline", 0), 0u) << row.dump();
}

// A 4-step run of the small MLP that saves at steps 2 and 4 into dir/ckpt (paths->checkpoints).
std::vector<CheckpointInfo> two_checkpoints(const test::TempDir& dir, TrainerPaths* paths) {
  auto c = synthetic_mlp(4, 16);
  c.checkpoint.interval = 2;
  paths->checkpoints = dir.file("ckpt");
  make_trainer(c, 0, *paths)->run();
  return list_checkpoints(paths->checkpoints);
}

// A flipped byte is caught by its checksum and the previous checkpoint is used, with a warning
// naming the file.
TEST(Checkpoint, CorruptShardFallsBackToPrevious) {
  test::TempDir dir;
  TrainerPaths paths;
  const auto all = two_checkpoints(dir, &paths);
  ASSERT_EQ(all.size(), 2u);
  const std::string shard = all[1].path + "/shard_0.bin";
  std::string bytes = test::read_file(shard);
  bytes[bytes.size() / 2] ^= 0x20;
  test::write_file(shard, bytes);
  std::vector<std::string> warnings;
  EXPECT_EQ(find_latest_valid_checkpoint(paths.checkpoints, &warnings), all[0].path);
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("shard_0.bin: checksum mismatch"), std::string::npos) << warnings[0];
}

// Pieces written with ZeRO chunks and tensor-parallel-like regions assemble into global tensors.
TEST(Checkpoint, ShardsAssembleFromRegionsAndFlatRanges) {
  test::TempDir dir;
  auto global = torch::arange(24, torch::kFloat).reshape({4, 6});
  // Two "tp" ranks own column halves; each half is split in two flat "ZeRO" chunks.
  auto part = [&](int rank) {
    SaveRequest r;
    r.dir = dir.file("ck");
    r.step = 1;
    r.rank = rank;
    r.world = 2;
    r.token = "t";
    if (rank == 0) r.meta = CheckpointMeta{};  // the model key alone
    auto half = global.narrow(1, rank * 3, 3).contiguous().view({-1});
    r.shards.push_back({"w", {4, 6}, {0, rank * 3}, {4, 3}, 0, half.narrow(0, 0, 5), true});
    r.shards.push_back({"w", {4, 6}, {0, rank * 3}, {4, 3}, 5, half.narrow(0, 5, 7), true});
    return r;
  };
  std::thread other([&] { write_checkpoint(part(1)); });
  write_checkpoint(part(0));  // rank 0 commits once rank 1's part is there
  other.join();
  CheckpointReader ck(dir.file("ck/step_00000001"));
  EXPECT_TRUE(torch::equal(ck.read("w"), global));
  EXPECT_TRUE(ck.verify().empty());
}

// A small committed checkpoint (one 2x3 tensor) at `step`, written with `keep`.
void tiny_checkpoint(const std::string& dir, int64_t step, int64_t keep, const std::string& token = "t") {
  SaveRequest r;
  r.dir = dir;
  r.step = step;
  r.consumed_samples = step * 4;
  r.keep = keep;
  r.token = token;
  r.meta = CheckpointMeta{};  // the model key alone
  auto w = torch::arange(6, torch::kFloat).reshape({2, 3}) + static_cast<double>(step);
  r.shards.push_back({"w", {2, 3}, {0, 0}, {2, 3}, 0, w.view({-1}), true});
  write_checkpoint(r);
}

// manifest.json is the JSON gtrain has always written: the manifest assembled from the ranks'
// piece lists, keys spelled out here as the format documents them, indented by one space.
TEST(Checkpoint, ManifestIsTheJsonGtrainAlwaysWrote) {
  test::TempDir dir;
  tiny_checkpoint(dir.file("ck"), 3, 2);
  const std::string step = dir.file("ck/step_00000003");
  const auto w = torch::arange(6, torch::kFloat).reshape({2, 3}) + 3.0;
  const uint32_t crc = crc32c(w.data_ptr(), w.nbytes());
  const nlohmann::json expected = {{"format", "gtrain-checkpoint"},
                                   {"version", 4},
                                   {"step", 3},
                                   {"consumed_samples", 12},
                                   {"world", 1},
                                   {"model", nlohmann::json::object()},
                                   {"tensors",
                                    {{"w",
                                      {{"dtype", "float32"},
                                       {"shape", {2, 3}},
                                       {"pieces",
                                        {{{"region_offsets", {0, 0}},
                                          {"region_shape", {2, 3}},
                                          {"flat_begin", 0},
                                          {"numel", 6},
                                          {"file", "shard_0.bin"},
                                          {"offset", 0},
                                          {"nbytes", 24},
                                          {"crc32c", crc},
                                          {"rank", 0}}}}}}}}};
  EXPECT_EQ(test::read_file(step + "/manifest.json"), expected.dump(1));
  EXPECT_EQ(nlohmann::json::parse(test::read_file(step + "/shard_0.json")),
            nlohmann::json::array({{{"name", "w"},
                                    {"dtype", "float32"},
                                    {"shape", {2, 3}},
                                    {"region_offsets", {0, 0}},
                                    {"region_shape", {2, 3}},
                                    {"flat_begin", 0},
                                    {"numel", 6},
                                    {"file", "shard_0.bin"},
                                    {"offset", 0},
                                    {"nbytes", 24},
                                    {"crc32c", crc}}}));
  EXPECT_EQ(CheckpointReader(step).manifest().to_json(), expected);
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Pruning deletes only checkpoints older than the one just committed: newer ones (another
// trajectory's) are not its to delete, and must not push its own out of `keep`.
TEST(Checkpoint, PruningOnlyDeletesOlderCheckpoints) {
  test::TempDir dir;
  const std::string ck = dir.file("ck");
  tiny_checkpoint(ck, 0, 10);
  tiny_checkpoint(ck, 1, 10);
  tiny_checkpoint(ck, 7, 10);
  tiny_checkpoint(ck, 2, 2);  // keeps itself and step 1; step 7 is not older, so untouched
  EXPECT_EQ(entries(ck), (std::vector<std::string>{"step_00000001", "step_00000002", "step_00000007"}));
  EXPECT_EQ(CheckpointReader(ck + "/step_00000002").read("w")[0][0].item<float>(), 2.0f);
  EXPECT_EQ(CheckpointReader(ck + "/step_00000007").step(), 7);
}

// A crash while pruning leaves a half-deleted step directory (no manifest) or a *.tmp-* rename of
// one; the next commit removes both.
TEST(Checkpoint, CommitCleansIncompleteStepDirectories) {
  test::TempDir dir;
  const std::string ck = dir.file("ck");
  tiny_checkpoint(ck, 1, 5);
  std::filesystem::create_directories(ck + "/step_00000009");
  test::write_file(ck + "/step_00000009/shard_1.json", "[]");
  std::filesystem::create_directories(ck + "/step_00000003.tmp-retired-old");
  test::write_file(ck + "/step_00000003.tmp-retired-old/shard_0.bin", "x");
  tiny_checkpoint(ck, 2, 5);
  EXPECT_EQ(entries(ck), (std::vector<std::string>{"step_00000001", "step_00000002"}));
  // Pruned directories leave nothing behind either.
  tiny_checkpoint(ck, 3, 1);
  EXPECT_EQ(entries(ck), (std::vector<std::string>{"step_00000003"}));
}

// Checkpoints newer than the resume step are moved aside, never deleted.
TEST(Checkpoint, SupersedeMovesNewerCheckpointsAside) {
  test::TempDir dir;
  const std::string ck = dir.file("ck");
  for (int s = 1; s <= 4; ++s) tiny_checkpoint(ck, s, 10);
  auto moved = supersede_checkpoints(ck, 2, ck + "/step_00000002");
  EXPECT_EQ(moved.steps, (std::vector<int64_t>{3, 4}));
  ASSERT_EQ(moved.folder.rfind(ck + "/superseded-", 0), 0u) << moved.folder;
  EXPECT_EQ(entries(moved.folder), (std::vector<std::string>{"step_00000003", "step_00000004"}));
  EXPECT_EQ(CheckpointReader(moved.folder + "/step_00000004").step(), 4);
  ASSERT_EQ(list_checkpoints(ck).size(), 2u);
  EXPECT_EQ(list_checkpoints(ck).back().step, 2);
  EXPECT_TRUE(supersede_checkpoints(ck, 2).steps.empty());
  // A later commit keeps the superseded folder (not a leftover to clean).
  tiny_checkpoint(ck, 3, 1);
  EXPECT_TRUE(std::filesystem::exists(moved.folder + "/step_00000004/manifest.json"));
  // Starting over: every checkpoint goes, into a second folder when the first name is taken.
  auto all = supersede_checkpoints(ck, -1);
  EXPECT_EQ(all.steps, (std::vector<int64_t>{3}));
  EXPECT_NE(all.folder, moved.folder);
  EXPECT_TRUE(list_checkpoints(ck).empty());
}

// Manifests that parse but have the wrong shape are refused with the manifest's path and the key,
// and auto-resume falls back to the previous checkpoint (as it does for a checksum mismatch).
TEST(Checkpoint, MalformedManifestIsRefusedAndSkipped) {
  test::TempDir dir;
  TrainerPaths paths;
  const auto all = two_checkpoints(dir, &paths);
  ASSERT_EQ(all.size(), 2u);
  const std::string manifest = all[1].path + "/manifest.json";
  const std::string pristine = test::read_file(manifest);
  const auto good = nlohmann::json::parse(pristine);
  const std::string t0 = good.at("tensors").begin().key();
  const std::string p0 = "tensors." + t0 + ".pieces[0]";
  using J = nlohmann::json;
  struct Case {
    std::string key;
    std::function<void(J&)> change;
  };
  const std::vector<Case> cases = {
      {"must be a JSON object",
       [](J& m) {
         m = J::array({1, 2});
       }},
      {"'step'", [](J& m) { m["step"] = "5"; }},
      {"'step'", [](J& m) { m["step"] = -1; }},
      {"'consumed_samples'", [](J& m) { m.erase("consumed_samples"); }},
      {"'consumed_samples'", [](J& m) { m["consumed_samples"] = 1.5; }},
      {"'model'", [](J& m) { m["model"] = nullptr; }},
      {"'model'", [](J& m) { m["model"] = J::array(); }},
      {"'tensors'", [](J& m) { m["tensors"] = J::object(); }},
      {"'tensors'", [](J& m) { m["tensors"] = J::array({1}); }},
      {"'tensors." + t0 + ".dtype'", [&](J& m) { m["tensors"][t0]["dtype"] = 3; }},
      {"'tensors." + t0 + ".shape'", [&](J& m) { m["tensors"][t0]["shape"] = J::array({-1}); }},
      {"'tensors." + t0 + ".pieces'", [&](J& m) { m["tensors"][t0]["pieces"] = J::object(); }},
      {"'" + p0 + ".file'", [&](J& m) { m["tensors"][t0]["pieces"][0]["file"] = "../../../etc/passwd"; }},
      {"'" + p0 + ".file'", [&](J& m) { m["tensors"][t0]["pieces"][0]["file"] = "/etc/passwd"; }},
      {"'" + p0 + ".file'", [&](J& m) { m["tensors"][t0]["pieces"][0]["file"] = 7; }},
      {"'" + p0 + ".offset'", [&](J& m) { m["tensors"][t0]["pieces"][0]["offset"] = -4; }},
      {"'" + p0 + ".nbytes'", [&](J& m) { m["tensors"][t0]["pieces"][0]["nbytes"] = "8"; }},
      {"'" + p0 + ".crc32c'", [&](J& m) { m["tensors"][t0]["pieces"][0]["crc32c"] = -1; }},
      {"'" + p0 + ".crc32c'", [&](J& m) { m["tensors"][t0]["pieces"][0]["crc32c"] = 1ll << 33; }},
      {"'" + p0 + ".region_offsets'",
       [&](J& m) {
         m["tensors"][t0]["pieces"][0]["region_offsets"] = J::array({0, 0, 0, 0, 0});
       }},
      {"'" + p0 + ".region_shape'", [&](J& m) { m["tensors"][t0]["pieces"][0]["region_shape"] = "x"; }},
      {"'train_samples'", [](J& m) { m["train_samples"] = "2382"; }},
      {"'train_samples'", [](J& m) { m["train_samples"] = -5; }},
      {"'probe_indices'", [](J& m) { m["probe_indices"] = J::array(); }},
      {"'probe_indices'",
       [](J& m) {
         m["probe_indices"] = J::array({1, -2});
       }},
      {"'probe_indices'", [](J& m) { m["probe_indices"] = "abc"; }},
      {"'vocab_from_data'", [](J& m) { m["vocab_from_data"] = 1; }},
      {"'train_data'", [](J& m) { m["train_data"] = "s_*.bin"; }},
      // Consistent in type, not in value: nothing here may be allocated or trusted.
      {"'consumed_samples'", [](J& m) { m["consumed_samples"] = m["consumed_samples"].get<int64_t>() + 1; }},
      {"'tensors." + t0 + ".shape'",
       [&](J& m) {
         m["tensors"][t0]["shape"] = J::array({10000000000ll, 10000000000ll});
       }},
      {"'tensors." + t0 + ".pieces'",  // a shape larger than its pieces (verify used to zero-fill it)
       [&](J& m) {
         auto shape = m["tensors"][t0]["shape"].get<std::vector<int64_t>>();
         shape[0] *= 1000;
         m["tensors"][t0]["shape"] = shape;
       }},
      {"'" + p0 + ".nbytes'",
       [&](J& m) {
         m["tensors"][t0]["pieces"][0]["nbytes"] = m["tensors"][t0]["pieces"][0]["nbytes"].get<int64_t>() + 4;
       }},
  };
  for (const auto& k : cases) {
    J m = good;
    k.change(m);
    test::write_file(manifest, m.dump());
    try {
      CheckpointReader r(all[1].path);
      ADD_FAILURE() << "accepted a manifest with a bad " << k.key;
    } catch (const CheckpointError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(manifest), std::string::npos) << what;
      EXPECT_NE(what.find(k.key), std::string::npos) << what;
      EXPECT_EQ(what.find("json.exception"), std::string::npos) << what;
    }
    std::vector<std::string> warnings;
    EXPECT_EQ(find_latest_valid_checkpoint(paths.checkpoints, &warnings), all[0].path) << k.key;
    ASSERT_EQ(warnings.size(), 1u) << k.key;
    EXPECT_NE(warnings[0].find(k.key), std::string::npos) << warnings[0];
  }
  // Manifests that open but cannot be resumed from: skipped too, and verify does not say OK.
  const std::vector<Case> unusable = {
      {"has no tensor '" + t0 + "', which shard_0.json lists", [&](J& m) { m["tensors"].erase(t0); }},
      {"key 'probe_loss' is missing", [](J& m) { m.erase("probe_loss"); }},
  };
  for (const auto& k : unusable) {
    J m = good;
    k.change(m);
    test::write_file(manifest, m.dump());
    std::vector<std::string> warnings;
    EXPECT_EQ(find_latest_valid_checkpoint(paths.checkpoints, &warnings), all[0].path) << k.key;
    ASSERT_EQ(warnings.size(), 1u) << k.key;
    EXPECT_NE(warnings[0].find(k.key), std::string::npos) << warnings[0];
  }
  {
    J m = good;
    m["tensors"].erase(t0);
    test::write_file(manifest, m.dump());
    auto v = test::run_command(GTRAIN_BINARY + " ckpt verify " + all[1].path);
    EXPECT_NE(v.exit_code, 0) << v.output;
    EXPECT_NE(v.output.find("has no tensor '" + t0 + "'"), std::string::npos) << v.output;
  }
  // The tools: inspect prints one clear line (no half report); verify of 0 tensors is not OK.
  J m = good;
  m["tensors"][t0]["pieces"][0]["nbytes"] = "8";
  test::write_file(manifest, m.dump());
  auto inspect = test::run_command(GTRAIN_BINARY + " ckpt inspect " + all[1].path);
  EXPECT_NE(inspect.exit_code, 0) << inspect.output;
  EXPECT_EQ(test::lines(inspect.output).size(), 1u) << inspect.output;
  EXPECT_NE(inspect.output.find(manifest + ": key '" + p0 + ".nbytes'"), std::string::npos) << inspect.output;
  m = good;
  m["tensors"] = J::object();
  test::write_file(manifest, m.dump());
  auto verify = test::run_command(GTRAIN_BINARY + " ckpt verify " + all[1].path);
  EXPECT_NE(verify.exit_code, 0) << verify.output;
  EXPECT_EQ(verify.output.find("OK"), std::string::npos) << verify.output;
  // Given the checkpoint directory, verify takes the newest committed one, malformed or not: it
  // does not pass over it to an older one and say OK.
  verify = test::run_command(GTRAIN_BINARY + " ckpt verify " + paths.checkpoints);
  EXPECT_NE(verify.exit_code, 0) << verify.output;
  EXPECT_NE(verify.output.find(manifest), std::string::npos) << verify.output;
  EXPECT_EQ(verify.output.find("OK"), std::string::npos) << verify.output;
  // Restored, it is the newest valid one again.
  test::write_file(manifest, pristine);
  EXPECT_EQ(find_latest_valid_checkpoint(paths.checkpoints, nullptr), all[1].path);
}

// Optimizer state is named after its parameter; a model's own ".exp_avg"-like names are not state.
TEST(Cli, OptimizerStateNames) {
  const std::vector<std::string> names = {"w", "w.exp_avg", "w.exp_avg_sq", "v.momentum_buffer", "optimizer.step"};
  EXPECT_FALSE(is_optimizer_state("w", names));
  EXPECT_TRUE(is_optimizer_state("w.exp_avg", names));
  EXPECT_TRUE(is_optimizer_state("w.exp_avg_sq", names));
  EXPECT_FALSE(is_optimizer_state("v.momentum_buffer", names));  // no tensor "v": a model's own
  EXPECT_TRUE(is_optimizer_state("optimizer.step", names));
}

}  // namespace
}  // namespace gtrain
