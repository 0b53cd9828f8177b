// cluster_facts.cpp: RUN_DIR/cluster.json, what gtrain last read of the run's cluster.
#include "runtime/core/run_dir/cluster_facts.h"

#include <filesystem>
#include <fstream>
#include <system_error>

#include "runtime/core/run_dir/run_files.h"

namespace gtrain {

namespace {

nlohmann::json quota_json(const QuotaLeft& q) {
  return {{"kind", q.kind},
          {"name", q.name},
          {"default", q.is_default},
          {"limit_gpu_hours", q.limit_gpu_hours},
          {"left_gpu_hours", q.left_gpu_hours},
          {"burn_gpu_hours_per_day", q.burn_gpu_hours_per_day},
          {"runs_out", q.runs_out}};
}

QuotaLeft quota_of(const nlohmann::json& j) {
  QuotaLeft q;
  q.kind = j.value("kind", "");
  q.name = j.value("name", "");
  q.is_default = j.value("default", false);
  q.limit_gpu_hours = j.value("limit_gpu_hours", 0.0);
  q.left_gpu_hours = j.value("left_gpu_hours", 0.0);
  q.burn_gpu_hours_per_day = j.value("burn_gpu_hours_per_day", 0.0);
  q.runs_out = j.value("runs_out", 0.0);
  return q;
}

}  // namespace

nlohmann::json ClusterFacts::to_json() const {
  nlohmann::json q = nlohmann::json::array();
  for (const auto& x : quotas) q.push_back(quota_json(x));
  return {{"read_at", read_at},
          {"read_by", read_by},
          {"scheduler", scheduler},
          {"cluster", cluster},
          {"partition", partition},
          {"gpus", gpus},
          {"free_gpus", free_gpus},
          {"max_time", max_time},
          {"quiet_for_gpus", quiet_for_gpus},
          {"history_weeks", history_weeks},
          {"quiet_windows", quiet_windows},
          {"quotas", q},
          {"notes", notes}};
}

ClusterFacts ClusterFacts::from_json(const nlohmann::json& j) {
  ClusterFacts f;
  f.read_at = j.value("read_at", 0.0);
  f.read_by = j.value("read_by", "");
  f.scheduler = j.value("scheduler", "");
  f.cluster = j.value("cluster", "");
  f.partition = j.value("partition", "");
  f.gpus = j.value("gpus", int64_t{0});
  f.free_gpus = j.value("free_gpus", int64_t{-1});
  f.max_time = j.value("max_time", "");
  f.quiet_for_gpus = j.value("quiet_for_gpus", int64_t{0});
  f.history_weeks = j.value("history_weeks", 0);
  f.quiet_windows = j.value("quiet_windows", std::vector<std::string>{});
  for (const auto& q : j.value("quotas", nlohmann::json::array())) f.quotas.push_back(quota_of(q));
  f.notes = j.value("notes", std::vector<std::string>{});
  return f;
}

const QuotaLeft* ClusterFacts::charged() const {
  for (const auto& q : quotas)
    if (q.is_default) return &q;
  return quotas.empty() ? nullptr : &quotas.front();
}

bool write_cluster_facts(const std::string& run_dir, const ClusterFacts& f) {
  const std::string path = RunDir(run_dir).path(RunFile::cluster_facts), tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << f.to_json().dump(2) << "\n";
    if (!out) return false;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  return !ec;
}

std::optional<ClusterFacts> read_cluster_facts(const std::string& run_dir) {
  std::ifstream in(RunDir(run_dir).path(RunFile::cluster_facts));
  if (!in) return std::nullopt;
  const auto j = nlohmann::json::parse(in, nullptr, false);
  if (!j.is_object()) return std::nullopt;
  try {
    return ClusterFacts::from_json(j);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace gtrain
