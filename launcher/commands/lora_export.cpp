// lora_export.cpp: a LoRA run's checkpoint exported: `gtrain ckpt export RUN OUT --format peft` (the
// adapters as PEFT's save_pretrained writes them: adapter_config.json and adapter_model.safetensors,
// keys "base_model.model.<module>.lora_A.weight") and `--format hf --merge` (the base model with
// W + alpha / rank x B A folded into every adapted weight, as peft's merge_and_unload gives).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "launcher/commands/ckpt_commands.h"
#include "launcher/commands/lora_merge.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/hf_checkpoint.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/core/checkpoint_dirs.h"
#include "runtime/core/config/job_config.h"
#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/core/hf_config.h"
#include "runtime/train/initial_weights.h"

namespace fs = std::filesystem;

namespace gtrain {
namespace {

// The LoRA checkpoint and what its run recorded.
struct LoraCheckpoint {
  std::shared_ptr<CheckpointReader> ck;
  nlohmann::json base;                        // {"path", "hash"}
  std::map<std::string, std::string> config;  // the run's flat config ("section.key": TOML text)
  std::vector<std::string> adapters;          // "<module>" with both .lora_A and .lora_B, in checkpoint order
  int64_t rank = 0;
  double alpha = 0;

  std::string value(const std::string& key) const {
    auto it = config.find(key);
    if (it == config.end()) throw CheckpointError(ck->path() + ": its manifest does not record " + key);
    const auto j = nlohmann::json::parse(it->second, nullptr, false);
    return j.is_string() ? j.get<std::string>() : it->second;
  }
};

// What a LoRA run's checkpoint records; ConfigError for a whole model's checkpoint.
LoraCheckpoint read_lora(std::shared_ptr<CheckpointReader> ck) {
  LoraCheckpoint l;
  l.ck = std::move(ck);
  const auto& meta = l.ck->manifest().meta;
  if (!meta.base_model)
    throw ConfigError(str(l.ck->path(), ": holds a whole model, not LoRA adapters (the run had no [adapter])"),
                      "export it with --format hf (no --merge) or --format safetensors");
  l.base = *meta.base_model;
  if (meta.config)
    for (const auto& [k, v] : meta.config->items()) l.config[k] = v.get<std::string>();
  l.rank = std::stoll(l.value("adapter.rank"));
  l.alpha = std::stod(l.value("adapter.alpha"));
  const auto names = l.ck->tensor_names();
  const std::set<std::string> all(names.begin(), names.end());
  for (const auto& n : names) {
    if (!ends_with(n, ".lora_A")) continue;
    const std::string module = n.substr(0, n.size() - 7);
    if (!all.count(module + ".lora_B"))
      throw CheckpointError(str(l.ck->path(), ": '", n, "' has no '", module, ".lora_B'"));
    l.adapters.push_back(module);
  }
  if (l.adapters.empty()) throw CheckpointError(l.ck->path() + ": holds no adapter (no tensor named *.lora_A)");
  return l;
}

LoraCheckpoint open_lora(const std::string& path) {
  return read_lora(std::make_shared<CheckpointReader>(resolve_checkpoint_path(path)));
}

// The model the adapters sit on, with the vocabulary its base has.
ModelConfig adapted_model(const LoraCheckpoint& l) {
  ModelConfig m = manifest_model(*l.ck);
  const std::string base = l.base.value("path", "");
  if (m.vocab <= 0 && is_hf_model_dir(base)) m.vocab = read_hf_config(base).model.vocab;
  return m;
}

// gtrain module name -> the Hugging Face module name ("layers.0.self_attn.q_proj" ->
// "model.layers.0.self_attn.q_proj"), and whether it is a GPT-2 Conv1D.
std::map<std::string, std::pair<std::string, bool>> hf_modules(const ModelConfig& m) {
  std::map<std::string, std::pair<std::string, bool>> out;
  for (const auto& t : hf_tensor_names(m)) {
    if (!ends_with(t.gtrain, ".weight") || !ends_with(t.hf, ".weight")) continue;
    out[t.gtrain.substr(0, t.gtrain.size() - 7)] = {t.hf.substr(0, t.hf.size() - 7), t.transpose};
  }
  return out;
}

// PEFT's target_modules entry for a Hugging Face module: its last name for llama's unambiguous
// projections, the last two for GPT-2 (attn.c_proj and mlp.c_proj share "c_proj").
std::string peft_target(const std::string& hf_module, bool gpt2) {
  const auto last = hf_module.rfind('.');
  if (!gpt2) return hf_module.substr(last + 1);
  const auto before = hf_module.rfind('.', last - 1);
  return hf_module.substr(before + 1);
}

fs::path fresh_out_dir(const std::string& out_text, const std::string& ck_path) {
  if (out_text.empty()) throw ConfigError("OUT: expected the directory to write, got ''");
  std::error_code ec;
  const fs::path out = fs::absolute(out_text, ec);
  if (!fs::is_directory(out.parent_path(), ec))
    throw ConfigError(str(out_text, ": folder ", out.parent_path().string(), " does not exist"),
                      "create the folder first, or give a path in an existing one");
  const std::string inside = fs::weakly_canonical(ck_path, ec).string() + "/";
  if ((fs::weakly_canonical(out, ec).string() + "/").rfind(inside, 0) == 0)
    throw ConfigError(str(out_text, ": is inside the checkpoint it exports (", ck_path, ")"), "write it elsewhere");
  if (fs::exists(out, ec) && !fs::exists(out / "adapter_config.json", ec) && !fs::is_empty(out, ec))
    throw ConfigError(str(out_text, ": exists and is not an earlier PEFT export (no adapter_config.json)"),
                      "give a new directory, or remove it");
  return out;
}

}  // namespace

int ckpt_export_peft_command(const CkptExportOptions& o) {
  if (o.optimizer) throw ConfigError("--optimizer: a PEFT adapter holds the weights only; leave it out");
  const torch::ScalarType dtype = parse_export_dtype(o.dtype);
  const LoraCheckpoint l = open_lora(o.path);
  const ModelConfig m = adapted_model(l);
  const bool gpt2 = m.name == "gpt";
  const auto modules = hf_modules(m);
  const fs::path out = fresh_out_dir(o.out, l.ck->path());
  std::vector<SafetensorsSpec> specs;
  std::vector<std::string> sources;
  std::set<std::string> targets;
  for (const auto& module : l.adapters) {
    auto it = modules.find(module);
    if (it == modules.end())
      throw CheckpointError(
          str(l.ck->path(), ": adapter '", module, "' sits on no Hugging Face module of a ", m.name, " model"));
    targets.insert(peft_target(it->second.first, gpt2));
    for (const char* part : {"lora_A", "lora_B"}) {
      const std::string name = module + "." + part;
      specs.push_back({"base_model.model." + it->second.first + "." + part + ".weight", dtype, l.ck->shape(name)});
      sources.push_back(name);
    }
  }
  const std::string tmp = out.string() + ".tmp-export";
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp);
  const std::map<std::string, std::string> meta = {
      {"format", "pt"}, {"gtrain_checkpoint", l.ck->path()}, {"gtrain_step", std::to_string(l.ck->step())}};
  const int64_t bytes = write_safetensors(tmp + "/adapter_model.safetensors", specs, meta, [&](size_t i) {
    return l.ck->read(sources[i]).to(dtype).contiguous();  // pieces checked against their CRC-32C
  });
  const std::string base = l.base.value("path", "");
  nlohmann::json cfg = {
      {"peft_type", "LORA"},
      {"task_type", "CAUSAL_LM"},
      {"r", l.rank},
      {"lora_alpha", l.alpha},
      {"lora_dropout", std::stod(l.value("adapter.dropout"))},
      {"target_modules", std::vector<std::string>(targets.begin(), targets.end())},
      {"bias", "none"},
      {"fan_in_fan_out", gpt2},
      {"init_lora_weights", true},
      {"inference_mode", true},
      {"modules_to_save", nullptr},
      {"use_rslora", false},
      {"use_dora", false},
      {"base_model_name_or_path", base.empty() ? nullptr : nlohmann::json(fs::absolute(base).string())},
      {"revision", nullptr}};
  {
    std::ofstream f(tmp + "/adapter_config.json");
    f << cfg.dump(2) << "\n";
    if (!f) throw Error(tmp + "/adapter_config.json: cannot write", "check the disk space and permissions");
  }
  fs::remove_all(out, ec);
  fs::rename(tmp, out);
  std::printf("%s: PEFT LoRA adapter, %zu tensors (rank %lld, alpha %g, targets %s), %.2f MB, from %s (step %lld)\n",
              o.out.c_str(), specs.size(), (long long)l.rank, l.alpha,
              join(std::vector<std::string>(targets.begin(), targets.end()), ", ").c_str(), bytes / 1e6,
              l.ck->path().c_str(), (long long)l.ck->step());
  return 0;
}

