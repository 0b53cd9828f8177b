// checkpoint_manifest.h: manifest.json of a committed checkpoint, typed (torch-free). Every key the
// file holds is named once here (manifest_key), read by CheckpointManifest::from_json, which checks
// every key a reader uses, with its type, before any is used, and written by to_json: the JSON is the
// same, byte for byte, as gtrain has always written (keys sorted, as nlohmann::json keeps them).
//
//   {"format": "gtrain-checkpoint", "version": 4, "step": N, "consumed_samples": N, "world": N,
//    "model": {"<key>": "<TOML text>", ...}, <the job facts of CheckpointMeta>,
//    "tensors": {"<name>": {"dtype": "float32", "shape": [...], "pieces": [<ManifestPiece>, ...]}}}
//
// Each rank's piece list (shard_<rank>.json, beside its data file) holds ShardPieces: a piece with
// its tensor's name, dtype and shape; rank 0 assembles the manifest's tensors from them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gtrain {

constexpr int kCheckpointFormatVersion = 4;
constexpr const char* kCheckpointFormat = "gtrain-checkpoint";
constexpr const char* kManifestFile = "manifest.json";

namespace manifest_key {
// The commit's own keys.
constexpr const char* kFormat = "format";
constexpr const char* kVersion = "version";
constexpr const char* kStep = "step";
constexpr const char* kConsumedSamples = "consumed_samples";
constexpr const char* kWorld = "world";
constexpr const char* kTensors = "tensors";
// The job facts (CheckpointMeta).
constexpr const char* kModel = "model";
constexpr const char* kConfig = "config";
constexpr const char* kLrNext = "lr_next";
constexpr const char* kGlobalBatch = "global_batch";
constexpr const char* kSeed = "seed";
constexpr const char* kTotalSteps = "total_steps";
constexpr const char* kPrecision = "precision";
constexpr const char* kOptimizer = "optimizer";
constexpr const char* kPlan = "plan";
constexpr const char* kTrainSamples = "train_samples";
constexpr const char* kVocabFromData = "vocab_from_data";
constexpr const char* kTrainData = "train_data";
constexpr const char* kStageLedger = "stage_ledger";
constexpr const char* kProbeLoss = "probe_loss";
constexpr const char* kProbeIndices = "probe_indices";
constexpr const char* kProbeStep = "probe_step";
constexpr const char* kChunk = "reproducible_chunk";
constexpr const char* kBaseModel = "base_model";
constexpr const char* kTeacher = "teacher";
// A tensor's entry, and its pieces.
constexpr const char* kName = "name";
constexpr const char* kDtype = "dtype";
constexpr const char* kShape = "shape";
constexpr const char* kPieces = "pieces";
constexpr const char* kFile = "file";
constexpr const char* kOffset = "offset";
constexpr const char* kNbytes = "nbytes";
constexpr const char* kCrc32c = "crc32c";
constexpr const char* kRegionOffsets = "region_offsets";
constexpr const char* kRegionShape = "region_shape";
constexpr const char* kFlatBegin = "flat_begin";
constexpr const char* kNumel = "numel";
constexpr const char* kRank = "rank";
}  // namespace manifest_key

// Bytes per element of a checkpoint dtype name ("float32" 4, "bfloat16" 2, ...); 0 when unknown.
int64_t checkpoint_dtype_size(const std::string& dtype);

// One piece of a tensor: elements [flat_begin, flat_begin + numel) of the region [region_offsets,
// region_offsets + region_shape) of the global tensor, stored as `nbytes` bytes at `offset` of
// `file` (a plain name in the checkpoint directory), with their CRC-32C.
struct ManifestPiece {
  std::string file;
  int64_t offset = 0;
  int64_t nbytes = 0;
  uint32_t crc32c = 0;
  std::vector<int64_t> region_offsets;
  std::vector<int64_t> region_shape;
  int64_t flat_begin = 0;
  int64_t numel = 0;
  std::optional<int64_t> rank;  // the rank that wrote it (the manifest's pieces; not in shard_<r>.json)
  nlohmann::json to_json() const;
};

struct ManifestTensor {
  std::string dtype;  // "float32", "float64", "float16", "bfloat16", "int64", "int32", "uint8"
  std::vector<int64_t> shape;
  std::vector<ManifestPiece> pieces;
  nlohmann::json to_json() const;
};

// A piece as its rank publishes it in shard_<rank>.json: the piece and its tensor's name, dtype, shape.
struct ShardPiece {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  ManifestPiece piece;
  nlohmann::json to_json() const;
  // Throws nlohmann::json's exceptions on a malformed entry (the writer reads its own ranks' files).
  static ShardPiece from_json(const nlohmann::json& j);
};

