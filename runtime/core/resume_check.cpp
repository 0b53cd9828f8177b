// resume_check.cpp: the resume rules, from the manifest and the configuration.
#include "runtime/core/resume_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "runtime/core/errors.h"
#include "runtime/core/format.h"
#include "runtime/core/lr_schedule.h"

namespace gtrain {
namespace key = manifest_key;
namespace {

// Settings a resume may change that change the trajectory from the resumed step on, each with what
// it changes. The model's keys, train.seed and precision.dtype are the resume check's own (drift).
struct TrajectoryKey {
  const char* key;
  bool schedule;  // the learning rate at the resumed step is recomputed from it
  const char* effect;
};
constexpr TrajectoryKey kTrajectoryKeys[] = {
    {"optimizer.learning_rate", true, "the peak learning rate"},
    {"train.steps", true, "the run's length (the learning-rate schedule is stretched or squeezed to it)"},
    {"train.epochs", true, "the run's length (the learning-rate schedule is stretched or squeezed to it)"},
    {"train.tokens", true, "the run's length (the learning-rate schedule is stretched or squeezed to it)"},
    {"train.warmup_steps", true, "the warmup of the learning-rate schedule"},
    {"train.lr_schedule", true, "the decay of the learning rate"},
    {"train.min_lr_ratio", true, "the final learning rate of the decay"},
    {"optimizer.weight_decay", false, "the weight decay of every update"},
    {"optimizer.beta1", false, "the optimizer's first-moment decay"},
    {"optimizer.beta2", false, "the optimizer's second-moment decay"},
    {"optimizer.eps", false, "the optimizer's epsilon"},
    {"optimizer.momentum", false, "sgd's momentum"},
    {"optimizer.nesterov", false, "sgd's Nesterov momentum"},
    {"train.grad_clip", false, "gradient clipping"},
    {"precision.loss_scale_init", false, "fp16's loss scaling"},
    {"precision.loss_scale_window", false, "fp16's loss scaling"},
};

void add_drift(std::string& drift, const std::string& change) {
  drift += (drift.empty() ? "" : ", ") + change;
}

// The model must be the one that was saved: every key that shapes its parameters and changed is
// named. Keys this model does not read may change; model.vocab = 0 means the data's vocabulary.
void check_model(const CheckpointManifest& m, const std::string& path, const JobConfig& config,
                 const ResumeFacts& facts, ResumeVerdict& v) {
  std::string changed;
  const int64_t data_vocab = facts.data_vocab;
  const auto resolved = [data_vocab](const std::string& key, const std::string& value) {
    return key == "vocab" && value == "0" && data_vocab > 0 ? std::to_string(data_vocab) : value;
  };
  bool data_vocab_changed = false;
  for (const auto& f : cfg::list_fields(config.model)) {
    const auto saved = m.meta.model.find(f.key);
    if (f.key == "plugin" || saved == m.meta.model.end()) continue;
    const std::string& was = saved->second;
    if (resolved(f.key, was) == resolved(f.key, f.value)) continue;
    std::string change = "model." + f.key + " " + was + " -> " + f.value;
    if (f.key == "vocab" && f.value == "0") {
      change =
          "model.vocab " + was + " -> " + resolved(f.key, f.value) + " (model.vocab = 0: the data's largest id + 1)";
      data_vocab_changed = m.meta.vocab_from_data.value_or(false);
    }
    if (model_key_shapes_parameters(config.model.name, f.key)) {
      changed += (changed.empty() ? "" : ", ") + change;
    } else if (f.key == "dropout") {
      v.drift = change;
    }
  }
  if (changed.empty()) return;
  v.refusals.push_back({true, path + " was written for a different model (" + changed + ")",
                        data_vocab_changed ? "the data's largest id changed (data.path / data.eval_path): "
                                             "restore the files the run trained with, or --no-resume to start "
                                             "over"
                                           : "use the model config the run started with, or --no-resume to "
                                             "start over"});
}

void check_batch_and_optimizer(const CheckpointManifest& m, const std::string& path, const JobConfig& config,
                               const ResumeFacts& facts, ResumeVerdict& v) {
  if (m.meta.global_batch && *m.meta.global_batch != facts.global_batch) {
    v.refusals.push_back({true,
                          path + " was written with train.global_batch = " + std::to_string(*m.meta.global_batch) +
                              ", this run has " + std::to_string(facts.global_batch),
                          "keep the global batch across stages (the planner keeps it on any GPU count)"});
  }
  // The optimizer's state cannot carry over to another optimizer: say so before reading any tensor.
  const std::string saved = m.meta.optimizer.value_or("");
  if (!saved.empty() && saved != config.optimizer.name) {
    v.refusals.push_back(
        {true, path + " was written with optimizer.name = " + saved + ", this run has " + config.optimizer.name,
         "its optimizer state cannot carry over: use optimizer.name = " + saved + ", or --no-resume to start over"});
  }
}

// LoRA: the checkpoint holds adapters for one base model; full training holds the whole model.
void check_base_model(const CheckpointManifest& m, const std::string& path, const ResumeFacts& facts,
                      ResumeVerdict& v) {
  const bool was_lora = m.meta.base_model.has_value(), is_lora = !facts.base_model.is_null();
  if (was_lora != is_lora) {
    v.refusals.push_back({true,
                          path + (was_lora ? " holds LoRA adapters (adapter.kind = \"lora\"), this run trains every "
                                             "parameter"
                                           : " holds a full model's training state, this run trains LoRA adapters"),
                          was_lora ? "resume with the run's [adapter] settings, or --no-resume to start over"
                                   : "start the LoRA run from it with checkpoint.init_from (export the model with "
                                     "gtrain ckpt export), or --no-resume"});
    return;
  }
  if (!was_lora) return;
  const auto& saved = *m.meta.base_model;
  if (saved.value("hash", "") == facts.base_model.value("hash", "")) return;
  const auto shown = [](const nlohmann::json& b) {
    const std::string p = b.value("path", "");
    return (p.empty() ? std::string("its own initialisation") : p) + " (" + b.value("hash", "") + ")";
  };
  v.refusals.push_back({true,
                        path + ": its adapters were trained on base model " + shown(saved) + ", this run's base is " +
                            shown(facts.base_model),
                        "restore that base (checkpoint.init_from) or --no-resume to start over: adapters do not "
                        "carry over to another base"});
}

// Distillation: a student resumed with another teacher would follow another trajectory. Turning
// distillation on or off is a choice the config shows, and not refused.
void check_teacher_identity(const CheckpointManifest& m, const std::string& path, const ResumeFacts& facts,
                            ResumeVerdict& v) {
  if (!m.meta.teacher || facts.teacher.is_null()) return;
  const auto& saved = *m.meta.teacher;
  if (saved.value("hash", "") == facts.teacher.value("hash", "")) return;
  const auto shown = [](const nlohmann::json& t) { return t.value("path", "") + " (" + t.value("hash", "") + ")"; };
  v.refusals.push_back({true,
                        path + ": its student was distilled from teacher " + shown(saved) + ", this run's teacher is " +
                            shown(facts.teacher),
                        "restore that teacher (distill.teacher or distill.cache) or --no-resume to start over"});
}

// Other training data (shards added, a file replaced): the sample order from here differs.
void check_data(const CheckpointManifest& m, const JobConfig& config, const ResumeFacts& facts, ResumeVerdict& v) {
  const int64_t saved_samples = m.meta.train_samples.value_or(facts.train_samples);
  const std::string files_changed =
      m.meta.train_data ? data_files_changed(*m.meta.train_data, facts.train_identity) : "";
  if (saved_samples == facts.train_samples && files_changed.empty()) return;
  const bool tail_moved =
      facts.has_eval && config.data.eval_path.empty() && is_token_file(config.data.kind) && !is_text(config.data.kind);
  add_drift(v.drift, str("the training data (", config.data.kind, " ") +
                         (saved_samples == facts.train_samples
                              ? std::to_string(saved_samples)
                              : std::to_string(saved_samples) + " -> " + std::to_string(facts.train_samples)) +
                         " samples" + (files_changed.empty() ? "" : "; " + files_changed) +
                         (tail_moved ? "; data.eval_fraction's held-out tail moved with it, data.eval_path would "
                                       "keep it fixed)"
                                     : ")"));
}

// train.seed, precision.dtype and the data: drift, named if the probe check fails.
void check_drift(const CheckpointManifest& m, const JobConfig& config, const ResumeFacts& facts, ResumeVerdict& v) {
  if (m.meta.seed && *m.meta.seed != config.train.seed) {
    add_drift(v.drift, "train.seed " + std::to_string(*m.meta.seed) + " -> " + std::to_string(config.train.seed));
  }
  const std::string saved_dtype = m.meta.precision.value_or("");
  if (!saved_dtype.empty() && saved_dtype != config.precision.dtype) {
    add_drift(v.drift, "precision.dtype " + saved_dtype + " -> " + config.precision.dtype);
  }
  check_data(m, config, facts, v);
}

// The probe batch is taken by its saved window indices where they still exist (the data may have shrunk).
std::vector<int64_t> probe_indices(const CheckpointManifest& m, const ResumeFacts& facts) {
  if (!m.meta.probe_indices) return facts.probe_indices;
  const auto& saved = *m.meta.probe_indices;
  const int64_t n = facts.train_samples;
  if (std::all_of(saved.begin(), saved.end(), [n](int64_t i) { return i >= 0 && i < n; })) return saved;
  return facts.probe_indices;
}

// The keys whose values differ from the checkpoint's (the ledger's), and a warning for each that
// changes the trajectory, with what it changes.
void note_config_changes(const CheckpointManifest& m, const std::string& path, const JobConfig& config,
                         const ResumeFacts& facts, ResumeVerdict& v) {
  if (!m.meta.config) return;  // written before gtrain recorded it
  const auto& was = *m.meta.config;
  for (const auto& [k, value] : flat_fields(config)) {
    if (!was.contains(k) || !was.at(k).is_string()) continue;
    const std::string before = was.at(k).get<std::string>();
    // The global batch the plan gives within parallel.batch_tolerance is the resume check's.
    if (before != value && k != "train.global_batch") v.config_changes[k] = {before, value};
  }
  // The chunk a bitwise checkpoint ran with is the manifest's (its config may have left it to the
  // planner, and this run's config holds the one kept from it).
  if (m.meta.chunk && *m.meta.chunk > 0) {
    const std::string was_chunk = std::to_string(*m.meta.chunk),
                      now_chunk = flat_fields(config).at("train.reproducible_chunk");
    v.config_changes.erase("train.reproducible_chunk");
    if (was_chunk != now_chunk) v.config_changes["train.reproducible_chunk"] = {was_chunk, now_chunk};
  }
  const int64_t step = m.step;
  if (step >= facts.total_steps) return;
  const double lr_now = lr_at(config.train, config.optimizer.learning_rate, step, facts.total_steps);
  char lr_text[160] = "";
  if (m.meta.lr_next) {
    std::snprintf(lr_text, sizeof(lr_text), "; the learning rate at step %lld goes %.6g -> %.6g",
                  static_cast<long long>(step), *m.meta.lr_next, lr_now);
  }
  for (const auto& t : kTrajectoryKeys) {
    if (!v.config_changes.contains(t.key)) continue;
    const auto& c = v.config_changes.at(t.key);
    v.warnings.push_back(std::string(t.key) + " " + c[0].get<std::string>() + " -> " + c[1].get<std::string>() +
                         " since " + path + ": changes " + t.effect + " from step " + std::to_string(step) + " on" +
                         (t.schedule ? lr_text : ""));
  }
  // Bitwise mode's guarantee covers the steps run in it with one chunk (and, on CPU ranks, one
  // thread count): a change is where it ends or starts.
  const std::string at = " since " + path + ": ";
  const std::string from = " at step " + std::to_string(step);
  if (v.config_changes.contains("train.reproducible")) {
    const auto& c = v.config_changes.at("train.reproducible");
    const bool ends = c[0].get<std::string>() == "\"bitwise\"";  // flat_fields quotes strings
    v.warnings.push_back(
        "train.reproducible " + c[0].get<std::string>() + " -> " + c[1].get<std::string>() + at +
        (ends ? "the bitwise guarantee ends" + from +
                    " (later steps sum gradients in the layout's own order, equal to a few ulps)"
              : "the bitwise guarantee starts" + from + " (the steps before were summed in their layouts' own order)"));
  } else if (config.train.reproducible == Reproducible::bitwise) {
    for (const char* key : {"train.reproducible_chunk", "train.threads"}) {
      if (!v.config_changes.contains(key)) continue;
      const auto& c = v.config_changes.at(key);
      v.warnings.push_back(std::string(key) + " " + c[0].get<std::string>() + " -> " + c[1].get<std::string>() + at +
                           "bitwise mode is bitwise from" + from + " on, but another " +
                           (std::string(key) == "train.threads" ? "CPU thread count" : "chunk") +
                           " rounds differently: the run no longer equals one that kept it");
    }
  }
}

}  // namespace

void ResumeRefusal::raise() const {
  if (mismatch) throw ResumeMismatchError(message, hint);
  throw ProbeMismatchError(message, hint);
}

std::string data_files_changed(const nlohmann::json& was, const nlohmann::json& now) {
  if (!was.is_array() || !now.is_array()) return "";
  std::map<std::string, nlohmann::json> before, after;
  for (const auto& f : was)
    if (f.is_object() && f.contains("file") && f["file"].is_string()) before[f["file"].get<std::string>()] = f;
  for (const auto& f : now)
    if (f.is_object() && f.contains("file") && f["file"].is_string()) after[f["file"].get<std::string>()] = f;
  std::vector<std::string> changes;
  for (const auto& [name, f] : after) {
    const auto it = before.find(name);
    if (it == before.end())
      changes.push_back(name + " added");
    else if (it->second != f)
      changes.push_back(name + " changed");
  }
  for (const auto& [name, f] : before)
    if (!after.count(name)) changes.push_back(name + " removed");
  std::string out;
  for (size_t i = 0; i < changes.size() && i < 3; ++i) out += (i ? ", " : "") + changes[i];
  if (changes.size() > 3) out += " and " + std::to_string(changes.size() - 3) + " more";
  return out;
}

ResumeVerdict check_resume(const CheckpointManifest& m, const std::string& path, const JobConfig& config,
                           const ResumeFacts& facts) {
  ResumeVerdict v;
  const std::string where = path + "/" + kManifestFile;
  if (!m.meta.global_batch) v.refusals.push_back({false, missing_training_key(where, key::kGlobalBatch), ""});
  if (!m.meta.probe_loss) v.refusals.push_back({false, missing_training_key(where, key::kProbeLoss), ""});
  check_model(m, path, config, facts, v);
  check_batch_and_optimizer(m, path, config, facts, v);
  check_base_model(m, path, facts, v);
  check_teacher_identity(m, path, facts, v);
  check_drift(m, config, facts, v);
  v.probe_indices = probe_indices(m, facts);
  // A complete run trains no further: its trajectory cannot differ, so nothing to warn of.
  if (!v.drift.empty() && m.step < facts.total_steps) {
    v.warnings.push_back("resumed with " + v.drift + " changed since " + path +
                         ": the trajectory differs from an uninterrupted run");
  }
  note_config_changes(m, path, config, facts, v);
  return v;
}

std::optional<ResumeRefusal> check_probe(const ResumeVerdict& v, const std::string& path, const std::string& plan,
                                         double saved, double now, double tolerance) {
  const double rel = std::abs(now - saved) / std::max(std::abs(saved), 1e-12);
  if (rel <= tolerance) return std::nullopt;
  const std::string what = "resume check failed: the probe batch's loss is " + std::to_string(now) + " after loading " +
                           path + " on plan " + plan + ", " + std::to_string(saved) + " at save (relative " +
                           std::to_string(rel) + " > checkpoint.probe_tolerance " + std::to_string(tolerance) + ")";
  if (!v.drift.empty()) {
    return ResumeRefusal{true, what + "; changed since the checkpoint: " + v.drift,
                         "restore those settings, raise checkpoint.probe_tolerance to accept the change, or "
                         "--no-resume to start over"};
  }
  return ResumeRefusal{false, what,
                       "the checkpoint did not load into this layout correctly; report it, or --no-resume"};
}

}  // namespace gtrain