namespace {

// The merged model of an opened LoRA checkpoint (open_merged_lora).
MergedLora merged_lora(const LoraCheckpoint& l) {
  const std::string base = l.base.value("path", "");
  if (base.empty())
    throw ConfigError(str(l.ck->path(),
                          ": its base is the model's own initialisation (no checkpoint.init_from), "
                          "which no file holds"),
                      "export the adapters with --format peft");
  if (!is_hf_model_dir(base))
    throw ConfigError(str(l.ck->path(), ": its base ", base, " is not a Hugging Face directory"),
                      "merging reads a Hugging Face base; export the adapters with --format peft");
  const std::string recorded = l.base.value("hash", "");
  const std::string hash = base_model_hash(base);
  if (hash != recorded)
    throw ConfigError(
        str(base, ": has changed since the run trained on it (", hash, ", the checkpoint recorded ", recorded, ")"),
        "restore the base the adapters were trained on");
  const double scaling = l.alpha / static_cast<double>(l.rank);
  MergedLora m;
  m.base = base;
  m.reader = std::make_shared<HfCheckpointReader>(base);
  const std::set<std::string> adapted(l.adapters.begin(), l.adapters.end());
  m.adapters = static_cast<int64_t>(adapted.size());
  auto reader = m.reader;
  m.read = [ck = l.ck, reader, adapted, scaling](const std::string& name) {
    torch::Tensor w = reader->read(name);
    const std::string module = ends_with(name, ".weight") ? name.substr(0, name.size() - 7) : "";
    if (!adapted.count(module)) return w;
    const torch::Tensor A = ck->read(module + ".lora_A").to(torch::kDouble);
    const torch::Tensor B = ck->read(module + ".lora_B").to(torch::kDouble);
    return (w.to(torch::kDouble) + scaling * torch::matmul(B, A)).to(torch::kFloat);
  };
  return m;
}

}  // namespace