// The names a shard_<rank>.json lists, in order. Throws nlohmann::json's exceptions when malformed.
std::vector<std::string> shard_piece_names(const nlohmann::json& pieces);

// What rank 0 records about the job beside the tensors (training runs write every key; tools and
// tests may write only the model). An absent key is unset; a key of a type gtrain does not read
// stays in `extra` as it was, so a manifest reads and writes back unchanged.
struct CheckpointMeta {
  std::map<std::string, std::string> model;  // the model config, each value as its TOML text
  std::optional<nlohmann::json> config;      // flat_fields() of the job config ("section.key": text)
  std::optional<double> lr_next;             // the learning rate of the next step
  std::optional<int64_t> global_batch;
  std::optional<int64_t> seed;
  std::optional<int64_t> total_steps;
  std::optional<std::string> precision;  // precision.dtype
  std::optional<std::string> optimizer;  // optimizer.name
  std::optional<std::string> plan;       // the plan's summary
  std::optional<int64_t> train_samples;
  std::optional<bool> vocab_from_data;         // model.vocab = 0: the vocabulary came from the data
  std::optional<nlohmann::json> train_data;    // Dataset::identity() of the training split (array or null)
  std::optional<nlohmann::json> stage_ledger;  // stages.jsonl's records before this checkpoint (array)
  std::optional<double> probe_loss;
  std::optional<std::vector<int64_t>> probe_indices;  // the training windows the probe batch holds
  // Set: probe_loss is the training loss of this step (the one after the checkpoint's), whose global
  // batch probe_indices holds, taken by the step itself; unset: an evaluation-mode loss of probe_indices.
  std::optional<int64_t> probe_step;
  // Bitwise mode: the samples of every micro-batch the plan ran (the config may say 0: the planner's
  // choice); a resume keeps it. 0: off mode. Unset: a checkpoint of an older gtrain (its config then
  // recorded the chunk in train.reproducible_chunk).
  std::optional<int64_t> chunk;
  // [adapter] kind = "lora": the frozen base the adapters belong to, {"path": checkpoint.init_from
  // ("" = the model's own initialisation from train.seed), "hash": initial_weights.h's base_model_hash}.
  // The checkpoint holds the adapters only; a resume reloads the base and refuses another one.
  std::optional<nlohmann::json> base_model;
  // [distill]: the teacher the student learns from, {"path": distill.teacher (or distill.cache),
  // "hash": its files' base_model_hash (or the cache's teacher hash)}; a resume refuses another one.
  std::optional<nlohmann::json> teacher;
  nlohmann::json extra = nlohmann::json::object();  // keys gtrain does not read, kept as they were

  // Adds the meta's keys to `out` (an object).
  void add_to(nlohmann::json& out) const;
};

struct CheckpointManifest {
  int version = kCheckpointFormatVersion;
  int64_t step = 0;              // optimizer steps completed
  int64_t consumed_samples = 0;  // global sample index of the next sample
  std::optional<int64_t> world;  // ranks that wrote it
  CheckpointMeta meta;
  std::map<std::string, ManifestTensor> tensors;

  nlohmann::json to_json() const;
  // Checks every key a reader uses, with its type and consistency (pieces within their tensor,
  // covering it exactly, sizes matching the dtype), then reads it. Throws CheckpointError naming
  // `where` (the manifest's path) and the key.
  static CheckpointManifest from_json(const nlohmann::json& j, const std::string& where);
};

// "<where>: key '<key>' is missing (not written by a training run)": a manifest a run cannot resume.
std::string missing_training_key(const std::string& where, const char* key);

// The JSON of checkpoint file `p` (a manifest, or a rank's part of one): CheckpointError naming it
// when it is missing or unreadable, with what to do.
nlohmann::json read_checkpoint_json(const std::filesystem::path& p);
// The manifest of the checkpoint in directory `dir`, read and checked (from_json).
CheckpointManifest read_checkpoint_manifest(const std::string& dir);
// Checks that every piece's data file (in `dir`) exists and has the size the pieces add up to (no
// checksums). Returns problems, one a line.
std::vector<std::string> checkpoint_file_problems(const CheckpointManifest& m, const std::string& dir);
// The manifest's [model] keys that apply to its model (model_key_applies), each as the JSON value
// of the TOML text the manifest keeps ("\"gpt\"" -> "gpt", "[256]" -> [256], "2" -> 2).
nlohmann::json manifest_model_json(const std::map<std::string, std::string>& kept);

}  // namespace gtrain
