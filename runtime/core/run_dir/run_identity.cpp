// run_identity.cpp: a run's identity, computed, kept and compared (see run_identity.h).
#include "runtime/core/run_dir/run_identity.h"

#include <glob.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "runtime/core/fnv.h"
#include "runtime/core/run_dir/run_files.h"
#include "runtime/core/run_dir/stage_records.h"

#ifndef GTRAIN_VERSION
#define GTRAIN_VERSION "0.0.0"
#endif

namespace fs = std::filesystem;

namespace gtrain {
namespace {

// A file's fingerprint: its size and a hash of its first and last 64 KiB (what the token datasets'
// own identity reads: a changed file almost always changes there, and reading it all would cost a
// pass over a corpus at every start).
nlohmann::json file_fingerprint(const fs::path& file, const std::string& split, const std::string& name) {
  std::error_code ec;
  const auto bytes = fs::file_size(file, ec);
  nlohmann::json out = {{"split", split}, {"file", name}, {"bytes", ec ? -1 : static_cast<int64_t>(bytes)}};
  std::ifstream in(file, std::ios::binary);
  if (!in || ec) {
    out["hash"] = "unreadable";
    return out;
  }
  constexpr size_t kEdge = 64 << 10;
  std::string buf(std::min<size_t>(kEdge, bytes), '\0');
  in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
  Fnv1a h;
  h.add(std::string_view(buf.data(), static_cast<size_t>(in.gcount())));
  if (bytes > kEdge) {
    in.seekg(static_cast<std::streamoff>(bytes - std::min<size_t>(kEdge, bytes - kEdge)));
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    h.add(std::string_view(buf.data(), static_cast<size_t>(in.gcount())));
  }
  out["hash"] = h.hex();
  return out;
}

// The files a path or glob names, sorted (a folder: every regular file beneath it).
std::vector<fs::path> files_of(const std::string& pattern) {
  std::vector<fs::path> out;
  if (pattern.empty()) return out;
  std::error_code ec;
  if (fs::is_directory(pattern, ec)) {
    for (const auto& e : fs::recursive_directory_iterator(pattern, ec))
      if (e.is_regular_file(ec)) out.push_back(e.path());
  } else {
    glob_t g{};
    if (::glob(pattern.c_str(), 0, nullptr, &g) == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
    globfree(&g);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void add_files(nlohmann::json& out, const std::string& pattern, const std::string& split,
               const std::string& prefix = "") {
  std::error_code ec;
  const bool folder = fs::is_directory(pattern, ec);
  for (const auto& f : files_of(pattern)) {
    const std::string name = folder ? fs::relative(f, pattern, ec).string() : f.filename().string();
    if (!prefix.empty() && name.rfind(prefix, 0) != 0) continue;
    out.push_back(file_fingerprint(f, split, name));
  }
}

}  // namespace

std::string identity_layout(const Plan& plan) {
  // The optimizer step offloaded runs on the host: another device's rounding.
  return "dp=" + std::to_string(plan.dp) + " tp=" + std::to_string(plan.tp) + " pp=" + std::to_string(plan.pp) +
         " zero=" + std::to_string(plan.zero) + (plan.offload ? " offload" : "");
}

const char* gtrain_version() {
  return GTRAIN_VERSION;
}

bool defines_trajectory(const std::string& key) {
  for (const char* section : {"parallel.", "checkpoint.", "log.", "schedule.", "cluster."})
    if (key.rfind(section, 0) == 0) return false;
  for (const char* k : {"train.threads", "train.reproducible_chunk", "data.path", "data.eval_path", "data.cache_dir",
                        "data.train_prefix", "data.eval_prefix", "data.prefetch", "data.workers"})
    if (key == k) return false;
  return true;
}

RunIdentity run_identity(const JobConfig& cfg, const std::string& layout) {
  RunIdentity id;
  for (const auto& [key, value] : flat_fields(cfg))
    if (defines_trajectory(key)) id.config[key] = value;
  // Off mode: another layout sums in another order (equal to rounding); bitwise mode: the chunk
  // alone decides the sums.
  id.layout = cfg.train.reproducible == Reproducible::bitwise ? "bitwise" : layout;
  const DataConfig& d = cfg.data;
  if (d.kind == DataKind::idx) {
    add_files(id.data, d.path, "train", d.train_prefix);
    if (!d.eval_prefix.empty()) add_files(id.data, d.path, "eval", d.eval_prefix);
  } else if (d.kind != DataKind::synthetic) {
    add_files(id.data, d.path, "train");
    add_files(id.data, d.eval_path, "eval");
  }
  add_files(id.init, cfg.checkpoint.init_from, "init");
  id.version = gtrain_version();
  return id;
}

nlohmann::json RunIdentity::to_json() const {
  return {{"id", id()}, {"config", config}, {"layout", layout}, {"data", data}, {"init", init}, {"version", version}};
}

std::string RunIdentity::id() const {
  const nlohmann::json j = {
      {"config", config}, {"layout", layout}, {"data", data}, {"init", init}, {"version", version}};
  const std::string text = j.dump();
  return Fnv1a().add(text).hex(12);
}

RunIdentity RunIdentity::from_json(const nlohmann::json& j) {
  RunIdentity id;
  if (!j.is_object()) return id;
  if (j.contains("config") && j["config"].is_object())
    for (const auto& [k, v] : j["config"].items())
      if (v.is_string()) id.config[k] = v.get<std::string>();
  if (j.contains("layout") && j["layout"].is_string()) id.layout = j["layout"];
  if (j.contains("data") && j["data"].is_array()) id.data = j["data"];
  if (j.contains("init") && j["init"].is_array()) id.init = j["init"];
  if (j.contains("version") && j["version"].is_string()) id.version = j["version"];
  return id;
}

std::optional<RunIdentity> read_run_identity(const std::string& run_dir) {
  const auto j = read_json_file(RunDir(run_dir).path(RunFile::identity));
  if (!j.is_object()) return std::nullopt;
  return RunIdentity::from_json(j);
}

void write_run_identity(const std::string& run_dir, const RunIdentity& id) {
  write_json_file(RunDir(run_dir).path(RunFile::identity), id.to_json());
}

namespace {

// "s_1.bin changed", "s_2.bin added", "s_0.bin removed" between two fingerprint lists.
void file_differences(const char* what, const nlohmann::json& a, const nlohmann::json& b,
                      std::vector<std::string>& out) {
  std::map<std::string, nlohmann::json> before, after;
  const auto key = [](const nlohmann::json& f) { return f.value("split", "") + ":" + f.value("file", ""); };
  for (const auto& f : a) before[key(f)] = f;
  for (const auto& f : b) after[key(f)] = f;
  for (const auto& [k, f] : before) {
    const auto it = after.find(k);
    if (it == after.end())
      out.push_back(std::string(what) + ": " + k + " removed");
    else if (it->second != f)
      out.push_back(std::string(what) + ": " + k + " changed (" + std::to_string(f.value("bytes", int64_t{-1})) +
                    " -> " + std::to_string(it->second.value("bytes", int64_t{-1})) + " bytes)");
  }
  for (const auto& [k, f] : after)
    if (!before.count(k)) out.push_back(std::string(what) + ": " + k + " added");
}

}  // namespace

std::vector<std::string> identity_differences(const RunIdentity& a, const RunIdentity& b) {
  std::vector<std::string> out;
  std::map<std::string, std::pair<std::string, std::string>> keys;
  for (const auto& [k, v] : a.config) keys[k].first = v;
  for (const auto& [k, v] : b.config) keys[k].second = v;
  for (const auto& [k, v] : keys) {
    if (v.first == v.second) continue;
    out.push_back(k + ": " + (v.first.empty() ? "(none)" : v.first) + " -> " +
                  (v.second.empty() ? "(none)" : v.second));
  }
  if (a.layout != b.layout) out.push_back("layout: " + a.layout + " -> " + b.layout);
  file_differences("data", a.data, b.data, out);
  file_differences("initial weights", a.init, b.init, out);
  if (a.version != b.version) out.push_back("gtrain: " + a.version + " -> " + b.version);
  return out;
}

bool run_finished(const std::string& run_dir) {
  const auto stages = read_stage_records(run_dir);
  if (stages.empty()) return false;
  const StageRecord& last = stages.back();
  return last.completed() && (last.total_steps <= 0 || last.step_to >= last.total_steps);
}

std::optional<std::string> finished_run_like(const std::string& run_dir, const RunIdentity& id) {
  std::error_code ec;
  const fs::path self = fs::weakly_canonical(run_dir, ec);
  const fs::path parent = self.parent_path();
  const std::string want = id.id();
  std::vector<fs::path> siblings;
  for (const auto& e : fs::directory_iterator(parent, ec))
    if (e.is_directory(ec) && e.path() != self) siblings.push_back(e.path());
  std::sort(siblings.begin(), siblings.end());
  for (const auto& dir : siblings) {
    const auto other = read_run_identity(dir.string());
    if (other && other->id() == want && run_finished(dir.string()))
      return (fs::path(run_dir).parent_path() / dir.filename()).string();
  }
  return std::nullopt;
}

}  // namespace gtrain
