// hf_checkpoint.cpp: gtrain's gpt and llama parameters under their Hugging Face names (GPT-2's
// Conv1D layers transposed), Hugging Face directories read one tensor at a time, and written.
#include "runtime/checkpoint/hf_checkpoint.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint/crc32c.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/core/errors.h"
#include "runtime/core/format.h"

namespace fs = std::filesystem;

namespace gtrain {
namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";

std::string shape_text(const std::vector<int64_t>& s) {
  return "[" + join(s, ", ") + "]";
}

// A list of problems as one line: the first few, then how many more.
std::string first_few(const std::vector<std::string>& items, size_t shown = 3) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < shown; ++i) out += (i ? "; " : "") + items[i];
  if (items.size() > shown) out += "; and " + std::to_string(items.size() - shown) + " more";
  return out;
}

void add_gpt(const ModelConfig& m, std::vector<HfTensorName>& out) {
  const int64_t C = m.n_embd, V = m.vocab;
  auto add = [&](std::string g, std::string hf, std::vector<int64_t> shape, bool transpose = false) {
    out.push_back({std::move(g), std::move(hf), std::move(shape), transpose});
  };
  add("wte.weight", "transformer.wte.weight", {V, C});
  add("wpe.weight", "transformer.wpe.weight", {m.context_length(), C});
  for (int64_t i = 0; i < m.n_layer; ++i) {
    const std::string g = "h." + std::to_string(i) + ".", hf = "transformer.h." + std::to_string(i) + ".";
    add(g + "ln1.weight", hf + "ln_1.weight", {C});
    add(g + "ln1.bias", hf + "ln_1.bias", {C});
    // c_attn's columns are q | k | v, as qkv's rows are.
    add(g + "attn.qkv.weight", hf + "attn.c_attn.weight", {3 * C, C}, true);
    add(g + "attn.qkv.bias", hf + "attn.c_attn.bias", {3 * C});
    add(g + "attn.proj.weight", hf + "attn.c_proj.weight", {C, C}, true);
    add(g + "attn.proj.bias", hf + "attn.c_proj.bias", {C});
    add(g + "ln2.weight", hf + "ln_2.weight", {C});
    add(g + "ln2.bias", hf + "ln_2.bias", {C});
    add(g + "mlp.fc.weight", hf + "mlp.c_fc.weight", {4 * C, C}, true);
    add(g + "mlp.fc.bias", hf + "mlp.c_fc.bias", {4 * C});
    add(g + "mlp.proj.weight", hf + "mlp.c_proj.weight", {C, 4 * C}, true);
    add(g + "mlp.proj.bias", hf + "mlp.c_proj.bias", {C});
  }
  add("ln_f.weight", "transformer.ln_f.weight", {C});
  add("ln_f.bias", "transformer.ln_f.bias", {C});
  if (!m.tied_embeddings) add("lm_head.weight", "lm_head.weight", {V, C});
}

void add_llama(const ModelConfig& m, std::vector<HfTensorName>& out) {
  const int64_t C = m.n_embd, V = m.vocab, hd = m.llama_head_dim(), I = m.llama_intermediate();
  const int64_t q = m.n_head * hd, kv = m.llama_kv_heads() * hd;
  auto add = [&](const std::string& g, std::vector<int64_t> shape) {
    out.push_back({g, "model." + g, std::move(shape), false});
  };
  add("embed_tokens.weight", {V, C});
  for (int64_t i = 0; i < m.n_layer; ++i) {
    const std::string l = "layers." + std::to_string(i) + ".";
    add(l + "input_layernorm.weight", {C});
    add(l + "self_attn.q_proj.weight", {q, C});
    if (m.qkv_bias) add(l + "self_attn.q_proj.bias", {q});
    add(l + "self_attn.k_proj.weight", {kv, C});
    if (m.qkv_bias) add(l + "self_attn.k_proj.bias", {kv});
    add(l + "self_attn.v_proj.weight", {kv, C});
    if (m.qkv_bias) add(l + "self_attn.v_proj.bias", {kv});
    add(l + "self_attn.o_proj.weight", {C, q});
    if (m.qk_norm) {
      add(l + "self_attn.q_norm.weight", {hd});
      add(l + "self_attn.k_norm.weight", {hd});
    }
    add(l + "post_attention_layernorm.weight", {C});
    add(l + "mlp.gate_proj.weight", {I, C});
    add(l + "mlp.up_proj.weight", {I, C});
    add(l + "mlp.down_proj.weight", {C, I});
  }
  add("norm.weight", {C});
  if (!m.tied_embeddings) out.push_back({"lm_head.weight", "lm_head.weight", {V, C}, false});
}

