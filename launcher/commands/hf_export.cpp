// hf_export.cpp: `gtrain ckpt export PATH OUT --format hf`: a checkpoint's gpt or llama model (any
// layout's, assembled whole) as a Hugging Face directory that transformers loads.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <set>

#include "launcher/commands/ckpt_commands.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/hf_checkpoint.h"
#include "runtime/core/checkpoint_dirs.h"
#include "runtime/core/config/job_config.h"
#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/core/hf_config.h"

namespace fs = std::filesystem;

namespace gtrain {

// "5GB", "500MB", "2GiB", "1000": bytes (decimal units as transformers' max_shard_size, binary with i).
int64_t parse_shard_size(const std::string& text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const std::string unit = text.substr(digits);
  static const std::vector<std::pair<std::string, int64_t>> units = {{"", 1},
                                                                     {"B", 1},
                                                                     {"KB", 1000},
                                                                     {"MB", 1000 * 1000},
                                                                     {"GB", 1000 * 1000 * 1000},
                                                                     {"KiB", 1 << 10},
                                                                     {"MiB", 1 << 20},
                                                                     {"GiB", int64_t{1} << 30}};
  for (const auto& [name, scale] : units) {
    if (digits == 0 || digits > 12 || unit != name) continue;
    const int64_t n = std::stoll(text.substr(0, digits));
    if (n > 0) return n * scale;
  }
  throw ConfigError("--max-shard-size: '" + text + "' is not a positive size such as 5GB, 500MB or 2GiB");
}

// The checkpoint's [model] section as a ModelConfig (the manifest keeps each key's TOML text).
ModelConfig manifest_model(const CheckpointReader& ck) {
  std::string toml = "[model]\n";
  for (const auto& [key, text] : ck.manifest().meta.model)
    if (key != "preset" && key != "plugin") toml += key + " = " + text + "\n";
  toml += "[train]\nsteps = 1\n";
  try {
    return parse_job_config(toml, ck.path() + "/manifest.json", {}, {}).model;
  } catch (const ConfigError& e) {
    throw CheckpointError(str(ck.path(), ": its manifest's [model] section does not read: ", first_line(e.what())));
  }
}

int ckpt_export_hf_command(const CkptExportOptions& o) {
  const torch::ScalarType cast = parse_export_dtype(o.dtype);
  const std::string dtype = export_dtype_name(cast);
  if (o.optimizer) throw ConfigError("--optimizer: a Hugging Face directory holds the model only; leave it out");
  const int64_t shard_bytes = parse_shard_size(o.max_shard_size);
  if (o.out.empty()) throw ConfigError("OUT: expected the Hugging Face directory to write, got ''");
  std::error_code ec;
  const fs::path out = fs::absolute(o.out, ec);
  if (!fs::is_directory(out.parent_path(), ec))
    throw ConfigError(str(o.out, ": folder ", out.parent_path().string(), " does not exist"),
                      "create the folder first, or give a path in an existing one");
  CheckpointReader ck(resolve_checkpoint_path(o.path));
  {
    const std::string inside = fs::weakly_canonical(ck.path(), ec).string() + "/";
    if ((fs::weakly_canonical(out, ec).string() + "/").rfind(inside, 0) == 0)
      throw ConfigError(str(o.out, ": is inside the checkpoint it exports (", ck.path(), ")"), "write it elsewhere");
  }
  if (ck.manifest().meta.base_model)
    throw ConfigError(str(ck.path(), ": holds a LoRA run's adapters, not a whole model"),
                      "--format hf --merge writes the base with the adapters folded in; --format peft the adapters");
  ModelConfig m = manifest_model(ck);
  const HfFamily family = hf_family_of(m);
  // The vocabulary as trained (model.vocab = 0 takes it from the data): the embedding's rows.
  const std::string embedding = m.name == "gpt" ? "wte.weight" : "embed_tokens.weight";
  const auto names = ck.tensor_names();
  if (std::find(names.begin(), names.end(), embedding) == names.end())
    throw CheckpointError(str(ck.path(), ": has no tensor '", embedding, "' for a ", m.name, " model"),
                          str("gtrain ckpt inspect ", ck.path(), " shows what it holds"));
  m.vocab = ck.shape(embedding).at(0);
  // The checkpoint's model tensors must be exactly the parameters the Hugging Face form has.
  std::vector<std::string> problems;
  std::set<std::string> wanted;
  for (const auto& t : hf_tensor_names(m)) {
    wanted.insert(t.gtrain);
    if (std::find(names.begin(), names.end(), t.gtrain) == names.end())
      problems.push_back("no tensor '" + t.gtrain + "'");
    else if (ck.shape(t.gtrain) != t.shape)
      problems.push_back(str("'", t.gtrain, "' is [", join(ck.shape(t.gtrain)), "], not [", join(t.shape), "]"));
  }
  for (const auto& n : names)
    if (!wanted.count(n) && !is_optimizer_state(n, names)) problems.push_back("'" + n + "' has no Hugging Face name");
  if (!problems.empty()) {
    problems.resize(std::min<size_t>(problems.size(), 3));
    throw CheckpointError(
        str(ck.path(), ": does not hold the ", m.name, " model its manifest describes: ", join(problems, "; ")),
        str("gtrain ckpt inspect ", ck.path(), " shows what it holds"));
  }
  const std::map<std::string, std::string> meta = {{"gtrain_checkpoint", ck.path()},
                                                   {"gtrain_step", std::to_string(ck.step())}};
  // The generation settings of the model it was imported from, where that directory is still there.
  nlohmann::json generation = nlohmann::json::object();
  const auto& run_config = ck.manifest().meta.config;
  if (run_config && run_config->contains("checkpoint.init_from")) {
    // The manifest keeps each value's TOML text; a basic string reads as a JSON one.
    const nlohmann::json from = nlohmann::json::parse(run_config->at("checkpoint.init_from").get<std::string>(),
                                                      nullptr, /*allow_exceptions=*/false);
    if (from.is_string() && is_hf_model_dir(from.get<std::string>()))
      generation = read_hf_generation_config(from.get<std::string>());
  }
  const HfExportResult r = write_hf_checkpoint(
      out.string(), m, cast, shard_bytes, meta,
      [&](const std::string& name) {
        return ck.read(name);  // pieces checked against their CRC-32C
      },
      generation);
  std::printf("%s: Hugging Face %s, %lld tensors (%s), %zu file%s, %.2f MB, from %s (step %lld)\n", o.out.c_str(),
              hf_architecture(family), (long long)r.tensors, dtype.c_str(), r.files.size(),
              r.files.size() == 1 ? "" : "s", r.bytes / 1e6, ck.path().c_str(), (long long)ck.step());
  return 0;
}

}  // namespace gtrain
