// cluster_facts.h: ClusterFacts, what gtrain last read of the cluster a run is queued on, kept in
// RUN_DIR/cluster.json (torch-free): the partition, its quiet windows for the run's GPU count and the
// quotas the user may charge with what is left of them. `gtrain submit` writes it, `gtrain report`
// refreshes it where the scheduler answers and reads it where it does not (its resource request).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace gtrain {

// A quota the user may charge, in GPU-hours.
struct QuotaLeft {
  std::string kind;                   // "account", "association", "QOS", "stated"
  std::string name;                   // "proj", "proj/alice", "burst"
  bool is_default = false;            // the user's default account / QOS
  double limit_gpu_hours = 0;         // the quota
  double left_gpu_hours = 0;          // what is left of it
  double burn_gpu_hours_per_day = 0;  // the recent rate it is used at (0 = unknown or none)
  double runs_out = 0;                // unix time it is used up at that rate (0 = not burning)
};

struct ClusterFacts {
  double read_at = 0;                      // unix time
  std::string read_by;                     // "gtrain submit", "gtrain report"
  std::string scheduler, cluster;          // "slurm", ClusterName ("" = unknown)
  std::string partition;                   // "" = none read
  int64_t gpus = 0, free_gpus = -1;        // the partition's GPUs, free when read (-1 = unknown)
  std::string max_time;                    // its MaxTime ("" = unknown)
  int64_t quiet_for_gpus = 0;              // the GPU count the windows are for
  int history_weeks = 0;                   // whole weeks the windows were learned from
  std::vector<std::string> quiet_windows;  // "Wed 05:00-09:00: 6 of 8 GPUs free in 80% of weeks"
  std::vector<QuotaLeft> quotas;           // GPU-hour quotas only
  std::vector<std::string> notes;          // what could not be read

  nlohmann::json to_json() const;
  static ClusterFacts from_json(const nlohmann::json& j);
  // The quota a stage charges by default: the default account's, else the first (nullptr = none).
  const QuotaLeft* charged() const;
};

// Writes RUN_DIR/cluster.json through a temporary file; false when it cannot (the run goes on).
bool write_cluster_facts(const std::string& run_dir, const ClusterFacts& f);
// RUN_DIR/cluster.json; nullopt when missing or unreadable.
std::optional<ClusterFacts> read_cluster_facts(const std::string& run_dir);

}  // namespace gtrain