// Writes `j` to `file`, indented, or throws CheckpointError.
void write_json_file(const fs::path& file, const nlohmann::json& j) {
  std::ofstream f(file);
  f << j.dump(2) << "\n";
  if (!(f.flush())) throw CheckpointError(file.string() + ": write failed (disk full?)");
}

// Puts the export written in `tmp` at `out` (OUT_DIR `out_dir`): an earlier export moved aside first,
// removed once the new one is there.
void move_into_place(const fs::path& tmp, const fs::path& out, const std::string& out_dir) {
  std::error_code ec;
  const fs::path old = out.parent_path() / (out.filename().string() + ".old-" + std::to_string(::getpid()));
  const bool replacing = fs::exists(out, ec);
  if (replacing) {
    fs::rename(out, old, ec);
    if (ec) throw CheckpointError(str(out_dir, ": cannot move the earlier export aside: ", ec.message()));
  }
  fs::rename(tmp, out, ec);
  if (ec) {
    std::error_code ignore;
    if (replacing) fs::rename(old, out, ignore);
    throw CheckpointError(str(out_dir, ": cannot put the directory in place: ", ec.message()),
                          "check that the folder is writable");
  }
  if (replacing) fs::remove_all(old, ec);
}

const char* dtype_config_name(torch::ScalarType t) {
  if (t == torch::kBFloat16) return "bfloat16";
  if (t == torch::kFloat16) return "float16";
  return "float32";
}

}  // namespace

std::vector<int64_t> HfTensorName::hf_shape() const {
  if (!transpose) return shape;
  return {shape[1], shape[0]};
}

std::vector<HfTensorName> hf_tensor_names(const ModelConfig& m) {
  std::vector<HfTensorName> out;
  if (m.name == "gpt") {
    add_gpt(m, out);
  } else if (m.name == "llama") {
    add_llama(m, out);
  } else {
    throw ConfigError("model.name = \"" + m.name + "\" has no Hugging Face form (gpt and llama have)");
  }
  return out;
}

bool is_hf_buffer(const std::string& n) {
  return ends_with(n, ".attn.bias") || ends_with(n, ".attn.masked_bias") || ends_with(n, "rotary_emb.inv_freq");
}

