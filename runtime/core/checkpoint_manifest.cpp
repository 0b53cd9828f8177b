// checkpoint_manifest.cpp: manifest.json read (every key checked before any is used) and written.
#include "runtime/core/checkpoint_manifest.h"

#include <algorithm>
#include <fstream>

#include "runtime/core/config/model_config.h"
#include "runtime/core/errors.h"

namespace fs = std::filesystem;

namespace gtrain {
namespace key = manifest_key;
namespace {

using json = nlohmann::json;

// ---- what a value is, in words, and the error naming the key ----

const char* json_kind(const json& j) {
  if (j.is_null()) return "null";
  if (j.is_boolean()) return "a boolean";
  if (j.is_number_integer())
    return j.is_number_unsigned() || j.get<int64_t>() >= 0 ? "an integer" : "a negative integer";
  if (j.is_number()) return "a fractional number";
  if (j.is_string()) return "a string";
  if (j.is_array()) return "an array";
  return "an object";
}

[[noreturn]] void bad_key(const std::string& where, const std::string& key, const std::string& expected,
                          const json* got) {
  if (!got) throw CheckpointError(where + ": key '" + key + "' is missing");
  throw CheckpointError(where + ": key '" + key + "' must be " + expected + ", got " + json_kind(*got));
}

bool is_count(const json& j) {
  return j.is_number_unsigned() || (j.is_number_integer() && j.get<int64_t>() >= 0);
}

// `obj[key]`, where `path` names it in errors ("tensors.w.pieces[0].file").
const json& require(const std::string& where, const json& obj, const std::string& key, const std::string& path) {
  auto it = obj.find(key);
  if (it == obj.end()) bad_key(where, path, "", nullptr);
  return *it;
}

int64_t require_count(const std::string& where, const json& obj, const std::string& key, const std::string& path) {
  const auto& v = require(where, obj, key, path);
  if (!is_count(v)) bad_key(where, path, "a non-negative integer", &v);
  return v.get<int64_t>();
}

// An array of non-negative integers, of `rank` of them unless rank < 0.
std::vector<int64_t> require_counts(const std::string& where, const json& obj, const std::string& key,
                                    const std::string& path, int64_t rank) {
  const auto& v = require(where, obj, key, path);
  const std::string expected =
      "an array of " + (rank >= 0 ? std::to_string(rank) + " " : std::string()) + "non-negative integers";
  if (!v.is_array() || (rank >= 0 && static_cast<int64_t>(v.size()) != rank)) bad_key(where, path, expected, &v);
  std::vector<int64_t> out;
  for (const auto& x : v) {
    if (!is_count(x)) bad_key(where, path, expected, &v);
    out.push_back(x.get<int64_t>());
  }
  return out;
}

void optional_type(const std::string& where, const json& m, const std::string& key, bool (*ok)(const json&),
                   const std::string& expected) {
  auto it = m.find(key);
  if (it != m.end() && !ok(*it)) bad_key(where, key, expected, &*it);
}

// A piece's data file: a plain name inside the checkpoint directory.
bool plain_file_name(const std::string& f) {
  return !f.empty() && f != "." && f != ".." && f.find('/') == std::string::npos && f.find('\\') == std::string::npos &&
         f.find('\0') == std::string::npos;
}

// ---- the checks, in the order a reader meets the keys ----

void check_format_and_version(const json& m, const std::string& where) {
  if (!m.is_object()) throw CheckpointError(where + ": must be a JSON object, got " + json_kind(m));
  const auto fmt = m.find(key::kFormat);
  if (fmt == m.end() || !fmt->is_string() || fmt->get<std::string>() != kCheckpointFormat) {
    throw CheckpointError(
        where + ": not a gtrain checkpoint (key '" + key::kFormat + "' is not \"" + kCheckpointFormat + "\")",
        "give a checkpoint directory written by gtrain (RUN_DIR/checkpoints/step_N)");
  }
  const auto ver = m.find(key::kVersion);
  if (ver == m.end() || !ver->is_number_integer())
    bad_key(where, key::kVersion, "an integer", ver == m.end() ? nullptr : &*ver);
  const int version = ver->get<int>();
  if (version != kCheckpointFormatVersion) {
    throw CheckpointError(where + ": format version " + std::to_string(version) + ", this gtrain reads version " +
                              std::to_string(kCheckpointFormatVersion),
                          "resume it with the gtrain that wrote it, or start over with --no-resume");
  }
}

void check_model(const json& m, const std::string& where) {
  const auto& model = require(where, m, key::kModel, key::kModel);
  if (!model.is_object())
    bad_key(where, key::kModel, "an object (the model config the checkpoint was written for)", &model);
  for (const auto& [k, v] : model.items()) {
    if (!v.is_string()) bad_key(where, std::string(key::kModel) + "." + k, "a string", &v);
  }
}

// A training run's checkpoint: consumed_samples is step x global_batch (ranks resume from it).
void check_consumed_is_step_times_batch(const json& m, const std::string& where, int64_t step, int64_t consumed) {
  if (!m.contains(key::kGlobalBatch)) return;
  const int64_t batch = m.at(key::kGlobalBatch).get<int64_t>();
  int64_t product = 0;
  if (__builtin_mul_overflow(step, batch, &product) || product != consumed) {
    throw CheckpointError(where + ": key '" + key::kConsumedSamples + "' is " + std::to_string(consumed) +
                          ", not step x global_batch = " + std::to_string(step) + " x " + std::to_string(batch));
  }
}

void check_job_facts(const json& m, const std::string& where) {
  optional_type(
      where, m, key::kProbeLoss, [](const json& j) { return j.is_number(); }, "a number");
  optional_type(
      where, m, key::kPlan, [](const json& j) { return j.is_string(); }, "a string");
  optional_type(where, m, key::kProbeStep, is_count, "a non-negative integer");
  optional_type(where, m, key::kChunk, is_count, "a non-negative integer");
  optional_type(
      where, m, key::kBaseModel,
      [](const json& j) {
        return j.is_object() && j.contains("path") && j["path"].is_string() && j.contains("hash") &&
               j["hash"].is_string();
      },
      "an object with string keys path and hash");
  optional_type(
      where, m, key::kStageLedger, [](const json& j) { return j.is_array(); }, "an array");
  optional_type(where, m, key::kTrainSamples, is_count, "a non-negative integer");
  optional_type(
      where, m, key::kTrainData, [](const json& j) { return j.is_array() || j.is_null(); },
      "an array (the training files) or null");
  optional_type(
      where, m, key::kVocabFromData, [](const json& j) { return j.is_boolean(); }, "true or false");
  optional_type(
      where, m, key::kProbeIndices,
      [](const json& j) {
        return j.is_array() && !j.empty() && std::all_of(j.begin(), j.end(), [](const auto& v) { return is_count(v); });
      },
      "a non-empty array of non-negative integers (training window indices)");
}

void check_crc(const json& crc, const std::string& where, const std::string& pk) {
  const std::string k = pk + "." + key::kCrc32c;
  if (!crc.is_number_unsigned() && !(crc.is_number_integer() && crc.get<int64_t>() >= 0)) {
    bad_key(where, k, "an unsigned 32-bit integer", &crc);
  }
  if (crc.get<uint64_t>() > 0xffffffffull) bad_key(where, k, "an unsigned 32-bit integer", &crc);
}

// The piece `p` (named `pk` in errors) of a tensor of `shape` with `item`-byte elements.
ManifestPiece read_piece(const json& p, const std::string& where, const std::string& pk,
                         const std::vector<int64_t>& shape, int64_t item) {
  if (!p.is_object()) bad_key(where, pk, "an object", &p);
  ManifestPiece out;
  const auto& file = require(where, p, key::kFile, pk + "." + key::kFile);
  if (!file.is_string() || !plain_file_name(file.get<std::string>())) {
    bad_key(where, pk + "." + key::kFile, "a plain file name in the checkpoint directory (no '/', no '..')", &file);
  }
  out.file = file.get<std::string>();
  out.offset = require_count(where, p, key::kOffset, pk + "." + key::kOffset);
  out.nbytes = require_count(where, p, key::kNbytes, pk + "." + key::kNbytes);
  const auto& crc = require(where, p, key::kCrc32c, pk + "." + key::kCrc32c);
  check_crc(crc, where, pk);
  out.crc32c = crc.get<uint32_t>();
  const auto rank = static_cast<int64_t>(shape.size());
  out.region_offsets = require_counts(where, p, key::kRegionOffsets, pk + "." + key::kRegionOffsets, rank);
  out.region_shape = require_counts(where, p, key::kRegionShape, pk + "." + key::kRegionShape, rank);
  int64_t region_numel = 1;
  for (int64_t d = 0; d < rank; ++d) {
    if (out.region_offsets[d] + out.region_shape[d] > shape[d]) {
      throw CheckpointError(where + ": key '" + pk + "': region exceeds the tensor's shape in dimension " +
                            std::to_string(d));
    }
    region_numel *= out.region_shape[d];
  }
  out.flat_begin = require_count(where, p, key::kFlatBegin, pk + "." + key::kFlatBegin);
  out.numel = require_count(where, p, key::kNumel, pk + "." + key::kNumel);
  if (out.flat_begin + out.numel > region_numel) {
    throw CheckpointError(where + ": key '" + pk + "': flat range " + std::to_string(out.flat_begin) + "+" +
                          std::to_string(out.numel) + " exceeds its region of " + std::to_string(region_numel) +
                          " elements");
  }
  if (out.numel * item != out.nbytes) {
    throw CheckpointError(where + ": key '" + pk + "." + key::kNbytes + "' is " + std::to_string(out.nbytes) +
                          ", not numel x " + std::to_string(item) + " bytes = " + std::to_string(out.numel * item));
  }
  const auto r = p.find(key::kRank);
  if (r != p.end() && r->is_number_integer()) out.rank = r->get<int64_t>();
  return out;
}

// The tensor `t` (named `tk` in errors): its dtype, a shape of at most 2^50 elements, and pieces
// that hold exactly the shape's elements (more or fewer: the tensor has holes).
ManifestTensor read_tensor(const json& t, const std::string& where, const std::string& tk) {
  if (!t.is_object()) bad_key(where, tk, "an object", &t);
  ManifestTensor out;
  const auto& dtype = require(where, t, key::kDtype, tk + "." + key::kDtype);
  if (!dtype.is_string()) bad_key(where, tk + "." + key::kDtype, "a string", &dtype);
  out.dtype = dtype.get<std::string>();
  const int64_t item = checkpoint_dtype_size(out.dtype);
  if (item == 0) {
    throw CheckpointError(where + ": key '" + tk + "." + key::kDtype + "': unknown dtype '" + out.dtype + "'");
  }
  out.shape = require_counts(where, t, key::kShape, tk + "." + key::kShape, -1);
  int64_t elements = 1;
  for (int64_t d : out.shape) {
    if (__builtin_mul_overflow(elements, d, &elements) || elements > (int64_t{1} << 50)) {
      bad_key(where, tk + "." + key::kShape, "a tensor shape of at most 2^50 elements", &t.at(key::kShape));
    }
  }
  const auto& pieces = require(where, t, key::kPieces, tk + "." + key::kPieces);
  if (!pieces.is_array()) bad_key(where, tk + "." + key::kPieces, "an array", &pieces);
  int64_t covered = 0;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const std::string pk = tk + "." + key::kPieces + "[" + std::to_string(i) + "]";
    out.pieces.push_back(read_piece(pieces[i], where, pk, out.shape, item));
    covered += out.pieces.back().numel;
  }
  if (covered != elements) {
    throw CheckpointError(where + ": key '" + tk + "." + key::kPieces + "': they hold " + std::to_string(covered) +
                          " of the " + std::to_string(elements) + " elements of its shape");
  }
  return out;
}

std::map<std::string, ManifestTensor> read_tensors(const json& m, const std::string& where) {
  const auto& tensors = require(where, m, key::kTensors, key::kTensors);
  if (!tensors.is_object() || tensors.empty()) bad_key(where, key::kTensors, "a non-empty object", &tensors);
  std::map<std::string, ManifestTensor> out;
  for (const auto& [name, t] : tensors.items()) {
    out[name] = read_tensor(t, where, std::string(key::kTensors) + "." + name);
  }
  return out;
}

// The job facts (checked by check_job_facts); keys of a type gtrain does not read stay in `extra`.
CheckpointMeta read_meta(const json& m) {
  CheckpointMeta meta;
  for (const auto& [k, v] : m.at(key::kModel).items()) meta.model[k] = v.get<std::string>();
  for (const auto& [k, v] : m.items()) {
    if (k == key::kFormat || k == key::kVersion || k == key::kStep || k == key::kConsumedSamples || k == key::kWorld ||
        k == key::kTensors || k == key::kModel)
      continue;
    if (k == key::kConfig && v.is_object()) {
      meta.config = v;
    } else if (k == key::kLrNext && v.is_number()) {
      meta.lr_next = v.get<double>();
    } else if (k == key::kGlobalBatch) {
      meta.global_batch = v.get<int64_t>();
    } else if (k == key::kSeed && v.is_number_integer()) {
      meta.seed = v.get<int64_t>();
    } else if (k == key::kTotalSteps && (v.is_number() || v.is_boolean())) {
      meta.total_steps = v.get<int64_t>();
    } else if (k == key::kPrecision && v.is_string()) {
      meta.precision = v.get<std::string>();
    } else if (k == key::kOptimizer && v.is_string()) {
      meta.optimizer = v.get<std::string>();
    } else if (k == key::kPlan) {
      meta.plan = v.get<std::string>();
    } else if (k == key::kTrainSamples) {
      meta.train_samples = v.get<int64_t>();
    } else if (k == key::kVocabFromData) {
      meta.vocab_from_data = v.get<bool>();
    } else if (k == key::kTrainData) {
      meta.train_data = v;
    } else if (k == key::kStageLedger) {
      meta.stage_ledger = v;
    } else if (k == key::kProbeLoss) {
      meta.probe_loss = v.get<double>();
    } else if (k == key::kProbeIndices) {
      meta.probe_indices = v.get<std::vector<int64_t>>();
    } else if (k == key::kProbeStep) {
      meta.probe_step = v.get<int64_t>();
    } else if (k == key::kChunk) {
      meta.chunk = v.get<int64_t>();
    } else if (k == key::kBaseModel) {
      meta.base_model = v;
    } else if (k == key::kTeacher) {
      meta.teacher = v;
    } else {
      meta.extra[k] = v;
    }
  }
  return meta;
}

}  // namespace

