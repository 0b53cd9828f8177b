// teacher_stats.cpp: distill.teacher's shape from config.json or a checkpoint manifest, sized as a decoder.
#include "runtime/core/teacher_stats.h"

#include <exception>

#include "runtime/core/checkpoint_dirs.h"
#include "runtime/core/checkpoint_manifest.h"
#include "runtime/core/errors.h"
#include "runtime/core/hf_config.h"

namespace gtrain {
namespace {

// A gtrain checkpoint's model: its manifest's [model] keys, the vocabulary its embedding has.
ModelConfig checkpoint_model(const std::string& path) {
  const std::string dir = resolve_checkpoint_path(path, "distill.teacher");
  const CheckpointManifest manifest = read_checkpoint_manifest(dir);
  std::string toml = "[model]\n";
  for (const auto& [key, text] : manifest.meta.model)
    if (key != "preset" && key != "plugin") toml += key + " = " + text + "\n";
  toml += "[train]\nsteps = 1\n";
  ModelConfig m = parse_job_config(toml, dir + "/manifest.json", {}, {}).model;
  for (const char* name : {"embed_tokens.weight", "wte.weight"}) {
    const auto it = manifest.tensors.find(name);
    if (it != manifest.tensors.end() && !it->second.shape.empty()) m.vocab = it->second.shape.front();
  }
  return m;
}

}  // namespace

ModelConfig teacher_model_config(const JobConfig& cfg) {
  const std::string& path = cfg.distill.teacher;
  ModelConfig m;
  try {
    m = is_hf_model_dir(path) ? read_hf_config(path).model : checkpoint_model(path);
  } catch (const Error& e) {  // a manifest that cannot be read is this key's bad input (exit 2)
    const std::string what = first_line(e.what());
    throw ConfigError(what.rfind("distill.teacher", 0) == 0 ? what : "distill.teacher: " + what, e.hint());
  }
  m.seq_len = cfg.model.seq_len;
  return m;
}

std::optional<ModelStats> teacher_stats(const JobConfig& cfg, std::string* note) {
  const DistillConfig& d = cfg.distill;
  if (d.teacher.empty() || !d.cache.empty()) return std::nullopt;
  try {
    const ModelConfig m = teacher_model_config(cfg);
    ModelStats s;
    if (m.vocab > 0 && decoder_stats(m, m.vocab, &s)) return s;
    if (note) *note = "distill.teacher " + d.teacher + ": not a gpt or llama model of known vocabulary";
  } catch (const std::exception& e) {
    if (note) *note = "distill.teacher: " + first_line(e.what());
  }
  return std::nullopt;
}

}  // namespace gtrain
