// resume_check.h: whether a run may resume from a checkpoint, decided from the manifest and the
// run's configuration alone (torch-free: no model, no tensors). The trainer applies the verdict: it
// throws the first refusal before reading any tensor, loads, compares the probe batch's loss
// (check_probe), then prints the warnings.
//
// Refused: a manifest a training run did not write (no global_batch or probe_loss), another model
// (a key that shapes its parameters changed), another global batch, another optimizer (its state
// cannot carry over). Allowed, as drift that changes the trajectory and is named if the probe check
// fails: model.dropout, train.seed, precision.dtype, the training data. Every other changed setting
// goes in the stage's ledger line; those that change the trajectory are warned of one by one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/core/checkpoint_manifest.h"
#include "runtime/core/config/job_config.h"

namespace gtrain {

// What the resuming run has beside its configuration.
struct ResumeFacts {
  int64_t data_vocab = 0;              // the training data's vocabulary (DataSpec::vocab; 0 = none)
  int64_t train_samples = 0;           // the training split's size
  nlohmann::json train_identity;       // Dataset::identity() of the training split
  bool has_eval = false;               // a held-out split exists
  int64_t global_batch = 0;            // this run's global batch (its layout's)
  int64_t total_steps = 0;             // this run's resolved length
  std::vector<int64_t> probe_indices;  // this run's probe batch (when the saved windows no longer exist)
  nlohmann::json base_model;           // [adapter] kind = "lora": CheckpointMeta::base_model of this run (else null)
  nlohmann::json teacher;              // [distill]: CheckpointMeta::teacher of this run (else null)
};

struct ResumeRefusal {
  bool mismatch = true;  // ResumeMismatchError (the configuration is what to fix; exit 2), else CheckpointError
  std::string message;
  std::string hint;
  [[noreturn]] void raise() const;
};

struct ResumeVerdict {
  std::vector<ResumeRefusal> refusals;  // in the order they are checked; a resume throws the first
  std::string drift;                    // "train.seed 1 -> 2, ...": changed settings that change the trajectory
  std::vector<std::string> warnings;    // after "gtrain: warning: ": rank 0 prints them once the probe passes
  nlohmann::json config_changes = nlohmann::json::object();  // "section.key": [was, now], for the ledger
  std::vector<int64_t> probe_indices;                        // the training windows the probe batch holds
  bool refused() const { return !refusals.empty(); }
};

// `path`: the checkpoint directory, as errors name it.
ResumeVerdict check_resume(const CheckpointManifest& manifest, const std::string& path, const JobConfig& config,
                           const ResumeFacts& facts);

// After loading: the probe batch's loss now against the one saved, within checkpoint.probe_tolerance
// (relative). A refusal names the drift when there is one (the configuration is what to fix).
std::optional<ResumeRefusal> check_probe(const ResumeVerdict& verdict, const std::string& path, const std::string& plan,
                                         double saved, double now, double tolerance);

// The files that differ between two Dataset::identity() lists: "s_0.bin added, s_2.bin changed".
std::string data_files_changed(const nlohmann::json& was, const nlohmann::json& now);

}  // namespace gtrain
