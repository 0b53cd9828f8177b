// initial_weights.cpp: checkpoint.init_from, read through the engine's resharding load.
#include "runtime/train/initial_weights.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <set>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/hf_checkpoint.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/comm/communicator.h"
#include "runtime/core/checkpoint_dirs.h"
#include "runtime/core/crc32c.h"
#include "runtime/core/errors.h"
#include "runtime/core/hf_config.h"
#include "runtime/models/model.h"
#include "runtime/train/parallel_engine.h"

namespace gtrain {
namespace {

constexpr const char* kKey = "checkpoint.init_from";

std::string shape_text(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// A list of problems as one line: the first few, then how many more.
std::string first_few(const std::vector<std::string>& items, size_t shown = 4) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < shown; ++i) out += (i ? "; " : "") + items[i];
  if (items.size() > shown) out += "; and " + std::to_string(items.size() - shown) + " more";
  return out;
}

// The model tensors of a source (its optimizer state left out), their shapes, and a reader.
struct Source {
  std::string path;
  std::map<std::string, std::vector<int64_t>> shapes;
  std::map<std::string, torch::ScalarType> dtypes;
  std::function<torch::Tensor(const std::string&)> read;
  int64_t optimizer_tensors = 0;  // its optimizer state, which is not read
  int64_t ignored_tensors = 0;    // a Hugging Face directory's buffers and tied head, not read
};

Source open_source(const std::string& path, const char* key = kKey) {
  namespace fs = std::filesystem;
  std::error_code ec;
  Source s;
  std::vector<std::string> names;
  std::map<std::string, std::vector<int64_t>> all;
  try {  // a file or manifest that cannot be read is this key's error (exit 2), naming it
    if (is_hf_model_dir(path)) {
      // A Hugging Face directory: its tensors under gtrain's names and layouts, as float32; what it
      // holds beyond the parameters (buffers, a tied model's head) is counted, not read.
      std::shared_ptr<HfCheckpointReader> hf;
      try {
        hf = std::make_shared<HfCheckpointReader>(path);
      } catch (const ConfigError& e) {
        throw ConfigError(std::string(key) + ": " + e.what(), e.hint());
      }
      s.path = path;
      for (const auto& t : hf->tensors()) all[t.gtrain] = t.shape, s.dtypes[t.gtrain] = torch::kFloat32;
      s.read = [hf](const std::string& n) { return hf->read(n); };
      s.ignored_tensors = hf->ignored();
      s.shapes = std::move(all);
      return s;
    } else if (fs::is_directory(path, ec)) {
      auto ck = std::make_shared<CheckpointReader>(resolve_checkpoint_path(path, key));
      s.path = ck->path();
      for (const auto& n : ck->tensor_names()) all[n] = ck->shape(n), s.dtypes[n] = ck->dtype(n), names.push_back(n);
      s.read = [ck](const std::string& n) { return ck->read(n); };
    } else if (fs::exists(path, ec)) {
      auto st = std::make_shared<SafetensorsReader>(path);
      s.path = path;
      for (const auto& t : st->tensors()) all[t.name] = t.shape, s.dtypes[t.name] = t.dtype, names.push_back(t.name);
      s.read = [st](const std::string& n) { return st->read(n); };
    }
  } catch (const CheckpointError& e) {
    throw ConfigError(std::string(key) + ": " + e.what(), e.hint());
  }
  if (s.path.empty()) check_init_from(path);  // neither a directory nor a file: throws its one-line error
  for (const auto& [n, shape] : all) {
    if (is_optimizer_state(n, names))
      ++s.optimizer_tensors;
    else
      s.shapes[n] = shape;
  }
  return s;
}

// Checks that `src` holds every tensor of `held` (this rank's, with their global shapes; optimizer
// state among held_names skipped) and nothing that no rank holds (`known`: every model tensor of this
// rank). A collective: any rank's problem stops all, with ConfigError naming checkpoint.init_from.
void check_source_fits(const Source& src, const std::map<std::string, std::vector<int64_t>>& held,
                       const std::vector<std::string>& held_names, const std::set<std::string>& known,
                       Communicator& comm) {
  std::vector<std::string> problems;
  for (const auto& [name, shape] : held) {
    if (is_optimizer_state(name, held_names)) continue;
    auto it = src.shapes.find(name);
    if (it == src.shapes.end()) {
      problems.push_back("no tensor '" + name + "' " + shape_text(shape));
    } else if (it->second != shape) {
      problems.push_back("'" + name + "' is " + shape_text(it->second) + ", the model's " + shape_text(shape));
    } else if (!c10::isFloatingType(src.dtypes.at(name))) {
      problems.push_back("'" + name + "' is " + c10::toString(src.dtypes.at(name)) + ", not a floating-point type");
    }
  }
  // Tensors no rank holds (another architecture: more layers, a second head): a union over ranks,
  // since a pipeline stage holds only its own blocks.
  std::vector<std::string> file_names;
  for (const auto& [name, shape] : src.shapes) file_names.push_back(name);
  auto mine = torch::zeros({static_cast<int64_t>(file_names.size()) + 1}, torch::kInt);
  for (size_t i = 0; i < file_names.size(); ++i) mine[static_cast<int64_t>(i)] = known.count(file_names[i]) ? 1 : 0;
  mine[static_cast<int64_t>(file_names.size())] = problems.empty() ? 0 : 1;  // any rank's problem stops all
  if (comm.size() > 1) comm.allreduce(mine, ReduceOp::kMax);
  for (size_t i = 0; i < file_names.size(); ++i) {
    if (mine[static_cast<int64_t>(i)].item<int>() == 0)
      problems.push_back("'" + file_names[i] + "' is not a tensor of this model");
  }
  if (!problems.empty() || mine[static_cast<int64_t>(file_names.size())].item<int>() != 0) {
    if (problems.empty()) problems.push_back("another rank's tensors do not match (its error says which)");
    throw ConfigError(std::string(kKey) + ": " + src.path + " does not fit the model: " + first_few(problems),
                      "export the weights of a run with the same [model] settings (gtrain ckpt export), or leave "
                      "checkpoint.init_from empty");
  }
}

}  // namespace

