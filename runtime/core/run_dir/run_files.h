// run_files.h: the files of a run directory as code (torch-free): each file's name and meaning in
// one table, the path of each, the one test of "is this a run directory", and the tolerant reader
// and the appender every JSON-lines record of the directory goes through.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gtrain {

// Every file and folder gtrain keeps in a run directory (docs/concepts.md#run-directory lists them).
enum class RunFile {
  config,              // config.toml
  plan,                // plan.json
  metrics,             // metrics.jsonl
  superseded_metrics,  // metrics.superseded.jsonl
  stages,              // stages.jsonl
  restarts,            // restarts.jsonl
  chain,               // chain.json
  identity,            // identity.json
  cluster_facts,       // cluster.json
  stage_scripts,       // stage-K.sbatch / stage-K.pbs (a name per stage: stage_script_name())
  tensorboard,         // tb/
  profile,             // profile/
  checkpoints,         // checkpoints/ (checkpoint.dir moves them)
  report,              // report.html
  heartbeats,          // .heartbeat/
  stage_outcome,       // .stage-outcome
  disk_reserve,        // .disk-reserve
  lock,                // .lock
  chain_lock,          // .chain.lock
};

struct RunFileInfo {
  RunFile file;
  const char* name;  // its name in the run directory (a folder's without the slash)
  bool folder;       // a folder, not a file
  bool marks_run;    // its presence says the directory is a run's (looks_like_run_dir)
  bool listed;       // docs/concepts.md lists it in the run directory's table (else in the text below it)
  bool per_stage;    // one a stage: `name` shows the pattern (K = the stage), RunDir::path refuses it
  const char* what;  // what it holds, as the docs say it
};

// The name of stage `k`'s batch script, `suffix` its scheduler's (".sbatch", ".pbs").
std::string stage_script_name(int k, const std::string& suffix);

// The table, in the order the docs list it.
const std::vector<RunFileInfo>& run_file_table();
const RunFileInfo& run_file_info(RunFile f);

// A run directory's paths. `root` as given (relative stays relative).
class RunDir {
 public:
  explicit RunDir(std::string root) : root_(std::move(root)) {}
  const std::string& root() const { return root_; }
  std::string path(RunFile f) const;  // root/name
  std::string config() const { return path(RunFile::config); }
  std::string plan() const { return path(RunFile::plan); }
  std::string metrics() const { return path(RunFile::metrics); }
  std::string stages() const { return path(RunFile::stages); }
  std::string restarts() const { return path(RunFile::restarts); }
  std::string chain() const { return path(RunFile::chain); }
  bool has(RunFile f) const;  // the file or folder exists

 private:
  std::string root_;
};

// Whether `dir` is a directory holding any of the files that mark a run (config.toml, metrics.jsonl,
// stages.jsonl, chain.json, checkpoints/).
bool looks_like_run_dir(const std::string& dir);
// "config.toml, metrics.jsonl, stages.jsonl, chain.json or checkpoints/": for the message saying a
// directory is not a run's.
std::string run_marker_names();

// The JSON objects of a JSON-lines file, in order; a line that is not an object (a killed writer's
// partial last line) is skipped, a missing file has none.
std::vector<nlohmann::json> read_json_lines(const std::string& path);
// Appends `record` as one line (room kept by the disk reserve); false (errno set) when it could not.
bool append_json_line(const std::string& path, const nlohmann::json& record);
// As append_json_line, warning on stderr that the record is lost when it could not.
void append_json_line_or_warn(const std::string& path, const nlohmann::json& record);
// Writes `doc` (pretty, 2 spaces) to `path` through a temporary file and a rename: a reader sees the
// old file or the new one. Error naming the file when it cannot.
void write_json_file(const std::string& path, const nlohmann::json& doc);
// The JSON object in `path`; null when the file is missing or is not a JSON object.
nlohmann::json read_json_file(const std::string& path);

}  // namespace gtrain
