// run_files.cpp: the run directory's file table, paths and JSON-lines reading (see run_files.h).
#include "runtime/core/run_dir/run_files.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "runtime/core/disk_space.h"
#include "runtime/core/errors.h"

namespace fs = std::filesystem;

namespace gtrain {

const std::vector<RunFileInfo>& run_file_table() {
  static const std::vector<RunFileInfo> table = {
      {RunFile::config, "config.toml", false, true, true, false, "the resolved config of the latest start"},
      {RunFile::plan, "plan.json", false, false, true, false, "the plan, with `flops_per_step` and `peak_flops`"},
      {RunFile::metrics, "metrics.jsonl", false, true, true, false,
       "one JSON object a line: train, eval and final records "
       "([reports](reports-and-monitoring.md#metricsjsonl))"},
      {RunFile::superseded_metrics, "metrics.superseded.jsonl", false, false, true, false,
       "the records of steps a later stage trained again"},
      {RunFile::stages, "stages.jsonl", false, true, true, false, "one record per stage"},
      {RunFile::restarts, "restarts.jsonl", false, false, true, false, "each restart after a failed or hung rank"},
      {RunFile::chain, "chain.json", false, true, true, false, "a submitted chain's jobs and states"},
      {RunFile::identity, "identity.json", false, false, true, false,
       "what defines the run: the config less what cannot change its trajectory, the data's and initial weights' "
       "fingerprints, gtrain's version ([runs](runs-and-identity.md))"},
      {RunFile::cluster_facts, "cluster.json", false, false, true, false,
       "what gtrain last read of the run's cluster: quiet windows, quotas left ([cluster facts](cluster-facts.md))"},
      {RunFile::stage_scripts, "stage-K.sbatch", false, false, true, true,
       "`gtrain submit`'s batch script of stage K (`.pbs` on PBS)"},
      {RunFile::tensorboard, "tb", true, false, true, false, "TensorBoard event files, one per stage"},
      {RunFile::checkpoints, "checkpoints", true, true, true, false, "the checkpoints (`checkpoint.dir` moves them)"},
      {RunFile::profile, "profile", true, false, true, false,
       "`log.profile_start`'s profile of each rank ([reports](reports-and-monitoring.md#profiling))"},
      {RunFile::report, "report.html", false, false, true, false, "`gtrain report`'s page"},
      {RunFile::heartbeats, ".heartbeat", true, false, false, false, "each rank's progress"},
      {RunFile::stage_outcome, ".stage-outcome", false, false, false, false, "how its ranks ended"},
      {RunFile::disk_reserve, kDiskReserveFile, false, false, false, false,
       "1 MiB kept free so the stage's records can be written on a full disk"},
      {RunFile::lock, ".lock", false, false, false, false, "the lock one run at a time holds"},
      {RunFile::chain_lock, ".chain.lock", false, false, false, false, "held while chain.json changes"},
  };
  return table;
}

const RunFileInfo& run_file_info(RunFile f) {
  for (const auto& info : run_file_table())
    if (info.file == f) return info;
  throw Error("run_file_info: a RunFile without a row in run_file_table()");
}

std::string RunDir::path(RunFile f) const {
  const RunFileInfo& info = run_file_info(f);
  if (info.per_stage)
    throw Error(std::string("RunDir::path: ") + info.name + " is one file a stage: stage_script_name()");
  return (fs::path(root_) / info.name).string();
}

std::string stage_script_name(int k, const std::string& suffix) {
  return "stage-" + std::to_string(k) + suffix;
}

bool RunDir::has(RunFile f) const {
  std::error_code ec;
  return fs::exists(path(f), ec);
}

bool looks_like_run_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return false;
  const RunDir d(dir);
  for (const auto& info : run_file_table())
    if (info.marks_run && d.has(info.file)) return true;
  return false;
}

std::string run_marker_names() {
  std::vector<std::string> names;
  for (const auto& info : run_file_table())
    if (info.marks_run) names.push_back(std::string(info.name) + (info.folder ? "/" : ""));
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return out;
}

std::vector<nlohmann::json> read_json_lines(const std::string& path) {
  std::vector<nlohmann::json> out;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object()) out.push_back(std::move(j));
  }
  return out;
}

bool append_json_line(const std::string& path, const nlohmann::json& record) {
  return append_record_line(path, record.dump());
}

void append_json_line_or_warn(const std::string& path, const nlohmann::json& record) {
  if (!append_json_line(path, record))
    std::cerr << "gtrain: warning: could not write " << path << " (" << std::strerror(errno)
              << "): this record is lost: " << record.dump() << std::endl;
}

void write_json_file(const std::string& path, const nlohmann::json& doc) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << doc.dump(2) << "\n";
    f.flush();
    if (!f) throw Error(path + ": cannot write", "check that the disk is not full and the run directory is writable");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw Error(path + ": cannot write: " + ec.message(), "check that the run directory is writable");
}

nlohmann::json read_json_file(const std::string& path) {
  std::ifstream f(path);
  if (!f) return nullptr;
  auto j = nlohmann::json::parse(f, nullptr, false);
  return j.is_object() ? j : nlohmann::json();
}

}  // namespace gtrain
