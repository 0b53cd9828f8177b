// job_config.h: JobConfig, the whole configuration of one training job, and its loader.
//
// Precedence: --set section.key=value on the command line, then GTRAIN_<SECTION>_<KEY>
// environment variables, then the TOML file, then the defaults in the structs.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "runtime/core/config/adapter_config.h"
#include "runtime/core/config/checkpoint_config.h"
#include "runtime/core/config/cluster_config.h"
#include "runtime/core/config/data_config.h"
#include "runtime/core/config/distill_config.h"
#include "runtime/core/config/log_config.h"
#include "runtime/core/config/model_config.h"
#include "runtime/core/config/optimizer_config.h"
#include "runtime/core/config/parallel_config.h"
#include "runtime/core/config/precision_config.h"
#include "runtime/core/config/schedule_config.h"
#include "runtime/core/config/train_config.h"

namespace gtrain {

struct JobConfig {
  ModelConfig model;
  AdapterConfig adapter;
  DistillConfig distill;
  DataConfig data;
  OptimizerConfig optimizer;
  TrainConfig train;
  PrecisionConfig precision;
  ParallelConfig parallel;
  CheckpointConfig checkpoint;
  LogConfig log;
  ScheduleConfig schedule;
  ClusterConfig cluster;

  std::string source_path;  // the TOML file it was read from ("" for defaults)
  // "section.key" -> what set it instead of the file ("--set train.steps=9", "environment GTRAIN_...").
  std::map<std::string, std::string> overrides;
  // The [model] keys the file, environment or --set gave; with a Hugging Face directory in
  // checkpoint.init_from the others come from its config.json (hf_config.h).
  std::set<std::string> model_keys_given;
  // Tables `gtrain sweep` reads beside the job ([search], [sweep]; kSweepSections) that the file
  // has: `gtrain run` trains the base job and says so.
  std::vector<std::string> sweep_sections;

  template <class V>
  void visit_sections(V& v) {
    v("model", model, "The network to train.");
    v("adapter", adapter, "Parameter-efficient fine-tuning: low-rank adapters on a frozen base.");
    v("distill", distill, "Knowledge distillation from a frozen teacher.");
    v("data", data, "Where samples come from; which samples form global batch k depends only on (seed, k).");
    v("optimizer", optimizer, "Optimizer and its hyper-parameters.");
    v("train", train, "Batch size, training length, seed, learning-rate schedule, clipping and evaluation.");
    v("precision", precision, "Numeric precision of compute.");
    v("parallel", parallel, "How the job is laid out over the granted devices.");
    v("checkpoint", checkpoint, "Periodic checkpoints.");
    v("log", log, "Run directory, console output and metrics.");
    v("schedule", schedule, "Stages: signals and deadlines that end one (save, exit 3, resume later), quota windows.");
    v("cluster", cluster,
      "What the scheduler does not know of your standing (a GPU-hour quota kept elsewhere), and how "
      "often a stage samples its partition for gtrain cluster.");
  }
};

// The top-level tables a sweep file adds to a job config (`gtrain sweep`, launcher/sweep/): not
// job sections, not unknown either.
inline const std::vector<std::string> kSweepSections = {"search", "sweep"};

// Section names in file order.
std::vector<std::string> section_names();

// Loads `path`, applies environment (`env`, usually the process environment) and `--set`
// overrides, validates every field and the cross-field rules. Throws ConfigError naming the
// file:line:column (or the override) and the key.
JobConfig load_job_config(const std::string& path, const std::vector<std::string>& sets,
                          const std::map<std::string, std::string>& env);

// Same, from TOML text (tests; `origin` stands in for the file name in messages).
JobConfig parse_job_config(const std::string& toml_text, const std::string& origin,
                           const std::vector<std::string>& sets, const std::map<std::string, std::string>& env);

// Cross-field rules (one of steps/epochs/tokens, heads divide width, ...). Throws ConfigError.
void validate_job_config(const JobConfig& c);

// The resolved configuration as TOML (every key, with its value).
std::string to_toml(const JobConfig& c);

// Every key as "section.key" -> its value as a TOML literal (checkpoints record it; a resume
// compares it with the new run's).
std::map<std::string, std::string> flat_fields(const JobConfig& c);

// The reference documentation: every section and key with its comment and default.
std::string reference_toml();

// The process environment as a map (only GTRAIN_* variables are looked at by the loader).
std::map<std::string, std::string> process_environment();

}  // namespace gtrain