MergedLora open_merged_lora(const std::shared_ptr<CheckpointReader>& ck) {
  return merged_lora(read_lora(ck));
}

int ckpt_export_merged_command(const CkptExportOptions& o) {
  if (o.optimizer) throw ConfigError("--optimizer: a Hugging Face directory holds the model only; leave it out");
  const torch::ScalarType dtype = parse_export_dtype(o.dtype);
  const int64_t shard_bytes = parse_shard_size(o.max_shard_size);
  const LoraCheckpoint l = open_lora(o.path);
  const MergedLora merged = merged_lora(l);
  const ModelConfig m = adapted_model(l);
  const std::map<std::string, std::string> meta = {{"gtrain_checkpoint", l.ck->path()},
                                                   {"gtrain_step", std::to_string(l.ck->step())},
                                                   {"gtrain_lora_base", merged.base}};
  const HfExportResult r = write_hf_checkpoint(fs::absolute(o.out).string(), m, dtype, shard_bytes, meta, merged.read,
                                               read_hf_generation_config(merged.base));
  std::printf("%s: Hugging Face model, %lld adapters merged into %s, %lld tensors, %zu file%s, %.2f MB (step %lld)\n",
              o.out.c_str(), (long long)merged.adapters, merged.base.c_str(), (long long)r.tensors, r.files.size(),
              r.files.size() == 1 ? "" : "s", r.bytes / 1e6, (long long)l.ck->step());
  return 0;
}

}  // namespace gtrain
