// run_identity.h: what defines a run (torch-free), kept in RUN_DIR/identity.json: the resolved
// config less what cannot change its trajectory, the layout where it can, the data files' and the
// initial weights' fingerprints, and gtrain's version. Two runs with one identity train the same
// thing: `gtrain run` says so before repeating a finished one, `gtrain runs diff` shows the rest.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/core/config/job_config.h"
#include "runtime/core/plan.h"

namespace gtrain {

struct RunIdentity {
  std::map<std::string, std::string> config;  // "section.key" -> TOML literal (flat_fields), trajectory keys only
  std::string layout;  // how the sums are split: "dp=2 tp=1 pp=1 zero=1" (off mode), "bitwise" (one sum on any)
  nlohmann::json data = nlohmann::json::array();  // [{split, file, bytes, hash}] of the files the config reads
  nlohmann::json init = nlohmann::json::array();  // the same for checkpoint.init_from's files ([] = a fresh init)
  std::string version;                            // gtrain's

  std::string id() const;  // 12 hex digits: a hash of everything above
  nlohmann::json to_json() const;
  static RunIdentity from_json(const nlohmann::json& j);
};

// The layout part of an identity: "dp=2 tp=1 pp=1 zero=1", " offload" when the optimizer step runs on
// the host (micro-batches and recompute change no sum).
std::string identity_layout(const Plan& plan);

// gtrain's version ("0.1.0").
const char* gtrain_version();

// Whether "section.key" can change a run's trajectory (false: where it runs, logs, saves and is
// scheduled, how it is laid out, the data's paths, which the fingerprints stand for).
bool defines_trajectory(const std::string& key);

// The identity of `cfg` run on `layout` ("dp=2 tp=1 pp=1 zero=1"; ignored in bitwise mode). Reads the
// first and last 64 KiB of each data and initial-weights file.
RunIdentity run_identity(const JobConfig& cfg, const std::string& layout);

std::optional<RunIdentity> read_run_identity(const std::string& run_dir);
void write_run_identity(const std::string& run_dir, const RunIdentity& id);

// What differs between two identities, a line each ("train.lr: 1e-3 -> 2e-3", "data: s_1.bin
// changed", "gtrain: 0.1.0 -> 0.2.0"); empty when they are equal.
std::vector<std::string> identity_differences(const RunIdentity& a, const RunIdentity& b);

// Whether the run in `run_dir` finished: its last stage completed all its steps.
bool run_finished(const std::string& run_dir);

// A finished run beside `run_dir` (a sibling folder: the same log.root) with identity `id`, other
// than `run_dir` itself; nullopt when there is none.
std::optional<std::string> finished_run_like(const std::string& run_dir, const RunIdentity& id);

}  // namespace gtrain