InitialWeights load_initial_weights(ParallelEngine& engine, Communicator& comm, const std::string& path) {
  const Source src = open_source(path);
  // The tensors this rank holds (any layout's part of them) and their global shapes.
  std::map<std::string, std::vector<int64_t>> held;
  std::vector<std::string> held_names;
  std::set<std::string> known;
  for (const auto& s : engine.state_shards()) {
    held[s.name] = s.global_shape;
    held_names.push_back(s.name);
    known.insert(s.name);
  }
  check_source_fits(src, held, held_names, known, comm);
  // Model tensors from the source; the optimizer as a fresh one: zero moments at step 0 (the engine
  // then starts them as it would have; SGD momentum is not read at step 0).
  engine.load_state([&](const std::string& name) -> torch::Tensor {
    if (name == "optimizer.step") return torch::zeros({1}, torch::kLong);
    if (is_optimizer_state(name, held_names)) {
      const std::string param = name.substr(0, name.rfind('.'));
      return torch::zeros(held.at(param), torch::kFloat);
    }
    return src.read(name);
  });
  return {src.path, static_cast<int64_t>(src.shapes.size()), src.optimizer_tensors, src.ignored_tensors};
}

InitialWeights load_frozen_base(ParallelEngine& engine, Communicator& comm, const std::string& path) {
  const Source src = open_source(path);
  std::map<std::string, std::vector<int64_t>> held;
  std::vector<std::string> held_names;
  std::set<std::string> known;
  for (const auto& [name, shape] : engine.frozen_parameters()) {
    held[name] = shape;
    held_names.push_back(name);
    known.insert(name);
  }
  for (const auto& s : engine.state_shards()) known.insert(s.name);
  check_source_fits(src, held, held_names, known, comm);
  engine.load_frozen([&](const std::string& name) { return src.read(name); });
  return {src.path, static_cast<int64_t>(src.shapes.size()), src.optimizer_tensors, src.ignored_tensors};
}

InitialWeights load_model_weights(Model& model, const std::string& path, const char* key) {
  const Source src = open_source(path, key);
  std::vector<std::string> problems;
  std::set<std::string> known;
  const auto params = model.named_parameters();
  for (const auto& kv : params) {
    known.insert(kv.key());
    const auto it = src.shapes.find(kv.key());
    if (it == src.shapes.end())
      problems.push_back("no tensor '" + kv.key() + "' " + shape_text(kv.value().sizes().vec()));
    else if (it->second != kv.value().sizes().vec())
      problems.push_back("'" + kv.key() + "' is " + shape_text(it->second) + ", the model's " +
                         shape_text(kv.value().sizes().vec()));
  }
  for (const auto& [name, shape] : src.shapes)
    if (!known.count(name)) problems.push_back("'" + name + "' is not a tensor of this model");
  if (!problems.empty()) {
    throw ConfigError(std::string(key) + ": " + src.path +
                      " does not fit the model its manifest describes: " + first_few(problems));
  }
  torch::NoGradGuard ng;
  for (auto& kv : params) kv.value().copy_(src.read(kv.key()));
  return {src.path, static_cast<int64_t>(src.shapes.size()), src.optimizer_tensors, src.ignored_tensors};
}

std::string base_model_hash(const std::string& path, const char* key) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> files;
  if (fs::is_directory(path, ec)) {
    // A Hugging Face directory: its weights and configs; a checkpoint (or a run's newest): every file.
    const bool hf = is_hf_model_dir(path);
    const std::string dir = hf ? path : resolve_checkpoint_path(path, key);
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      const std::string ext = e.path().extension().string();
      if (e.is_regular_file(ec) && (!hf || ext == ".safetensors" || ext == ".json" || ext == ".bin"))
        files.push_back(e.path());
    }
  } else {
    files.push_back(path);
  }
  std::sort(files.begin(), files.end());
  uint32_t crc = 0;
  uint64_t bytes = 0;
  std::vector<char> buf(8 << 20);
  for (const auto& f : files) {
    const std::string name = f.filename().string();
    crc = crc32c(name.data(), name.size(), crc);
    std::ifstream in(f, std::ios::binary);
    if (!in) throw ConfigError(std::string(key) + ": " + f.string() + ": cannot be read");
    while (in) {
      in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      const auto n = static_cast<size_t>(in.gcount());
      crc = crc32c(buf.data(), n, crc);
      bytes += n;
    }
  }
  char hex[64];
  std::snprintf(hex, sizeof(hex), "crc32c:%08x:%llu", crc, static_cast<unsigned long long>(bytes));
  return hex;
}

std::string base_model_hash(Communicator& comm, const std::string& path, const char* key) {
  constexpr int64_t kBytes = 128;  // "crc32c:" + 8 hex digits + ":" + a byte count, with room to spare
  auto buf = torch::zeros({kBytes}, torch::kByte);
  if (comm.rank() == 0) {
    const std::string hash = base_model_hash(path, key);
    GT_CHECK(static_cast<int64_t>(hash.size()) < kBytes, "base_model_hash: a hash longer than its buffer");
    std::memcpy(buf.data_ptr<uint8_t>(), hash.data(), hash.size());
  }
  if (comm.size() > 1) comm.broadcast(buf, 0);
  return std::string(reinterpret_cast<const char*>(buf.data_ptr<uint8_t>()));
}

}  // namespace gtrain