int64_t checkpoint_dtype_size(const std::string& dtype) {
  static const std::map<std::string, int64_t> kSizes = {{"float32", 4}, {"float64", 8}, {"float16", 2}, {"bfloat16", 2},
                                                        {"int64", 8},   {"int32", 4},   {"uint8", 1}};
  const auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

json ManifestPiece::to_json() const {
  json j = {{key::kFile, file},
            {key::kOffset, offset},
            {key::kNbytes, nbytes},
            {key::kCrc32c, crc32c},
            {key::kRegionOffsets, region_offsets},
            {key::kRegionShape, region_shape},
            {key::kFlatBegin, flat_begin},
            {key::kNumel, numel}};
  if (rank) j[key::kRank] = *rank;
  return j;
}

json ManifestTensor::to_json() const {
  json p = json::array();
  for (const auto& piece : pieces) p.push_back(piece.to_json());
  return {{key::kDtype, dtype}, {key::kShape, shape}, {key::kPieces, p}};
}

json ShardPiece::to_json() const {
  json j = piece.to_json();
  j[key::kName] = name;
  j[key::kDtype] = dtype;
  j[key::kShape] = shape;
  return j;
}

ShardPiece ShardPiece::from_json(const json& j) {
  ShardPiece s;
  s.name = j.at(key::kName).get<std::string>();
  s.dtype = j.at(key::kDtype).get<std::string>();
  s.shape = j.at(key::kShape).get<std::vector<int64_t>>();
  ManifestPiece& p = s.piece;
  p.file = j.at(key::kFile).get<std::string>();
  p.offset = j.at(key::kOffset).get<int64_t>();
  p.nbytes = j.at(key::kNbytes).get<int64_t>();
  p.crc32c = j.at(key::kCrc32c).get<uint32_t>();
  p.region_offsets = j.at(key::kRegionOffsets).get<std::vector<int64_t>>();
  p.region_shape = j.at(key::kRegionShape).get<std::vector<int64_t>>();
  p.flat_begin = j.at(key::kFlatBegin).get<int64_t>();
  p.numel = j.at(key::kNumel).get<int64_t>();
  return s;
}

std::vector<std::string> shard_piece_names(const json& pieces) {
  std::vector<std::string> out;
  for (const auto& p : pieces) out.push_back(p.at(key::kName).get<std::string>());
  return out;
}

void CheckpointMeta::add_to(json& out) const {
  out[key::kModel] = model;
  if (config) out[key::kConfig] = *config;
  if (lr_next) out[key::kLrNext] = *lr_next;
  if (global_batch) out[key::kGlobalBatch] = *global_batch;
  if (seed) out[key::kSeed] = *seed;
  if (total_steps) out[key::kTotalSteps] = *total_steps;
  if (precision) out[key::kPrecision] = *precision;
  if (optimizer) out[key::kOptimizer] = *optimizer;
  if (plan) out[key::kPlan] = *plan;
  if (train_samples) out[key::kTrainSamples] = *train_samples;
  if (vocab_from_data) out[key::kVocabFromData] = *vocab_from_data;
  if (train_data) out[key::kTrainData] = *train_data;
  if (stage_ledger) out[key::kStageLedger] = *stage_ledger;
  if (probe_loss) out[key::kProbeLoss] = *probe_loss;
  if (probe_indices) out[key::kProbeIndices] = *probe_indices;
  if (probe_step) out[key::kProbeStep] = *probe_step;
  if (chunk) out[key::kChunk] = *chunk;
  if (base_model) out[key::kBaseModel] = *base_model;
  if (teacher) out[key::kTeacher] = *teacher;
  for (const auto& [k, v] : extra.items()) out[k] = v;
}

json CheckpointManifest::to_json() const {
  json j = json::object();
  meta.add_to(j);
  j[key::kFormat] = kCheckpointFormat;
  j[key::kVersion] = version;
  j[key::kStep] = step;
  j[key::kConsumedSamples] = consumed_samples;
  if (world) j[key::kWorld] = *world;
  json t = json::object();
  for (const auto& [name, tensor] : tensors) t[name] = tensor.to_json();
  j[key::kTensors] = t;
  return j;
}

CheckpointManifest CheckpointManifest::from_json(const json& m, const std::string& where) {
  check_format_and_version(m, where);
  CheckpointManifest out;
  out.version = m.at(key::kVersion).get<int>();
  out.step = require_count(where, m, key::kStep, key::kStep);
  out.consumed_samples = require_count(where, m, key::kConsumedSamples, key::kConsumedSamples);
  check_model(m, where);
  optional_type(where, m, key::kWorld, is_count, "a non-negative integer");
  optional_type(where, m, key::kGlobalBatch, is_count, "a non-negative integer");
  check_consumed_is_step_times_batch(m, where, out.step, out.consumed_samples);
  check_job_facts(m, where);
  out.tensors = read_tensors(m, where);
  if (m.contains(key::kWorld)) out.world = m.at(key::kWorld).get<int64_t>();
  out.meta = read_meta(m);
  return out;
}

std::string missing_training_key(const std::string& where, const char* key) {
  return where + ": key '" + key + "' is missing (not written by a training run)";
}

nlohmann::json read_checkpoint_json(const std::filesystem::path& p) {
  std::ifstream f(p);
  if (!f)
    throw CheckpointError(p.string() + ": missing",
                          "the checkpoint is incomplete: resume from another (--resume PATH; gtrain ckpt inspect "
                          "RUN_DIR lists them) or start over with --no-resume");
  try {
    return nlohmann::json::parse(f);
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(p.string() + ": unreadable JSON (" + std::string(e.what()) + ")",
                          "the checkpoint is damaged: resume from another (--resume PATH; gtrain ckpt inspect RUN_DIR "
                          "lists them) or start over with --no-resume");
  }
}

CheckpointManifest read_checkpoint_manifest(const std::string& dir) {
  const fs::path file = fs::path(dir) / kManifestFile;
  return CheckpointManifest::from_json(read_checkpoint_json(file), file.string());
}

std::vector<std::string> checkpoint_file_problems(const CheckpointManifest& m, const std::string& dir) {
  std::map<std::string, int64_t> ends;
  for (const auto& kv : m.tensors) {
    for (const auto& p : kv.second.pieces) {
      auto& end = ends[p.file];
      end = std::max(end, p.offset + p.nbytes);
    }
  }
  std::vector<std::string> problems;
  for (const auto& [file, end] : ends) {
    const fs::path f = fs::path(dir) / file;
    std::error_code ec;
    const auto size = fs::file_size(f, ec);
    if (ec) {
      problems.push_back(f.string() + ": missing data file");
    } else if (static_cast<int64_t>(size) != end) {
      problems.push_back(f.string() + ": " + std::to_string(size) + " bytes, the manifest's pieces need " +
                         std::to_string(end));
    }
  }
  return problems;
}

nlohmann::json manifest_model_json(const std::map<std::string, std::string>& kept) {
  const auto value_of = [](const std::string& text) {
    const auto parsed = nlohmann::json::parse(text, nullptr, false);
    return parsed.is_discarded() ? nlohmann::json(text) : parsed;
  };
  const auto name = kept.count("name") ? value_of(kept.at("name")) : nlohmann::json();
  const std::string model = name.is_string() ? name.get<std::string>() : "";
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, text] : kept) {
    if (model_key_applies(model, key)) out[key] = value_of(text);
  }
  return out;
}

}  // namespace gtrain