HfCheckpointReader::HfCheckpointReader(const std::string& dir) : dir_(dir) {
  shape_ = read_hf_config(dir);
  names_ = hf_tensor_names(shape_.model);
  for (size_t i = 0; i < names_.size(); ++i) by_gtrain_[names_[i].gtrain] = i;
  // The files: one model.safetensors, or the shards the index names.
  std::map<std::string, std::string> index;  // tensor -> file, from the index
  const std::vector<std::string> files = hf_safetensors_files(dir, &index);
  const std::string index_path = (fs::path(dir) / kIndexFile).string();
  // Every shard's header (a truncated or damaged shard is its CheckpointError, naming it and the tensor).
  std::map<std::string, std::string> file_of_tensor;
  for (const auto& f : files) {
    auto reader = std::make_shared<SafetensorsReader>(f);
    for (const auto& t : reader->tensors()) {
      if (shard_of_.count(t.name))
        throw ConfigError(str(f, ": tensor '", t.name, "' is also in ", file_of_tensor.at(t.name)));
      shard_of_[t.name] = reader;
      file_of_tensor[t.name] = f;
    }
  }
  for (const auto& [tensor, path] : index) {
    if (!file_of_tensor.count(tensor) || file_of_tensor.at(tensor) != path)
      throw ConfigError(str(index_path, ": tensor '", tensor, "' is not in ", path, ", where the index puts it"));
  }
  std::vector<std::string> problems;
  std::set<std::string> expected;
  const std::string from = str(" (", shape_.config_path, " gives ");
  for (const auto& n : names_) {
    expected.insert(n.hf);
    auto it = shard_of_.find(n.hf);
    if (it == shard_of_.end()) {
      problems.push_back(str(files.size() == 1 ? files[0] : index_path, ": no tensor '", n.hf, "'", from,
                             shape_text(n.hf_shape()), ")"));
      continue;
    }
    const SafetensorsSpec* spec = nullptr;
    for (const auto& t : it->second->tensors())
      if (t.name == n.hf) spec = &t;
    if (spec->shape != n.hf_shape()) {
      problems.push_back(str(file_of_tensor.at(n.hf), ": tensor '", n.hf, "' is ", shape_text(spec->shape), from,
                             shape_text(n.hf_shape()), ")"));
    } else if (!c10::isFloatingType(spec->dtype)) {
      problems.push_back(str(file_of_tensor.at(n.hf), ": tensor '", n.hf, "' is ", c10::toString(spec->dtype),
                             ", not a floating-point type"));
    }
  }
  const std::string arch = hf_architecture(shape_.family);
  for (const auto& [name, reader] : shard_of_) {
    if (expected.count(name)) continue;
    if (is_hf_buffer(name) || (name == "lm_head.weight" && shape_.model.tied_embeddings)) {
      ++ignored_;  // a tied model's head is the embedding
      continue;
    }
    problems.push_back(
        str(file_of_tensor.at(name), ": tensor '", name, "' is not a parameter of a ", arch, " with this config.json"));
  }
  if (!problems.empty())
    throw ConfigError(first_few(problems), str("the tensors must be those of ", shape_.config_path,
                                               "'s model; check that config.json belongs to these files"));
}

const std::string& HfCheckpointReader::file_of(const std::string& gtrain_name) const {
  static const std::string none;
  auto it = by_gtrain_.find(gtrain_name);
  return it == by_gtrain_.end() ? none : shard_of_.at(names_[it->second].hf)->path();
}

torch::ScalarType HfCheckpointReader::stored_dtype(const std::string& gtrain_name) const {
  const auto& hf = names_.at(by_gtrain_.at(gtrain_name)).hf;
  for (const auto& t : shard_of_.at(hf)->tensors())
    if (t.name == hf) return t.dtype;
  return torch::kFloat32;
}

torch::Tensor HfCheckpointReader::read(const std::string& gtrain_name) const {
  auto it = by_gtrain_.find(gtrain_name);
  if (it == by_gtrain_.end()) throw CheckpointError(str(dir_, ": the model has no tensor '", gtrain_name, "'"));
  const HfTensorName& n = names_[it->second];
  torch::Tensor t = shard_of_.at(n.hf)->read(n.hf).to(torch::kFloat32);
  if (n.transpose) t = t.t();
  return t.contiguous();
}

