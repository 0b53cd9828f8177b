// test_checkpoint_manifest.cpp: manifest.json typed (torch-free): a training run's manifest reads and
// writes back unchanged, keys gtrain does not read survive, and a missing key or one of the wrong
// type is refused naming the file and the key.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "runtime/core/checkpoint_manifest.h"
#include "runtime/core/errors.h"

namespace gtrain {
namespace {

using J = nlohmann::json;
const std::string kWhere = "/runs/a/checkpoints/step_00000004/manifest.json";

// A manifest as a 2-rank training run writes it: one tensor in two pieces, one a rank.
J training_manifest() {
  return J::parse(R"({
    "format": "gtrain-checkpoint", "version": 4, "step": 4, "consumed_samples": 64, "world": 2,
    "model": {"name": "\"mlp\"", "hidden": "[32]", "dropout": "0.0"},
    "config": {"train.seed": "3", "optimizer.learning_rate": "0.003"},
    "lr_next": 0.0025, "global_batch": 16, "seed": 3, "total_steps": 10, "precision": "fp32",
    "optimizer": "adamw", "plan": "dp=2 tp=1 pp=1 micro_batch=8 grad_accum=1", "train_samples": 4096,
    "vocab_from_data": false, "train_data": null, "stage_ledger": [{"step_from": 0, "step_to": 2}],
    "probe_loss": 1.3862943611198906, "probe_indices": [5, 1, 7],
    "tensors": {"w": {"dtype": "float32", "shape": [2, 3], "pieces": [
      {"file": "shard_0.bin", "offset": 0, "nbytes": 12, "crc32c": 4294967295, "region_offsets": [0, 0],
       "region_shape": [2, 3], "flat_begin": 0, "numel": 3, "rank": 0},
      {"file": "shard_1.bin", "offset": 0, "nbytes": 12, "crc32c": 17, "region_offsets": [0, 0],
       "region_shape": [2, 3], "flat_begin": 3, "numel": 3, "rank": 1}]}}
  })");
}

std::string refusal(const J& m) {
  try {
    CheckpointManifest::from_json(m, kWhere);
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(CheckpointManifest, TrainingRunManifestRoundTripsByteForByte) {
  const J m = training_manifest();
  const auto typed = CheckpointManifest::from_json(m, kWhere);
  EXPECT_EQ(typed.step, 4);
  EXPECT_EQ(typed.consumed_samples, 64);
  EXPECT_EQ(typed.world, 2);
  EXPECT_EQ(typed.meta.model.at("hidden"), "[32]");
  EXPECT_EQ(typed.meta.global_batch, 16);
  EXPECT_EQ(typed.meta.seed, 3);
  EXPECT_EQ(typed.meta.optimizer, "adamw");
  EXPECT_EQ(typed.meta.probe_indices, (std::vector<int64_t>{5, 1, 7}));
  ASSERT_TRUE(typed.meta.train_data.has_value());
  EXPECT_TRUE(typed.meta.train_data->is_null());
  const auto& w = typed.tensors.at("w");
  EXPECT_EQ(w.dtype, "float32");
  ASSERT_EQ(w.pieces.size(), 2u);
  EXPECT_EQ(w.pieces[0].crc32c, 4294967295u);
  EXPECT_EQ(w.pieces[1].flat_begin, 3);
  EXPECT_EQ(w.pieces[1].rank, 1);
  EXPECT_TRUE(typed.meta.extra.empty());
  EXPECT_EQ(typed.to_json(), m);
  EXPECT_EQ(typed.to_json().dump(1), m.dump(1));  // the file gtrain writes
}

// What gtrain does not read (another tool's key, a seed that is not an integer) stays as it was.
TEST(CheckpointManifest, KeysGtrainDoesNotReadSurvive) {
  J m = training_manifest();
  m["written_by"] = "a tool";
  m["seed"] = "3";
  m["config"] = J::array();
  const auto typed = CheckpointManifest::from_json(m, kWhere);
  EXPECT_FALSE(typed.meta.seed.has_value());
  EXPECT_FALSE(typed.meta.config.has_value());
  EXPECT_EQ(typed.meta.extra.at("written_by"), "a tool");
  EXPECT_EQ(typed.to_json(), m);
}

// A tool's manifest: the model alone, no job facts; written back with nothing added.
TEST(CheckpointManifest, MinimalManifestWritesOnlyWhatItHolds) {
  CheckpointManifest m;
  m.step = 2;
  m.consumed_samples = 8;
  ManifestTensor t;
  t.dtype = "int64";
  t.shape = {};
  ManifestPiece p;
  p.file = "shard_0.bin";
  p.nbytes = 8;
  p.numel = 1;
  t.pieces.push_back(p);
  m.tensors["optimizer.step"] = t;
  const J j = m.to_json();
  EXPECT_EQ(j.dump(), R"({"consumed_samples":8,"format":"gtrain-checkpoint","model":{},"step":2,"tensors":{)"
                      R"("optimizer.step":{"dtype":"int64","pieces":[{"crc32c":0,"file":"shard_0.bin","flat_begin":0,)"
                      R"("nbytes":8,"numel":1,"offset":0,"region_offsets":[],"region_shape":[]}],"shape":[]}},)"
                      R"("version":4})");
  const auto back = CheckpointManifest::from_json(j, kWhere);
  EXPECT_FALSE(back.meta.global_batch.has_value());
  EXPECT_FALSE(back.meta.probe_loss.has_value());
  EXPECT_EQ(back.to_json(), j);
}

TEST(CheckpointManifest, MissingKeyIsNamedWithTheFile) {
  for (const char* key : {"step", "consumed_samples", "model", "tensors"}) {
    J m = training_manifest();
    m.erase(key);
    EXPECT_EQ(refusal(m), kWhere + ": key '" + key + "' is missing") << key;
  }
  J m = training_manifest();
  m["tensors"]["w"]["pieces"][1].erase("crc32c");
  EXPECT_EQ(refusal(m), kWhere + ": key 'tensors.w.pieces[1].crc32c' is missing");
  m = training_manifest();
  m.erase("format");
  EXPECT_EQ(refusal(m), kWhere + ": not a gtrain checkpoint (key 'format' is not \"gtrain-checkpoint\")");
}

TEST(CheckpointManifest, WrongTypeIsNamedWithWhatItMustBe) {
  const auto with = [](const char* key, J value) {
    J m = training_manifest();
    m[key] = std::move(value);
    return refusal(m);
  };
  EXPECT_EQ(with("step", "4"), kWhere + ": key 'step' must be a non-negative integer, got a string");
  EXPECT_EQ(with("step", -1), kWhere + ": key 'step' must be a non-negative integer, got a negative integer");
  EXPECT_EQ(with("version", 4.5), kWhere + ": key 'version' must be an integer, got a fractional number");
  EXPECT_EQ(with("version", 3), kWhere + ": format version 3, this gtrain reads version 4");
  EXPECT_EQ(with("probe_loss", "x"), kWhere + ": key 'probe_loss' must be a number, got a string");
  EXPECT_EQ(with("plan", 1), kWhere + ": key 'plan' must be a string, got an integer");
  EXPECT_EQ(with("vocab_from_data", 0), kWhere + ": key 'vocab_from_data' must be true or false, got an integer");
  EXPECT_EQ(with("model", J::array()),
            kWhere + ": key 'model' must be an object (the model config the checkpoint was written for), got an array");
  EXPECT_EQ(with("global_batch", 15), kWhere + ": key 'consumed_samples' is 64, not step x global_batch = 4 x 15");
  J m = training_manifest();
  m["model"]["hidden"] = J::array({32});
  EXPECT_EQ(refusal(m), kWhere + ": key 'model.hidden' must be a string, got an array");
  m = training_manifest();
  m["tensors"]["w"]["dtype"] = "complex64";
  EXPECT_EQ(refusal(m), kWhere + ": key 'tensors.w.dtype': unknown dtype 'complex64'");
  m = training_manifest();
  m["tensors"]["w"]["pieces"][0]["numel"] = 2;
  EXPECT_EQ(refusal(m), kWhere + ": key 'tensors.w.pieces[0].nbytes' is 12, not numel x 4 bytes = 8");
  m = training_manifest();
  m["tensors"]["w"]["pieces"].erase(1);
  EXPECT_EQ(refusal(m), kWhere + ": key 'tensors.w.pieces': they hold 3 of the 6 elements of its shape");
}

TEST(CheckpointManifest, ShardPieceListRoundTrips) {
  ShardPiece s;
  s.name = "h.0.w";
  s.dtype = "bfloat16";
  s.shape = {4, 6};
  s.piece.file = "shard_1.bin";
  s.piece.offset = 16;
  s.piece.nbytes = 10;
  s.piece.crc32c = 99;
  s.piece.region_offsets = {0, 3};
  s.piece.region_shape = {4, 3};
  s.piece.flat_begin = 5;
  s.piece.numel = 5;
  const J j = s.to_json();
  EXPECT_FALSE(j.contains("rank"));  // the manifest adds it
  const auto back = ShardPiece::from_json(j);
  EXPECT_EQ(back.to_json(), j);
  EXPECT_EQ(shard_piece_names(J::array({j, j})), (std::vector<std::string>{"h.0.w", "h.0.w"}));
}

TEST(CheckpointManifest, DtypeSizesAndTrainingKeyMessage) {
  EXPECT_EQ(checkpoint_dtype_size("float32"), 4);
  EXPECT_EQ(checkpoint_dtype_size("bfloat16"), 2);
  EXPECT_EQ(checkpoint_dtype_size("uint8"), 1);
  EXPECT_EQ(checkpoint_dtype_size("float8"), 0);
  EXPECT_EQ(missing_training_key("/c/manifest.json", manifest_key::kProbeLoss),
            "/c/manifest.json: key 'probe_loss' is missing (not written by a training run)");
}

}  // namespace
}  // namespace gtrain