HfExportResult write_hf_checkpoint(const std::string& out_dir, const ModelConfig& m, torch::ScalarType dtype,
                                   int64_t max_shard_bytes, const std::map<std::string, std::string>& metadata,
                                   const std::function<torch::Tensor(const std::string&)>& read,
                                   const nlohmann::json& generation_source) {
  const nlohmann::json config = hf_config_json(m, dtype_config_name(dtype));
  const nlohmann::json generation = hf_generation_config_json(m, generation_source);
  const std::vector<HfTensorName> names = hf_tensor_names(m);
  const fs::path out(out_dir);
  std::error_code ec;
  if (fs::exists(fs::symlink_status(out, ec))) {
    const bool replaceable =
        fs::is_directory(out, ec) && (fs::is_empty(out, ec) || fs::is_regular_file(out / "config.json", ec));
    if (!replaceable)
      throw ConfigError(out_dir + ": exists and is not a Hugging Face model directory (one with config.json)",
                        "give a new directory, or an earlier export to replace");
  }
  // Shards: tensors in order, a new shard when the next tensor would pass max_shard_bytes.
  const int64_t element = static_cast<int64_t>(c10::elementSize(dtype));
  std::vector<std::vector<size_t>> shards(1);
  int64_t in_shard = 0, total = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    int64_t bytes = element;
    for (int64_t d : names[i].shape) bytes *= d;
    if (!shards.back().empty() && in_shard + bytes > max_shard_bytes) shards.emplace_back(), in_shard = 0;
    shards.back().push_back(i);
    in_shard += bytes;
    total += bytes;
  }
  const size_t n_shards = shards.size();
  auto shard_name = [&](size_t k) {
    return n_shards == 1 ? std::string(kSingleFile) : strf("model-%05zu-of-%05zu.safetensors", k + 1, n_shards);
  };
  const fs::path tmp = out.parent_path() / (out.filename().string() + ".tmp-" + std::to_string(::getpid()));
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp, ec);
  if (ec)
    throw CheckpointError(str(tmp.string(), ": cannot create (", ec.message(), ")"),
                          "check that the folder is writable and the disk has room");
  HfExportResult result;
  try {
    write_json_file(tmp / "config.json", config);
    if (!generation.empty()) write_json_file(tmp / "generation_config.json", generation);
    std::map<std::string, std::string> meta = metadata;
    meta["format"] = "pt";
    nlohmann::json weight_map = nlohmann::json::object();
    std::vector<uint32_t> crcs(names.size());
    for (size_t k = 0; k < n_shards; ++k) {
      std::vector<SafetensorsSpec> specs;
      for (size_t i : shards[k]) {
        specs.push_back({names[i].hf, dtype, names[i].hf_shape()});
        weight_map[names[i].hf] = shard_name(k);
      }
      write_safetensors((tmp / shard_name(k)).string(), specs, meta, [&](size_t j) {
        const HfTensorName& n = names[shards[k][j]];
        torch::Tensor t = read(n.gtrain);
        if (t.sizes().vec() != n.shape)
          throw CheckpointError(
              str("tensor '", n.gtrain, "' is ", shape_text(t.sizes().vec()), ", the model's ", shape_text(n.shape)));
        if (n.transpose) t = t.t();
        t = t.to(dtype).contiguous();
        crcs[shards[k][j]] = crc32c(t.data_ptr(), t.nbytes());
        return t;
      });
      result.files.push_back((out / shard_name(k)).string());
    }
    if (n_shards > 1) {
      const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
      write_json_file(tmp / kIndexFile, index);
    }
    // Read back: every tensor's bytes as written.
    for (size_t k = 0; k < n_shards; ++k) {
      SafetensorsReader back((tmp / shard_name(k)).string());
      for (size_t i : shards[k]) {
        const torch::Tensor t = back.has(names[i].hf) ? back.read(names[i].hf) : torch::Tensor();
        if (!t.defined() || t.scalar_type() != dtype || crc32c(t.data_ptr(), t.nbytes()) != crcs[i])
          throw CheckpointError(
              str(result.files[k], ": tensor '", names[i].hf, "' reads back different from what was written"),
              "check the disk and file system holding it, then export again");
      }
    }
    move_into_place(tmp, out, out_dir);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  result.tensors = static_cast<int64_t>(names.size());
  result.bytes = total;
  return result;
}

}  // namespace gtrain
